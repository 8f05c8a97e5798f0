"""`--kv-bits` keeps the README's run guarantees (issue 52, failure 1), through the installed
`bt`: a continuation's samples (token ids and the log-probs beside them, bitwise) are the same
at `--batch-size 1`, 3 and the default, at 8 and 4 bits, and a run killed (SIGKILL) mid-way and
rerun ends with the same sample set as one that ran through.

The model is the tiny llama at head dimension 64 (hidden 256, 4 heads), the smallest mlx can
quantize in groups of 64; SmolLM2's tokenizer, random weights, written as any checkpoint."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from bt_cli import bt_in_process, run_bt, start_bt

SETTINGS = (
    *("--budget", "4", "--answer-budget", "4", "--anchors", "4,8"),
    *("--restarts", "4", "--samples", "2"),
)


def _samples(run: Path) -> dict[tuple, tuple[bytes, bytes]]:
    """(cell, kind, anchor, budget, branch) -> (token ids, log-probs) of every continuation."""
    conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
    try:
        return {
            tuple(key): (bytes(tokens), bytes(logprobs))
            for *key, tokens, logprobs in conn.execute(
                "SELECT cell_id, kind, anchor, budget, branch, token_ids, logprobs FROM samples"
                " WHERE kind != 'base'"
            )
        }
    finally:
        conn.close()


def _count(run: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute("SELECT count(*) FROM samples WHERE kind != 'base'").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("bits", ["8", "4"])
def test_kv_bits_samples_follow_neither_the_batch_nor_a_kill(smollm2_tokenizer, tmp_path, bits):
    from models.tiny import write_tiny_model

    CONTINUE = (*SETTINGS, "--kv-bits", bits)
    model = write_tiny_model(tmp_path / "kv64", smollm2_tokenizer, hidden=256, heads=4)
    runs = tmp_path / "runs"
    bt_in_process(  # setup: the base traces every copy continues
        "base", "--cohort", "arith", "--limit", "2", "--max-tokens", "24",
        "--model", model, "--runs-dir", runs, "--run", "base",
    )  # fmt: skip
    got = {}
    for name, extra in (("b1", ("--batch-size", "1")), ("b3", ("--batch-size", "3")), ("dft", ())):
        run = Path(shutil.copytree(runs / "base", runs / name))
        proc = run_bt("continue", run, *CONTINUE, *extra)
        assert proc.returncode == 0, proc.stderr
        got[name] = _samples(run)
    assert got["b1"] and got["b1"] == got["b3"] == got["dft"]

    killed = Path(shutil.copytree(runs / "base", runs / "killed"))
    proc = start_bt("continue", killed, *CONTINUE, "--batch-size", "1")  # commits one by one
    try:
        deadline = time.monotonic() + 120
        while _count(killed) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the continuation ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert 3 <= _count(killed) < len(got["b1"])
    proc = run_bt("continue", killed, *CONTINUE)  # the rerun, at the default batch size
    assert proc.returncode == 0, proc.stderr
    assert _samples(killed) == got["b1"]
