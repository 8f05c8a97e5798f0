"""Damage to a stored run is found and named (issue 29, items 1-4). Each failure the issue
reproduced, through the installed `bt` (exit code, the one line, what is and is not on disk):
fields a result depends on that a row's checksum did not cover (1), a column holding another
storage class (2), an archived run that could not be read (3), and a damaged manifest that was
still used (4).

The runs are written through the store without a model (store_writer.write_run, well under a
second; `as_schema_2`: the same run as a bt before issue 29 wrote it). Only `bt continue` on a
damaged manifest needs a base run of the tiny model, since it is the command that wrote into one."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, freeze, run_bt, snapshot, thaw
from shared_runs import SMALL_CONTINUE, copy_of_arith_base
from store_writer import CELL, as_schema_2, write_run

SCHEMA_3 = "checksums cover every field a label or signal is computed from (schema 3)"
SCHEMA_2 = "checksums cover token ids, text, finish reason, seed and prefix length only (schema 2)"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trust2")
    return {"v3": write_run(root / "v3"), "v2": as_schema_2(write_run(root / "v2"))}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _sql(run: Path, *statements: str) -> None:
    conn = sqlite3.connect(run / "store.sqlite")
    with conn:
        for sql in statements:
            conn.execute(sql)
    conn.close()


def _all(*calls: tuple) -> list[subprocess.CompletedProcess]:
    """`bt ARGS` of each call, side by side (most of a call's time is the interpreter starting)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(lambda args: run_bt(*args), calls))


def _damaged(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """`bt verify` found exactly one problem: exit 1, one line on stderr, the problem on stdout
    holding every needle; returns that line."""
    assert_one_line_error(proc, 1, "damaged")
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and "DAMAGED (1 problem)" in lines[1], proc.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---- 1: every field a result depends on is checksummed ----------------------------------------

PROBE = "(SELECT sample_id FROM samples WHERE kind='probe' AND anchor=4 AND branch=0)"
# damage -> (SQL, the field `bt verify` names, who the line is about)
DAMAGE = {
    "logprobs zeroed": (
        f"UPDATE samples SET logprobs=zeroblob(length(logprobs)) WHERE sample_id={PROBE}",
        "logprobs",
        "sample 2 ",
    ),
    "entropies zeroed": (
        f"UPDATE samples SET entropies=zeroblob(length(entropies)) WHERE sample_id={PROBE}",
        "entropies",
        "sample 2 ",
    ),
    "sampling entropies zeroed": (
        f"UPDATE samples SET sampling_entropies=zeroblob(length("
        f"sampling_entropies)) WHERE sample_id={PROBE}",
        "sampling_entropies",
        "sample 2 ",
    ),
    "anchor changed": (
        f"UPDATE samples SET anchor=6 WHERE sample_id={PROBE}",
        "anchor",
        "sample 2 ",
    ),
    "branch changed": (
        f"UPDATE samples SET branch=7 WHERE sample_id={PROBE}",
        "branch",
        "sample 2 ",
    ),
    "grade flipped": (
        f"UPDATE grades SET correct=1-correct WHERE sample_id={PROBE}",
        "grade.correct",
        "sample 2 ",
    ),
    "gold answer edited": ("UPDATE cells SET answer='81'", "cell.answer", f"cell {CELL}"),
    "cohort row edited": (
        "UPDATE cells SET item=replace(item, '\"answer\": 80', '\"answer\": 81')",
        "cell.item",
        f"cell {CELL}",
    ),
    "signals zeroed": (
        "UPDATE signals SET data=zeroblob(length(data))",
        "signals.data",
        "sample 1 ",
    ),
    "hidden-vector row edited": (
        "UPDATE hidden_vectors SET stride=4",
        "hidden_vectors.stride",
        "sample 1 ",
    ),
}


@pytest.mark.heavy
def test_1_each_kind_of_damage_is_one_line_naming_the_row_and_field(made, tmp_path):
    runs = {}
    for i, (name, (sql, _, _)) in enumerate(DAMAGE.items()):
        runs[name] = _copy(made["v3"], tmp_path / f"d{i}")
        _sql(runs[name], sql)
    before = {name: snapshot(run) for name, run in runs.items()}
    verified = _all(*[("verify", run) for run in runs.values()])
    for (name, (_, field, who)), proc in zip(DAMAGE.items(), verified, strict=True):
        line = _damaged(proc, who, field)
        assert SCHEMA_3 in proc.stdout, (name, proc.stdout)
        assert "changed since" in line or "does not match" in line, (name, line)
    # a reader refuses the row (or the cell's rows) before computing anything from it
    for name, proc in zip(DAMAGE, _all(*[("status", run) for run in runs.values()]), strict=True):
        assert_one_line_error(proc, 2, DAMAGE[name][1], "checksum", "bt verify")
    assert {name: snapshot(run) for name, run in runs.items()} == before


def test_1_an_intact_run_and_a_regraded_one_verify(made, tmp_path):
    run = _copy(made["v3"], tmp_path / "v3")
    proc = run_bt("verify", run)
    assert proc.returncode == 0 and SCHEMA_3 in proc.stdout and not proc.stderr, proc.stdout
    assert run_bt("grade", run, "--again").returncode == 0  # rewrites the grades' checksums
    proc = run_bt("verify", run)
    assert proc.returncode == 0 and "intact" in proc.stdout, proc.stdout


@pytest.mark.heavy
def test_1_a_store_with_the_old_checksums_still_verifies_and_keeps_them(made, tmp_path):
    run = _copy(made["v2"], tmp_path / "v2")
    proc = run_bt("verify", run)
    assert proc.returncode == 0 and "intact" in proc.stdout and SCHEMA_2 in proc.stdout, proc.stdout
    assert run_bt("status", run).returncode == 0
    assert run_bt("grade", run, "--again").returncode == 0  # adds to it under its own schema
    proc = run_bt("verify", run)
    assert proc.returncode == 0 and SCHEMA_2 in proc.stdout, proc.stdout
    # what the old checksum covers is still checked
    _sql(run, f"UPDATE samples SET text='edited' WHERE sample_id={PROBE}")
    _damaged(run_bt("verify", run), "sample 2 ", "token ids, text")


# ---- 2: a column holding another storage class is damage, not a traceback ---------------------


@pytest.mark.heavy
def test_2_token_ids_holding_text_is_one_line_of_damage(made, tmp_path):
    runs = [_copy(made[v], tmp_path / v) for v in ("v3", "v2")]
    for run in runs:  # bytes that are not UTF-8, stored as TEXT: what Python cannot decode
        _sql(run, f"UPDATE samples SET token_ids=CAST(X'FFFE0001' AS TEXT) WHERE sample_id={PROBE}")
    before = [snapshot(run) for run in runs]
    for proc in _all(*[("verify", run) for run in runs]):
        _damaged(proc, "sample 2 ", "token_ids holds text, not blob")
    for proc in _all(*[(cmd, run) for run in runs for cmd in ("status", "export")]):
        assert_one_line_error(proc, 2, "sample 2 ", "token_ids holds text", "bt verify")
    assert [snapshot(run) for run in runs] == before


# ---- 3: an archived run is read --------------------------------------------------------------


@pytest.mark.heavy
def test_3_read_only_commands_read_an_archived_run(made, tmp_path):
    run = _copy(made["v3"], tmp_path / "archived")
    files = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert not any(str(p).endswith(("-wal", "-shm")) for p in files)
    out = tmp_path / "out"
    before = snapshot(run)
    freeze(run)
    try:
        procs = _all(
            ("verify", run),
            ("status", run),
            ("export", run, "-o", out / "export"),
            ("classify", run, "--draws", "2", "-o", out / "classify"),
            ("report", "study", run, "--out", out / "study"),
        )
        # nothing beside the store: no -wal or -shm (it was read as an immutable file)
        assert sorted(p.relative_to(run) for p in run.rglob("*")) == files
    finally:
        thaw(run)
    for proc in procs:
        assert proc.returncode == 0, (proc.args, proc.stderr)
        assert "Traceback" not in proc.stderr and "cannot write" not in proc.stderr, proc.stderr
    assert "intact" in procs[0].stdout and CELL in procs[1].stdout
    assert (out / "export" / "samples.parquet").is_file() and (out / "classify").is_dir()
    assert snapshot(run) == before


def test_3_a_folder_that_cannot_be_written_is_read_as_an_immutable_file(
    made, tmp_path, monkeypatch
):
    """The rule behind the archived run, on any filesystem and as any user: when the folder
    cannot be written, a reader opens the store with `immutable=1` (so SQLite makes no -shm
    or -wal beside it); otherwise with `mode=ro` (and SQLite adds them, as readers of a WAL
    store do)."""
    from breakthrough.store import RunStore

    run = _copy(made["v3"], tmp_path / "run")
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if Path(p) == run and mode == os.W_OK else real_access(p, mode),
    )
    with RunStore(run, readonly=True) as store:
        assert len(store.samples_frame()) == 7 and store.verify_integrity() == []
    assert sorted(p.name for p in run.iterdir()) == ["hidden", "store.sqlite"]
    monkeypatch.undo()
    with RunStore(run, readonly=True) as store:
        assert len(store.samples_frame()) == 7
    assert "store.sqlite-shm" in {p.name for p in run.iterdir()}


# ---- 4: a damaged manifest is refused on every open ------------------------------------------

MANIFEST_DAMAGE = {
    "schema_version deleted": (
        "DELETE FROM manifest WHERE key='schema_version'",
        "key 'schema_version'",
        "missing",
    ),
    "budget 'four'": (
        "UPDATE manifest SET value=json_set(value, '$.budget', 'four') WHERE key='protocol'",
        "key 'protocol'",
        "budget",
    ),
    "hidden_stride a string": (
        "UPDATE manifest SET value='\"8\"' WHERE key='hidden_stride'",
        "key 'hidden_stride'",
        "integer",
    ),
    "model_id deleted": ("DELETE FROM manifest WHERE key='model_id'", "key 'model_id'", "missing"),
}


@pytest.mark.heavy
def test_4_a_damaged_manifest_is_one_line_naming_the_key_and_nothing_is_written(made, tmp_path):
    runs = {}
    for i, (name, (sql, _, _)) in enumerate(MANIFEST_DAMAGE.items()):
        runs[name] = _copy(made["v3"], tmp_path / f"m{i}")
        _sql(runs[name], sql)
    before = {name: snapshot(run) for name, run in runs.items()}
    calls = [(cmd, run) for run in runs.values() for cmd in ("verify", "status", "grade", "export")]
    procs = iter(_all(*calls))
    for _, key, what in MANIFEST_DAMAGE.values():
        _damaged(next(procs), f"manifest {key}", what)
        for _ in ("status", "grade", "export"):
            assert_one_line_error(next(procs), 2, "damaged manifest", key, what)
    assert {name: snapshot(run) for name, run in runs.items()} == before
    assert not any((run / "export").exists() for run in runs.values())


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, arith_base_run) -> Path:
    """A `bt base` run of the tiny model, the kind `bt continue` wrote into despite damage
    (`ARITH_BASE`: the session's shared one, copied)."""
    return copy_of_arith_base(arith_base_run, tmp_path_factory.mktemp("trust2-base"))


@pytest.mark.parametrize("damage", ["schema_version deleted", "budget 'four'"])
def test_4_continue_writes_nothing_into_a_damaged_manifest(base_run, tmp_path, damage):
    sql, key, what = MANIFEST_DAMAGE[damage]
    run = _copy(base_run, tmp_path / "run")
    _sql(run, sql)
    before = snapshot(run)
    proc = run_bt("continue", run, *SMALL_CONTINUE)
    assert_one_line_error(proc, 2, "damaged manifest", key, what)
    assert snapshot(run) == before
