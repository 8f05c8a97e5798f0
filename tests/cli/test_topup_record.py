"""Issue 29, item 8, through the installed `bt`: a run remembers the top-up rules it was
continued under. After `bt continue RUN ... --topup none`, a plain `bt continue RUN` ran the
default top-ups without a word; now `--topup` defaults to the run's recorded rules like every
other continuation setting, a rule named beyond them is added and recorded (the closing line
says so), `none` or a contradicting rule is refused, and a run that records none (continued
by an older bt) keeps the default and says so. `bt status` and `--dry-run` show the rules.

One run is built once for the module on the tiny model (base, then continue with
`--topup none`), and one of its restart cells is graded 1 of 2, so the `ambiguous` rule has a
cell to enlarge: a plain continue that ran the default would generate."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt
from shared_runs import SMALL_CONTINUE

from breakthrough.store import RunStore
from breakthrough.tasks.grade import Grade

BASE = ("--cohort", "arith", "--limit", "2", "--max-tokens", "24")
CONTINUE = SMALL_CONTINUE  # shared_runs


def _said(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def _manifest(run: Path) -> dict:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return {k: json.loads(v) for k, v in c.execute("SELECT key, value FROM manifest")}


def _samples(run: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return c.execute(
            "SELECT cell_id, kind, anchor, budget, branch FROM samples ORDER BY 1, 2, 3, 4, 5"
        ).fetchall()


FIRST: dict = {}  # the first continuation's output, for the test of what it said


@pytest.fixture(scope="module")
def none_run(tmp_path_factory, tiny_model_dir) -> Path:
    runs = tmp_path_factory.mktemp("topup") / "runs"
    # the base traces are setup (made in this process); the continuation whose output
    # test_the_first_continuation_records_its_rules reads is the installed `bt`
    bt_in_process("base", *BASE, "--model", tiny_model_dir, "--runs-dir", runs, "--run", "r")
    run = runs / "r"
    proc = run_bt("continue", run, *CONTINUE, "--topup", "none")
    assert proc.returncode == 0, proc.stderr
    FIRST.update(said=_said(proc), manifest=_manifest(run))
    with RunStore(run) as store:  # a restart cell at 1 of 2: the ambiguous rule enlarges it
        ((sid,),) = store.conn.execute(
            "SELECT sample_id FROM samples WHERE kind='restart' "
            "AND branch=0 ORDER BY cell_id LIMIT 1"
        ).fetchall()
        store.set_grades([(sid, Grade(True, "correct", "fixture", "arith", "t"))])
    return run


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def test_the_first_continuation_records_its_rules(none_run):
    assert "top-ups: none (as asked)" in FIRST["said"] and "top-ups none" in FIRST["said"]
    assert FIRST["manifest"]["topup"] == "none"


def test_a_plain_continue_keeps_the_runs_topup_none(none_run, tmp_path):
    run = _copy(none_run, tmp_path / "r")
    before = _samples(run)
    proc = run_bt("continue", run)
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "top-ups: none (the run's)" in said  # was "top-ups: terminal,ambiguous", then ran them
    assert "nothing to do" in said and "top-ups none" in said
    assert _samples(run) == before and _manifest(run)["topup"] == "none"
    status = run_bt("status", run)
    assert status.returncode == 0 and "top-ups none (the run's)" in _said(status)
    plan = run_bt("continue", run, "--dry-run")
    assert plan.returncode == 0 and "--topup none (the run's)" in _said(plan), plan.stdout


def test_a_named_rule_is_added_recorded_and_then_the_runs(none_run, tmp_path):
    run = _copy(none_run, tmp_path / "r")
    before = set(_samples(run))
    proc = run_bt("continue", run, "--topup", "ambiguous")
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "top-ups: ambiguous (the run's none, adding ambiguous)" in said
    assert (
        "top-ups ambiguous; added top-up rule ambiguous to the run's none (recorded: a plain "
        "`bt continue` now runs ambiguous)" in said
    )
    added = set(_samples(run)) - before
    assert added and {(kind, branch) for _, kind, _, _, branch in added} == {
        ("restart", 2),
        ("restart", 3),
    }
    assert _manifest(run)["topup"] == "ambiguous"
    again = run_bt("continue", run)
    assert again.returncode == 0, again.stderr
    assert "top-ups: ambiguous (the run's)" in _said(again) and "nothing to do" in _said(again)
    more = run_bt("continue", run, "--topup", "terminal")  # added beside it, recorded
    assert more.returncode == 0, more.stderr
    assert "top-ups: terminal,ambiguous (the run's ambiguous, adding terminal)" in _said(more)
    assert "added top-up rule terminal to the run's ambiguous" in _said(more)
    assert _manifest(run)["topup"] == "terminal,ambiguous"


def test_dropping_or_contradicting_the_runs_rules_is_refused(none_run, tmp_path):
    run = _copy(none_run, tmp_path / "r")
    with sqlite3.connect(run / "store.sqlite") as c:
        c.execute("UPDATE manifest SET value='\"ambiguous\"' WHERE key='topup'")
    before = _samples(run), _manifest(run)
    assert_one_line_error(
        run_bt("continue", run, "--topup", "none"),
        2,
        "--topup ambiguous",
        "stored ambiguous vs asked none",
        "only added to",
    )
    assert_one_line_error(
        run_bt("continue", run, "--topup", "terminal,posterior"),
        2,
        "stored ambiguous vs asked terminal,posterior",
        "alternative rules",
    )
    assert (_samples(run), _manifest(run)) == before


def test_a_run_without_a_record_keeps_the_default_and_says_so(none_run, tmp_path):
    run = _copy(none_run, tmp_path / "r")
    with sqlite3.connect(run / "store.sqlite") as c:  # as a bt before the record left it
        c.execute("DELETE FROM manifest WHERE key='topup'")
    before = set(_samples(run))
    proc = run_bt("continue", run)
    assert proc.returncode == 0, proc.stderr
    assert (
        "top-ups: terminal,ambiguous (the default: the run was continued before bt "
        "recorded its top-up rules)" in _said(proc)
    )
    assert set(_samples(run)) - before  # today's behaviour: the default ran (ambiguous cell)
    assert _manifest(run)["topup"] == "terminal,ambiguous"
