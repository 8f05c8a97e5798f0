"""A fleet of two `bt serve` processes (the tiny model, loopback, stopped by PID) behind
`--backend vllm --endpoint A,B`: `bt base` and `bt continue` give exactly the local MLX
backend's samples, every request of a cell reaches one server, and a server killed mid-run
(SIGKILL) has its cells re-routed: the run ends with the full sample set, nothing duplicated."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from bt_cli import bt_in_process
from engine.serve_procs import BT, bt_serve

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.fleet import rendezvous_order
from breakthrough.engine.http_backend import HttpEngine
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.protocol import Sampling
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
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def _bt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BT, *args], capture_output=True, text=True, env=ENV, timeout=300)


def _base_args(runs: Path, model: Path, name: str, engine: list[str]) -> list[str]:
    return [
        "base",
        "--cohort",
        "demo",
        "--limit",
        "3",
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
        *engine,
    ]


def _run(
    runs: Path, model: Path, name: str, engine: list[str], copy_base_to: str | None = None
) -> Path:
    """`bt base` then `bt continue` of run `name` through the installed `bt`; with
    `copy_base_to`, the base run is also copied under that name before it is continued (the
    killed run's base: the same `bt base` on the same servers, made once)."""
    res = _bt(*_base_args(runs, model, name, engine))
    assert res.returncode == 0, res.stderr[-3000:]
    if copy_base_to is not None:
        shutil.copytree(runs / name, runs / copy_base_to)
    res = _bt("continue", str(runs / name), *CONTINUE, *engine)
    assert res.returncode == 0, res.stderr[-3000:]
    return runs / name


def _local_run(runs: Path, model: Path) -> Path:
    """The reference: the same run on the local MLX backend, made in this process (the test's
    subject is the fleet; the reference only needs the local backend's samples)."""
    engine = ["--backend", "mlx"]
    bt_in_process(*_base_args(runs, model, "local", engine))
    bt_in_process("continue", runs / "local", *CONTINUE, *engine)
    return runs / "local"


def _samples(run: Path):
    with RunStore(run) as s:
        df = s.samples_frame()
        man = s.manifest()
    return df.sort_values(["cell_id", "kind", "anchor", "budget", "branch"]).reset_index(
        drop=True
    ), man


def test_two_bt_serve_endpoints_give_the_local_tokens(tmp_path: Path, tiny_model_dir: Path) -> None:
    local, man_local = _samples(_local_run(tmp_path, tiny_model_dir))
    with bt_serve(tiny_model_dir, n=2) as (a, b):
        assert a.url.startswith("http://127.0.0.1:")  # loopback unless asked
        fleet, man = _samples(
            _run(
                tmp_path,
                tiny_model_dir,
                "fleet",
                ["--backend", "vllm", "--endpoint", f"{a.url},{b.url}"],
                copy_base_to="killed",
            )
        )
        cells_a, cells_b = (set(p.get_json("/bt/cells")["cells"]) for p in (a, b))
        killed = _continue_killing_one(tmp_path, tiny_model_dir, a, b)
    assert man["engine"]["backend"] == "vllm" and man["engine"]["server"] == "bt-serve"
    assert man["engine"]["logprobs"] == "raw" and man["engine"]["token_ids"] == "exact"
    keys = ["cell_id", "kind", "anchor", "budget", "branch", "seed", "prefix_len", "finish_reason"]
    assert len(local) == len(fleet) > 3 * 3 * 2 and local[keys].equals(fleet[keys])
    for x, y in zip(local.itertuples(), fleet.itertuples(), strict=True):
        assert x.token_ids.tolist() == y.token_ids.tolist(), (x.cell_id, x.kind, x.anchor, x.branch)
        # Same ids; the floats may differ in the last bits where the server's batch shape picks
        # other BLAS kernels than the local run's.
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=2e-3, equal_nan=True)
        np.testing.assert_allclose(x.entropies, y.entropies, atol=2e-3, equal_nan=True)
    # Cell affinity: each cell's requests (base, probes, answer phases, restarts) on one server.
    cells = set(local["cell_id"])
    assert cells <= (cells_a | cells_b) and not (cells_a & cells_b & cells)
    # The run whose server A was SIGKILLed during `bt continue`: the full set, the same tokens.
    assert not killed.duplicated(["cell_id", "kind", "anchor", "budget", "branch"]).any()
    assert local[keys].equals(killed[keys])
    for x, y in zip(local.itertuples(), killed.itertuples(), strict=True):
        assert x.token_ids.tolist() == y.token_ids.tolist(), (x.cell_id, x.kind, x.anchor, x.branch)


