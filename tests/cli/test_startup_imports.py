"""Fast answers (issue 30, item 4): nothing heavy is imported before a command needs it.
`import breakthrough.cli` (what every `bt` call runs first, `--help` and `--version` included)
loads none of pandas, scipy, matplotlib, mlx, mlx_lm, sympy, NumPy (nor rich, which only a
command that prints tables needs); `bt status` on a run loads none of them either (it reads the
store's counts without pandas: pipeline/status.py), `bt verify` leaves scipy.stats alone;
`bt models list` and `bt cohorts list` load no model library. Times are measured by
bench/startup.py, not asserted here."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bt_cli import bt_env, run_bt
from store_writer import write_run

HEAVY = (
    "pandas",
    "scipy",
    "matplotlib",
    "mlx",
    "mlx_lm",
    "sympy",
    "numpy",
    "transformers",
    "huggingface_hub",
    "pyarrow",
)


def _imported(stderr: str) -> set[str]:
    """Every module named by `-X importtime` / PYTHONPROFILEIMPORTTIME output."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_import_cli_loads_nothing_heavy(tmp_path):
    code = (
        "import sys, breakthrough.cli; "
        f"print(' '.join(m for m in {(*HEAVY, 'rich')!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=120,
        cwd=tmp_path,
    )  # the installed package
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], f"import breakthrough.cli loaded {proc.stdout.strip()}"


def _top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize(
    "args", [("--version",), ("--help",), ("cohorts", "list"), ("models", "list")], ids=" ".join
)
def test_light_commands_load_no_heavy_library(args, tmp_path):
    proc = run_bt(*args, PYTHONPROFILEIMPORTTIME="1", HF_HOME=str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr
    heavy = _top_level(_imported(proc.stderr)) & set(HEAVY) - {"huggingface_hub"}
    assert not heavy, f"bt {' '.join(args)} imported {sorted(heavy)}"
    if args == ("models", "list"):  # only the cache's paths, not the downloader
        assert "huggingface_hub.file_download" not in _imported(proc.stderr)


def test_status_and_verify_leave_scipy_stats_and_models_alone(tmp_path):
    run = write_run(tmp_path / "runs" / "small")
    for args in (("status", run), ("verify", run)):
        proc = run_bt(*args, PYTHONPROFILEIMPORTTIME="1")
        assert proc.returncode == 0, proc.stderr
        mods = _imported(proc.stderr)
        assert "scipy.stats" not in mods and not _top_level(mods) & {
            "mlx",
            "mlx_lm",
            "sympy",
            "matplotlib",
        }, args


@pytest.mark.parametrize("json_flag", [(), ("--json",)], ids=["table", "--json"])
def test_status_of_a_run_loads_no_heavy_library(tmp_path, json_flag):
    """pandas (and pyarrow under it) took most of `bt status`'s 0.8 s; NumPy, which only
    packing arrays into a store needs, is not loaded to read one."""
    run = write_run(tmp_path / "runs" / "small")
    proc = run_bt("status", run, *json_flag, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0, proc.stderr
    heavy = _top_level(_imported(proc.stderr)) & set(HEAVY)
    assert not heavy, f"bt status imported {sorted(heavy)}"
    assert "fake:arith/L5/r0" in proc.stdout  # it did read the run


def test_continue_reads_its_runs_without_pandas(tmp_path, tiny_model_dir):
    """`bt continue` (and its --dry-run) read base traces and panels from the store as tuples:
    pandas, which only the analyses need, cost it a good part of a second before its first
    sample. The dry run loads no model library either. It refuses what `bt continue`
    refuses, a run whose model is not on this machine too, so it plans the tiny model's run;
    with a fixed --memory-gb (`auto` asks MLX what the device offers)."""
    from continue_fixture import two_cell_run

    run = two_cell_run(tmp_path / "tiny", tiny_model_dir)
    small = ("--anchors", "64,128", "--budget", "4", "--answer-budget", "4", "--restarts", "4")
    dry = ("--dry-run", "--memory-gb", "1")
    proc = run_bt("continue", run, *small, *dry, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0 and "probes     16 samples" in proc.stdout, proc.stderr
    heavy = _top_level(_imported(proc.stderr)) & set(HEAVY)
    assert not heavy - {"numpy"}, f"bt continue --dry-run imported {sorted(heavy)}"

    proc = run_bt("continue", run, *small, "--topup", "none", PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0, proc.stderr
    assert "pandas" not in _top_level(_imported(proc.stderr))
    assert "fx: 2 cells; samples probes 16" in " ".join(proc.stderr.split())
