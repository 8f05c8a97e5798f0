"""Validate before any side effect: every option of `bt base` / `bt continue` is checked before
a store is touched or a model loaded, read-only commands never write into a store, and a store
that is empty, random bytes or cut short is refused with one line naming the file."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.protocol import DEFAULT

STORED = DEFAULT.with_overrides(anchors=(8, 16, 32), samples=2, budget=8)


def _manifest(run) -> dict:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return {k: json.loads(v) for k, v in c.execute("SELECT key, value FROM manifest")}


@pytest.mark.parametrize(
    "args, option",
    [
        (["--tau", "2"], "--tau"),
        (["--tau", "0"], "--tau"),
        (["--budget", "0"], "--budget"),
        (["--answer-budget", "-1"], "--answer-budget"),
        (["--samples", "0"], "--samples"),
        (["--anchors", "32,8"], "--anchors"),
        (["--anchors", "a"], "--anchors"),
        (["--restarts", "0"], "--restarts"),
        (["--batch-size", "0"], "--batch-size"),
        (["--memory-gb", "0"], "--memory-gb"),
        (["--backend", "gpu"], "--backend"),
    ],
)
def test_continue_refuses_bad_options_before_touching_the_store(tmp_path, args, option):
    run = write_store(tmp_path / "r", cell_spec(), STORED)
    before = (run / "store.sqlite").read_bytes()
    proc = run_bt("continue", run, *args)
    assert_one_line_error(proc, 2, option)
    assert (run / "store.sqlite").read_bytes() == before
    assert _manifest(run)["protocol"]["anchors"] == [8, 16, 32]
    assert _manifest(run)["protocol"]["samples"] == 2


@pytest.mark.parametrize(
    "args, option",
    [
        (["--max-tokens", "0"], "--max-tokens"),
        (["--batch-size", "0"], "--batch-size"),
        (["--seed", "-3"], "--seed"),
        (["--backend", "gpu"], "--backend"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_base_refuses_bad_options_before_writing_anything(tmp_path, args, option):
    proc = run_bt(
        "base",
        "--cohort",
        "demo",
        "--model",
        tmp_path / "no-model",
        "--runs-dir",
        tmp_path / "runs",
        *args,
    )
    assert_one_line_error(proc, 2, option)
    assert not (tmp_path / "runs").exists()


def _bad_store(tmp_path, kind: str):
    """A run directory whose store.sqlite is empty, random bytes, or a good store cut short
    (mid-page, or at a page boundary: only the header's page count tells)."""
    good = write_store(tmp_path / "good", cell_spec(), STORED)
    data = (good / "store.sqlite").read_bytes()
    content = {
        "empty": b"",
        "random": os.urandom(16384),
        "truncated": data[: len(data) // 2 + 100],
        "halved": data[: len(data) // 2],
    }[kind]
    (tmp_path / kind).mkdir()
    (tmp_path / kind / "store.sqlite").write_bytes(content)
    return tmp_path / kind


# every kind of damage, and every command that opens a store, at least once
@pytest.mark.parametrize(
    "kind, command",
    [
        ("empty", ["status"]),
        ("empty", ["classify", "--draws", "1"]),
        ("random", ["export"]),
        ("random", ["continue"]),
        ("truncated", ["classify", "--draws", "1"]),
        ("truncated", ["status"]),
        ("halved", ["grade"]),
        ("halved", ["export"]),
    ],
)
def test_damaged_stores_get_one_line_and_stay_as_they_were(tmp_path, kind, command):
    run = _bad_store(tmp_path, kind)
    before = (run / "store.sqlite").read_bytes()
    proc = run_bt(*command, run)
    assert_one_line_error(proc, 2, str(run / "store.sqlite"))
    assert (run / "store.sqlite").read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == ["store.sqlite"]


def test_readonly_commands_do_not_write_into_the_store(tmp_path):
    run = write_store(tmp_path / "r", cell_spec(), STORED)
    before = (run / "store.sqlite").read_bytes()
    assert run_bt("status", run).returncode == 0
    proc = run_bt("export", run, "--format", "csv", "-o", tmp_path / "x")
    assert proc.returncode == 0, proc.stderr
    assert (run / "store.sqlite").read_bytes() == before


@pytest.mark.heavy
def test_write_errors_are_one_line(tmp_path):
    run = write_store(tmp_path / "r", cell_spec(), STORED)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_one_line_error(run_bt("export", run, "-o", blocker / "out"), 2, str(blocker))
    assert_one_line_error(
        run_bt("classify", run, "--draws", "1", "--no-cell-pages", "-o", blocker / "out"),
        2,
        str(blocker),
    )
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"{i % 3},{i},{i % 2}\n" for i in range(12)))
    assert_one_line_error(
        run_bt(
            "auroc", table, "-g", "g", "-s", "s", "-l", "y", "-b", "0", "-o", blocker / "o.json"
        ),
        2,
        str(blocker),
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_readonly_output_folder_is_one_line(tmp_path):
    run = write_store(tmp_path / "r", cell_spec(), STORED)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_one_line_error(run_bt("export", run, "-o", ro / "out"), 2, str(ro))
    finally:
        ro.chmod(0o755)