def _continue_killing_one(runs: Path, model: Path, a, b):
    """`bt continue` of RUNS/killed (the fleet's `bt base` on both servers, copied before the
    fleet run was continued) during which A is SIGKILLed as soon as it has answered one
    continuation request (bounded polling); returns the finished samples."""
    engine = ["--backend", "vllm", "--endpoint", f"{a.url},{b.url}"]
    assert (runs / "killed" / "store.sqlite").is_file()

    def served() -> int:  # continuation requests of the run's cells (not startup probes)
        return sum(
            n for cell, n in a.get_json("/bt/cells")["cells"].items() if cell.startswith("tiny")
        )

    before = served()
    a_cells_before = set(a.get_json("/bt/cells")["cells"])
    proc = subprocess.Popen(
        [BT, "continue", str(runs / "killed"), *CONTINUE, *engine],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        for _ in range(6000):  # at most ~5 minutes
            if proc.poll() is not None or served() > before:
                break
            time.sleep(0.05)
        a.kill()
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    # A's cells (it served their base traces) were finished by B.
    owned = {c for c in a_cells_before if c.startswith("tiny")}
    if owned:
        assert owned & set(b.get_json("/bt/cells")["cells"])
    return _samples(runs / "killed")[0]


def test_a_server_killed_mid_run_has_its_cells_rerouted(tiny_model, tiny_model_dir: Path) -> None:
    prompt = [1, 504, 1028, 2001, 77, 9]
    vocab = int(tiny_model.config["vocab_size"])
    with bt_serve(tiny_model_dir, n=2, batch_size=2) as (a, b):
        # Cells chosen so that the killed server owns most of them (routing is by URL and cell).
        cells = [f"m:p{i}" for i in range(60)]
        mine = [c for c in cells if rendezvous_order([a.url, b.url], c)[0] == a.url][:8]
        other = [c for c in cells if c not in mine][:4]
        reqs = [
            GenRequest(
                key=c, prompt=prompt + [i + 3], max_tokens=16, seed=100 + i, sampling=Sampling()
            )
            for i, c in enumerate(mine + other)
        ]
        eng = HttpEngine(
            "vllm",
            [a.url, b.url],
            tiny_model.eos_ids,
            vocab,
            max_inflight=2,
            policy=RetryPolicy(attempts=3, backoff_s=0.05, timeout_s=60),
        )
        got, killed = {}, False
        for res in eng.generate(reqs):
            assert res.key not in got  # nothing duplicated
            got[res.key] = res
            if not killed and res.endpoint == a.url:
                a.kill()  # while its other cells are queued or in flight
                killed = True
        assert killed and set(got) == {r.key for r in reqs}
        assert all(r.finish_reason != "error" for r in got.values()), [
            r.error for r in got.values()
        ]
        moved = [c for c in mine if got[c].endpoint == b.url]
        assert len(moved) >= 8 - 2 - 1  # at most the first result and one more in flight were A's
        assert any(a.url in n for n in eng.notes)
    local = {
        r.key: r
        for r in MlxEngine(tiny_model.model, tiny_model.eos_ids, batch_size=4).generate(reqs)
    }
    for key, res in got.items():
        assert res.tokens == local[key].tokens, key


def test_no_endpoint_is_one_line_and_writes_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    res = _bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--model",
        str(tiny_model_dir),
        "--runs-dir",
        str(tmp_path),
        "--run",
        "r",
        "--backend",
        "vllm",
        "--endpoint",
        "http://127.0.0.1:9",
    )
    assert res.returncode == 2 and "no endpoint answers" in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("bt: error:")]
    assert len(errors) == 1 and "http://127.0.0.1:9" in errors[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--backend", "vllm"], "needs --endpoint"),
        (["--backend", "mlx", "--endpoint", "http://127.0.0.1:9"], "--endpoint applies"),
        (["--backend", "sglang", "--endpoint", "127.0.0.1:9"], "expected http://HOST:PORT"),
        (
            ["--backend", "vllm", "--endpoint", "http://127.0.0.1:9", "--max-inflight", "-1"],
            "--max-inflight",
        ),
    ],
)
def test_engine_option_mistakes_are_one_line(tmp_path: Path, args, words) -> None:
    res = _bt(
        "base", "--cohort", "demo", "--limit", "1", "--runs-dir", str(tmp_path), "--run", "r", *args
    )
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


def test_an_error_row_is_stored_and_read_back(tmp_path: Path) -> None:
    with RunStore(tmp_path / "r", create=True) as s:
        assert s.errors() == []
        s.add_error(
            "m:p1",
            "probe:64:0",
            "http://127.0.0.1:9/v1/completions: HTTP 500 after 4 attempts",
            "http://127.0.0.1:9",
        )
    with RunStore(tmp_path / "r", readonly=True) as s:
        (row,) = s.errors()
    assert (
        row["cell_id"] == "m:p1" and row["request"] == "probe:64:0" and "HTTP 500" in row["message"]
    )
