"""`bt base` and `bt continue` through the Engine contract with a second, deliberately different
backend: "mlx-fresh" ignores every reuse hint (a fresh prefill per request and per answer phase,
no shared prefix, no live state). Identical tokens prove that the pipeline holds no backend
object and that reuse never changes what is generated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.store import RunStore

CONTINUE = [
    "--anchors",
    "4,8,16",
    "--budget",
    "4",
    "--answer-budget",
    "4",
    "--restarts",
    "4,8",
    "--samples",
    "2",
    "--batch-size",
    "4",
]


def _run(runs: Path, model: Path, name: str, backend: str) -> Path:
    base = [
        "base",
        "--cohort",
        "demo",
        "--limit",
        "2",
        "--model",
        str(model),
        "--runs-dir",
        str(runs),
        "--run",
        name,
        "--max-tokens",
        "24",
        "--batch-size",
        "2",
        "--backend",
        backend,
    ]
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["continue", str(runs / name), *CONTINUE, "--backend", backend])
    assert res.exit_code == 0, res.output
    return runs / name


def _samples(run: Path):
    with RunStore(run) as s:
        df = s.samples_frame()
        man = s.manifest()
    df = df.sort_values(["cell_id", "kind", "anchor", "budget", "branch"]).reset_index(drop=True)
    return df, man


def test_fresh_prefill_backend_gives_identical_runs(tmp_path: Path, tiny_model_dir: Path) -> None:
    reuse, man_reuse = _samples(_run(tmp_path, tiny_model_dir, "reuse", "mlx"))
    fresh, man_fresh = _samples(_run(tmp_path, tiny_model_dir, "fresh", "mlx-fresh"))
    assert man_reuse["engine"]["backend"] == "mlx" and man_fresh["engine"]["backend"] == "mlx-fresh"
    assert set(reuse["kind"]) == {"base", "probe", "restart"}
    assert len(reuse) == len(fresh) > 2 * 3 * 2
    keys = ["cell_id", "kind", "anchor", "budget", "branch", "seed", "prefix_len", "finish_reason"]
    assert reuse[keys].equals(fresh[keys])
    for a, b in zip(reuse.itertuples(), fresh.itertuples(), strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist(), (a.cell_id, a.kind, a.anchor, a.branch)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4, equal_nan=True)


def test_a_run_refuses_another_backend(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = _run(tmp_path, tiny_model_dir, "r", "mlx")
    res = CliRunner().invoke(app, ["continue", str(run), *CONTINUE, "--backend", "mlx-fresh"])
    assert res.exit_code != 0
    assert "engine" in str(res.exception) + res.output
