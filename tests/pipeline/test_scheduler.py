"""The run-wide scheduler: samples commit as their rows finish, and interleaving cells changes
nothing (seeds come from each sample's identity)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from engine_tap import Tapped

from breakthrough.models.loading import load_model
from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore


@pytest.fixture(scope="module")
def qwen_tiny(tiny_model_dir: Path):
    """The tiny llama loaded with the qwen family (the fixture run's), once for the module."""
    return load_model(str(tiny_model_dir), family="qwen")


def _samples(run: Path):
    with RunStore(run) as s:
        df = s.samples_frame()
    key = ["cell_id", "kind", "anchor", "budget", "branch"]
    return df.sort_values(key).reset_index(drop=True), key


def test_interleaving_cells_changes_nothing(fixture_run: Path, tmp_path: Path, qwen_tiny) -> None:
    other = tmp_path / "other"
    shutil.copytree(fixture_run, other)
    proto = DEFAULT.with_overrides(
        budget=8, answer_budget=4, restart_budgets=(8, 16), anchors=(64, 128, 256)
    )
    loaded = qwen_tiny
    # cell by cell (one cell at a time, no admission to fill the batch) vs interleaved (cells
    # admitted to fill the batch, probes before restarts, restarts longest first)
    one = continue_run(
        fixture_run, loaded, ContinueOptions(protocol=proto, max_active_cells=1, fill_batch=False)
    )
    many = continue_run(other, loaded, ContinueOptions(protocol=proto, max_active_cells=3))
    assert one.samples == many.samples and one.cells == many.cells == 2
    a, key = _samples(fixture_run)
    b, _ = _samples(other)
    assert a[key].equals(b[key])
    assert all(np.array_equal(x, y) for x, y in zip(a["token_ids"], b["token_ids"], strict=True))


def test_probes_go_longest_context_first_and_done_cells_free_their_prefix(
    fixture_run: Path, qwen_tiny, monkeypatch
) -> None:
    """Issue 22: mlx-lm pads a batch's rows to its longest, so the scheduler hands the engine
    the queued probes of all admitted cells longest context first (similar rows in flight
    together), and a cell whose probes are done releases its shared-prefix cache."""
    from breakthrough.engine import make_engine
    from breakthrough.engine.contract import EngineSpec

    proto = DEFAULT.with_overrides(
        budget=8, answer_budget=4, restart_budgets=(8,), anchors=(64, 128, 256), refinement_rounds=0
    )
    loaded = qwen_tiny
    spec = EngineSpec(batch_size=32, instrument=False)
    engine = Tapped(make_engine(spec, loaded))  # the real engine, what it is asked recorded
    report = continue_run(
        fixture_run, loaded, ContinueOptions(protocol=proto, topup=(), engine=spec), engine=engine
    )
    assert report.cells == 2
    probes = [r for r in engine.pulled if "|probe:" in r.key and not r.key.endswith("|answer")]
    cells = {r.key.split("|")[0] for r in probes}
    assert len(cells) == 2 and len(probes) == 2 * 3 * proto.samples
    # every probe of both cells was queued before the first pull: one sorted sequence, the
    # cells interleaved (both cells' anchor-256 probes before either's anchor-128 ones)
    lengths = [len(r.prompt) for r in probes]
    assert lengths == sorted(lengths, reverse=True)
    assert {r.key.split("|")[0] for r in probes[: 2 * proto.samples]} == cells
    assert set(engine.released) == cells


def test_samples_are_committed_as_their_rows_finish(fixture_run: Path) -> None:
    """Short restarts (C=4) are stored while long ones (C=160) of the same cell are still in
    flight; before, a batch committed only when its longest row was done."""
    cmd = [
        sys.executable,
        "-m",
        "breakthrough.cli",
        "continue",
        str(fixture_run),
        "--anchors",
        "64",
        "--budget",
        "4",
        "--answer-budget",
        "4",
        "--restarts",
        "4,160",
        "--samples",
        "4",
        "--topup",
        "none",
        "--batch-size",
        "16",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            with RunStore(fixture_run) as s:
                rows = s.conn.execute(
                    "SELECT cells.cell_id, budget FROM samples JOIN cells USING (cell_id) "
                    "WHERE kind='restart'"
                ).fetchall()
            short = {c for c, b in rows if b == 4}
            for cell in short:
                n_short = sum(1 for c, b in rows if c == cell and b == 4)
                n_long = sum(1 for c, b in rows if c == cell and b == 160)
                if n_short == 4 and n_long < 4:
                    seen = (cell, n_short, n_long)
            if seen:
                break
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert seen is not None, "short restarts were never stored before the long ones finished"
    with RunStore(fixture_run) as s:
        assert s.verify_integrity() == []
