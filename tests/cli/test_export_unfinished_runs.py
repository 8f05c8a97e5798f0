"""`bt export` on runs that are not whole yet (issue 52, trust round four), through the
installed `bt`: it ended in a `SchemaError` traceback (exit 1) and left a half export folder.

A store whose manifest is empty (its first `bt base` killed right after making store.sqlite)
is refused in the line `bt status` and `bt classify` give, exit 2, nothing written; one its
first `bt base` is still making names that bt, as they do; a run with its cells and no sample
yet (killed before its first trace committed) exports the declared empty tables, exit 0, as
those commands read it. The runs are written through the store, without a model."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from bt_cli import assert_one_line_error, run_bt, snapshot
from store_writer import CELL, write_run

from breakthrough.runlock import run_lock
from breakthrough.schemas import export as E
from breakthrough.store import RunStore


def _empty_store(run: Path) -> Path:
    """store.sqlite as `bt base` makes it, before it writes the manifest."""
    RunStore(run, create=True).close()
    return run


def _no_samples(run: Path) -> Path:
    """A whole manifest and one cell, no sample: a `bt base` killed before its first trace."""
    write_run(run)
    conn = sqlite3.connect(run / "store.sqlite")
    with conn:
        for table in ("grades", "signals", "hidden_vectors", "samples"):
            conn.execute(f"DELETE FROM {table}")
    conn.close()
    for npz in (run / "hidden").glob("*.npz"):
        npz.unlink()
    return run


def test_export_of_a_store_with_an_empty_manifest_is_the_line_status_gives(tmp_path):
    run = _empty_store(tmp_path / "r")
    before = snapshot(run)
    status = assert_one_line_error(run_bt("status", run), 2, "the manifest is empty")
    for out in ((), ("-o", tmp_path / "out")):
        proc = run_bt("export", run, *out)
        assert assert_one_line_error(proc, 2, str(run)) == status
    assert snapshot(run) == before
    assert not (run / "export").exists() and not (tmp_path / "out").exists()


def test_export_of_a_store_its_first_bt_base_is_making_names_that_bt(tmp_path):
    run = tmp_path / "r"
    with run_lock(run):
        _empty_store(run)
        proc = run_bt("export", run)
        line = assert_one_line_error(proc, 2, f"{run}: not a run yet", "another bt")
        assert "manifest" not in line
    assert not (run / "export").exists()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_of_a_run_without_samples_writes_the_declared_empty_tables(tmp_path, fmt):
    run = _no_samples(tmp_path / "r")
    assert run_bt("status", run).returncode == 0  # status reads it as a run not started
    proc = run_bt("export", run, "-f", fmt)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = run / "export"
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    samples, cells = read(out / f"samples.{fmt}"), read(out / f"cells.{fmt}")
    assert samples.empty and list(samples.columns) == [c.name for c in E.SAMPLES.columns]
    assert list(cells["cell_id"]) == [CELL]
    if fmt == "parquet":  # the per-token arrays keep their declared list types
        schema = pq.read_schema(out / "samples.parquet")
        assert str(schema.field("token_ids").type) == "list<element: int64>"
        assert str(schema.field("logprobs").type) == "list<element: double>"
    assert (out / "manifest.json").is_file()
