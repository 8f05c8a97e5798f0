"""`bt status` through the console script: B and τ come from the run's stored protocol, a cell
without a base trace says "next: base", a folder of runs works, and piped output keeps every
cell id whole on one line."""

from __future__ import annotations

import numpy as np
from bt_cli import run_bt
from classify_fixture import SMALL, small_spec, write_store

from breakthrough.store import RunStore, SampleRecord


def _run_with_a_cell_without_base(path):
    spec = {c: s for c, s in small_spec().items() if c == "g:p1"}
    run = write_store(path, spec, SMALL)
    long_id = "g:" + "a-very-long-problem-identifier-" * 3 + "x"
    with RunStore(run) as store:
        store.add_cells(
            [{"cell_id": long_id, "model": "g", "item": {"id": long_id[2:]}, "prompt_ids": [1]}]
        )
        store.add_samples(
            [
                SampleRecord(
                    cell_id="g:p1",
                    kind="base",
                    anchor=-1,
                    budget=0,
                    branch=0,
                    seed=11,
                    prefix_len=0,
                    token_ids=np.arange(5, dtype=np.int32),
                    text="t",
                    finish_reason="length",
                )
            ]
        )
    return run, long_id


def test_status_reads_the_run_and_says_next_base(tmp_path):
    run, long_id = _run_with_a_cell_without_base(tmp_path / "runs" / "r")
    proc = run_bt("status", tmp_path / "runs")  # a folder of runs
    assert proc.returncode == 0, proc.stderr
    assert "B=64" in proc.stdout  # the run's B, not the default 1,024
    lines = proc.stdout.splitlines()
    p1 = next(line for line in lines if "g:p1 " in line)
    assert "128:4/4" in p1 and "unsolved (5)" in p1
    long_line = next(line for line in lines if long_id in line)  # whole, on one line
    assert long_line.rstrip(" │|").endswith("base")
