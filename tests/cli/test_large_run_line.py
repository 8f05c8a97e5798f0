"""The one line a command about to generate more than a million tokens says before it starts
(issue 30, item 2), for `bt continue` and `bt continue --add-budget`, through the installed
`bt` on runs of the tiny model: said on stdout right after the run's announcement, before the
model loads, with the token bound its `--dry-run` gives; never said for a small plan.

A big plan is left to run only until the line shows; then the test presses Ctrl-C (SIGINT to
the process group), as a user who reads it would. A small plan runs to its end."""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
from pathlib import Path

from bt_cli import run_bt, start_bt
from continue_fixture import make_run, store_probes, two_cell_run

from breakthrough.protocol import DEFAULT

LARGE = "a large run"
# A cell's box at ~100 reasoning tokens of ~300: anchors 64, 128, 256 fit its trace.
TWENTY_CELLS = {f"p{i:02d}": (100, 200) for i in range(20)}


def _bound(dry_run_stdout: str) -> int:
    """The tokens a `--dry-run` plan may generate: the sum of its phases' bounds."""
    return sum(
        int(n.replace(",", "")) for n in re.findall(r"at most ([\d,]+) tokens", dry_run_stdout)
    )


def _stdout_until(proc, needle: str, timeout: float = 240) -> list[str]:
    """`proc`'s stdout lines up to the first holding `needle` (or to its end); then Ctrl-C to
    its process group, and its exit awaited. A reader thread keeps a silent, still-running
    process from blocking the test past `timeout`."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=timeout)
            if line is None:
                break
            seen.append(line)
            if needle in line:
                break
    except queue.Empty:
        pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return seen


def _with_probes(run: Path) -> Path:
    """Every cell an A2 target whose anchors 64, 128 and 256 the arm re-probes."""
    return store_probes(run, {64: False, 128: True, 256: True})


def _assert_large_line(lines: list[str], run: Path, bound: int) -> None:
    said = [line for line in lines if LARGE in line]
    assert len(said) == 1, lines
    assert said[0].startswith(f"{run.name}: {LARGE}: at most {bound:,} tokens ("), said[0]
    assert said[0].endswith("--dry-run shows the plan"), said[0]
    assert lines.index(said[0]) == 1, lines  # right after the run's announcement


def test_continue_says_a_large_run_before_it_starts_and_a_small_one_not(tiny_model_dir, tmp_path):
    big = tmp_path / "big" / "runs" / "big"
    make_run(big, tiny_model_dir, TWENTY_CELLS).close()
    plan = run_bt("continue", big, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    bound = _bound(plan.stdout)  # 20 cells x (probes, bisection, restarts at B = 1,024)
    assert bound > 1_000_000, plan.stdout
    _assert_large_line(_stdout_until(start_bt("continue", big), LARGE), big, bound)

    small = two_cell_run(tmp_path / "small", tiny_model_dir)
    args = ("--anchors", "64,128,256", "--budget", "8", "--answer-budget", "8")
    args += ("--restarts", "8,16", "--batch-size", "16")
    plan = run_bt("continue", small, *args, "--dry-run")
    assert plan.returncode == 0 and 0 < _bound(plan.stdout) <= 1_000_000, plan.stdout
    ran = run_bt("continue", small, *args)
    assert ran.returncode == 0, ran.stderr
    assert "fx: 2 base traces of tiny-llama" in ran.stdout  # announced, and ran
    assert LARGE not in ran.stdout + ran.stderr


def test_add_budget_says_a_large_run_before_it_starts_and_a_small_one_not(tiny_model_dir, tmp_path):
    big = tmp_path / "big" / "runs" / "big"
    make_run(big, tiny_model_dir, TWENTY_CELLS).close()
    _with_probes(big)
    plan = run_bt("continue", big, "--add-budget", "4096", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    bound = _bound(plan.stdout)  # 20 targets x 3 anchors x 4 branches x (4,096 + 512)
    assert bound == 20 * 3 * 4 * (4096 + 512) > 1_000_000, plan.stdout
    lines = _stdout_until(start_bt("continue", big, "--add-budget", "4096"), LARGE)
    _assert_large_line(lines, big, bound)

    # a run whose answer reserve is 16 (not 512): its arm generates 32 tokens a sample, not 528
    short = DEFAULT.with_overrides(answer_budget=16)
    small = _with_probes(two_cell_run(tmp_path / "small", tiny_model_dir, short))
    plan = run_bt("continue", small, "--add-budget", "16", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert _bound(plan.stdout) == 2 * 3 * 4 * (16 + 16), plan.stdout
    ran = run_bt("continue", small, "--add-budget", "16", "--batch-size", "32")
    assert ran.returncode == 0, ran.stderr
    assert "fx: probe arm at B=16" in ran.stdout and "arm B=16: 2 cells, 24 probe samples" in (
        " ".join(ran.stderr.split())
    )
    assert LARGE not in ran.stdout + ran.stderr
