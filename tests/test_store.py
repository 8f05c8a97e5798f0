"""The run store: idempotent keys, identity refusal, atomic batches under SIGKILL, export."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT
from breakthrough.store import CHECKED_FIELDS, RunStore, SampleRecord, run_dirs
from breakthrough.tasks.grade import Grade

ITEM = {"id": "math_00001_abc", "stage": "demo", "level": 1, "subject": "Algebra", "answer": "4"}


def _store(tmp_path: Path) -> RunStore:
    s = RunStore(tmp_path / "run", create=True)
    s.ensure_manifest(
        {
            "model_id": "tiny",
            "protocol_digest": "abc",
            "cohort_digest": "c1",
            "protocol": DEFAULT.to_dict(),
        }
    )
    s.add_cells([{"cell_id": "tiny:p", "model": "tiny", "item": ITEM, "prompt_ids": [5, 6, 7]}])
    return s


def _rec(branch: int, n: int = 5) -> SampleRecord:
    return SampleRecord(
        cell_id="tiny:p",
        kind="base",
        anchor=-1,
        budget=0,
        branch=branch,
        seed=11,
        prefix_len=0,
        token_ids=np.arange(n, dtype=np.int32),
        text="hello \\boxed{4}",
        finish_reason="eos",
        segments=np.zeros(n, np.uint8),
        logprobs=-np.ones(n, np.float32),
        entropies=np.full(n, 0.5, np.float32),
    )


GRADE = Grade(correct=True, status="correct", method="numeric", grader="math", version="t")


def test_roundtrip_and_idempotent(tmp_path: Path) -> None:
    s = _store(tmp_path)
    assert s.add_samples([_rec(0), _rec(1)], [GRADE, None], reasoning_tokens={"tiny:p": 3}) == 2
    assert s.add_samples([_rec(0), _rec(2)]) == 1  # key (cell, kind, anchor, budget, branch) exists
    df = s.samples_frame()
    assert list(df["branch"]) == [0, 1, 2]
    assert df.loc[0, "correct"] is True and pd.isna(df.loc[1, "correct"])
    assert df.loc[0, "token_ids"].tolist() == [0, 1, 2, 3, 4]
    assert df.loc[0, "entropies"].dtype == np.float32
    assert s.cells_frame().loc[0, "reasoning_tokens"] == 3
    assert [u[0] for u in s.ungraded()] == [2, 3]
    assert s.verify_integrity() == []
    _, prompt = s.cell_prompt("tiny:p")
    assert prompt.tolist() == [5, 6, 7]


def test_identity_mismatch_is_refused(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.ensure_manifest({"model_id": "tiny", "protocol_digest": "abc", "cohort_digest": "c1"})
    with pytest.raises(BtError, match="protocol_digest"):
        s.ensure_manifest({"model_id": "tiny", "protocol_digest": "zzz", "cohort_digest": "c1"})
    with pytest.raises(BtError, match="model_id"):
        s.ensure_manifest({"model_id": "other", "protocol_digest": "abc"})


def test_missing_run_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BtError, match="not a run directory"):
        RunStore(tmp_path / "nope")
    with pytest.raises(BtError, match="no run directories"):
        run_dirs([tmp_path])


@pytest.mark.heavy
def test_sigkill_never_leaves_half_written_samples(tmp_path: Path) -> None:
    """A writer killed with SIGKILL at random moments 25 times: every committed sample is
    intact, none is half-written, and nothing committed is ever lost."""
    run = tmp_path / "killrun"
    rng = random.Random(1234)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    seen = 0
    for i in range(25):
        proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("store_writer.py")),
                str(run),
                str(i * 100000),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        proc.stdout.readline()  # at least one batch committed before the kill window opens
        time.sleep(rng.uniform(0.0, 0.05))  # ~20 commits: a random phase of one
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with RunStore(run) as s:
            assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert s.verify_integrity() == []
            df = s.samples_frame()
            assert (df["n_tokens"] == df["token_ids"].map(len)).all()
            assert (df["n_tokens"] == df["entropies"].map(len)).all()
            assert (df["text"].str.len() == df["n_tokens"]).all()
            assert len(df) > seen  # committed samples survive every kill
            seen = len(df)


def test_export_parquet_and_csv(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.add_samples([_rec(0)], [GRADE])
    s.close()
    runner = CliRunner()
    for fmt in ("parquet", "csv"):
        res = runner.invoke(app, ["export", str(tmp_path / "run"), "--format", fmt])
        assert res.exit_code == 0, res.output
        path = tmp_path / "run" / "export" / f"samples.{fmt}"
        df = pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path)
        assert df.loc[0, "problem_id"] == "math_00001_abc"
        assert bool(df.loc[0, "correct"]) is True
    res = runner.invoke(app, ["export", str(tmp_path / "run"), "--format", "xml"])
    assert res.exit_code != 0


def test_bt_grade_fills_missing_and_regrades(tmp_path: Path) -> None:
    """`bt grade` grades ungraded samples with the math grader; --again regrades all."""
    s = _store(tmp_path)
    s.add_samples([_rec(0), _rec(1)], [Grade(False, "wrong", "x", "math", "old"), None])
    s.close()
    runner = CliRunner()
    res = runner.invoke(app, ["grade", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "run") as st:
        df = st.samples_frame(arrays=False)
    assert list(df["grader_version"]) == ["old", "math-1"] and bool(df.loc[1, "correct"])
    assert runner.invoke(app, ["grade", str(tmp_path / "run"), "--again"]).exit_code == 0
    with RunStore(tmp_path / "run") as st:
        df = st.samples_frame(arrays=False)
    assert list(df["grader_version"]) == ["math-1", "math-1"] and df["correct"].all()


def test_a_schema_2_store_keeps_its_checksums_when_samples_are_added(tmp_path: Path) -> None:
    """A store a bt before issue 29 wrote (schema 2: checksums of token ids, text, finish
    reason, seed and prefix length) verifies, and rows added to it get that schema's checksums,
    so the whole store verifies under the one rule it was written with; a new store is
    schema 3, one digest per covered field."""
    from store_writer import as_schema_2, write_run

    old = as_schema_2(write_run(tmp_path / "old"))
    new = write_run(tmp_path / "new")
    for run, schema, width in ((old, 2, 32), (new, 3, None)):
        with RunStore(run) as s:
            assert s.schema == schema and s.verify_integrity() == []
            rec = _rec(9)
            rec.cell_id = "fake:arith/L5/r0"
            assert s.add_samples([rec], [GRADE]) == 1
        with RunStore(run, readonly=True) as s:
            assert s.manifest()["schema_version"] == str(schema) and s.verify_integrity() == []
            sums = {len(c) for (c,) in s.conn.execute("SELECT checksum FROM samples")}
            assert sums == {width or 16 * len(CHECKED_FIELDS)}


def _stored_keys(run: Path) -> set[str]:
    """The manifest keys another process would read (a second, read-only connection)."""
    with RunStore(run, readonly=True) as other:
        return set(other.raw_manifest())


def test_identity_is_committed_with_the_first_sample_or_not_at_all(tmp_path: Path) -> None:
    """Issue 40, item 2: entries written inside `identity_with_first_sample` are seen by the
    writer at once, by the store only with the first sample; an exception before any sample
    drops them, so a crash at start-up leaves the manifest as it was."""
    s = _store(tmp_path)
    run = s.run_dir
    with pytest.raises(RuntimeError, match="start-up"):
        with s.identity_with_first_sample():
            s.ensure_manifest({"continuation": {"kv_bits": 8}})
            assert s.manifest()["continuation"] == {"kv_bits": 8}  # the writer sees it
            assert "continuation" not in _stored_keys(run)  # the run does not hold it yet
            raise RuntimeError("engine crashed at start-up")
    assert "continuation" not in s.manifest() and "continuation" not in _stored_keys(run)
    with s.identity_with_first_sample():
        s.ensure_manifest({"continuation": {"kv_bits": 4}})  # not refused: nothing holds 8
        s.add_samples([_rec(0)], [GRADE])
        assert _stored_keys(run) >= {"continuation"}  # committed with the sample
        s.update_manifest({"throughput": {}})
    assert _stored_keys(run) >= {"throughput"}  # the rest when the block ends
    with pytest.raises(BtError, match="continuation"):
        s.ensure_manifest({"continuation": {"kv_bits": 8}})
    s.close()
