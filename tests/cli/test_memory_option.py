"""`--memory-gb auto|GB` (issue 28; issue 29 item 7: `inf` reached a traceback) and `--kv-bits`:
a bad value is one line naming the option, exit 2, nothing written, whatever the value; and
`--kv-bits 8` runs on the offline default model (head_dim 64) and a plain rerun keeps it."""

from __future__ import annotations

import pytest
from bt_cli import run_bt, stored_manifest


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-3", "lots", "1e9"])
def test_a_bad_memory_budget_is_one_line_and_writes_nothing(tmp_path, value) -> None:
    runs = tmp_path / "runs"
    res = run_bt("continue", "--runs-dir", runs, "--memory-gb", value)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--memory-gb" in lines[0] and "auto" in lines[0], res.stderr
    assert "Traceback" not in res.stderr and not runs.exists()


def test_help_says_what_auto_chooses() -> None:
    res = run_bt("continue", "--help")
    text = " ".join(res.stdout.split())
    assert res.returncode == 0 and "'auto'" in text and "recommended working set" in text


@pytest.mark.parametrize("value", ["3", "16", "0"])
def test_kv_bits_other_than_4_or_8_is_one_line(tmp_path, value) -> None:
    runs = tmp_path / "runs"
    res = run_bt("continue", "--runs-dir", runs, "--kv-bits", value)
    assert (
        res.returncode == 2
        and res.stderr.strip() == f"bt: error: --kv-bits: expected 4 or 8, got {value}"
    )
    assert not runs.exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--attention", "fused"),
            "--attention: expected one of auto, group, shared, copies, got 'fused'",
        ),
        (
            ("--attention", "group", "--backend", "mlx-fresh"),
            "--attention applies to --backend mlx, not mlx-fresh",
        ),
    ],
)
def test_attention_other_than_the_paths_is_one_line(tmp_path, args, line) -> None:
    runs = tmp_path / "runs"
    res = run_bt("continue", "--runs-dir", runs, *args)
    assert res.returncode == 2 and res.stderr.strip() == f"bt: error: {line}", res.stderr
    assert not runs.exists()


@pytest.mark.slow
def test_kv_bits_on_the_offline_default_model_runs_and_a_plain_rerun_works(offline_model, tmp_path):
    """A walk from an empty folder (issue 40 item 1): `--kv-bits 8` on SmolLM2-135M (head_dim
    64) crashed in `shared_kv` (an answer phase continuing a kept quantized row: `'tuple'
    object has no attribute 'shape'`) and left a run its plain rerun crashed on. Now it runs,
    records its setting, and a plain rerun (which keeps the run's setting) has nothing to do."""
    root = tmp_path / "runs"
    base = ("--cohort", "arith", "--limit", "2", "--max-tokens", "24")
    proc = run_bt("base", *base, "--runs-dir", root, "--run", "r", timeout=600)
    assert proc.returncode == 0, proc.stderr
    cont = ("--anchors", "4,8", "--samples", "2", "--budget", "4", "--answer-budget", "4")
    proc = run_bt("continue", root / "r", *cont, "--restarts", "4,8", "--kv-bits", "8", timeout=900)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert stored_manifest(root / "r")["continuation"]["kv_bits"] == 8
    again = run_bt("continue", root / "r", *cont, "--restarts", "4,8", timeout=600)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert "Traceback" not in again.stderr
