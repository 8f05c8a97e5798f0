"""Cohorts: the committed MATH source, the protocol 15.3 recipes, the loader's validation, CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.errors import BtError
from breakthrough.tasks.cohorts import (
    builtin_cohorts_dir,
    cohort_digest,
    cohort_path,
    cohorts_dir,
    list_cohorts,
    load_cohort,
    parse_cohort_text,
    render_cohort,
)
from breakthrough.tasks.math import recipes as cr
from breakthrough.tasks.math.source import boxed_contents, last_boxed, problem_id, read_source

REPO_COHORTS = Path(__file__).resolve().parents[2] / "cohorts"
ID_RE = re.compile(r"^math_\d{5}_[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def source():
    return read_source(REPO_COHORTS / "source" / "math_test.jsonl")


@pytest.fixture(scope="module")
def pools(source):
    return cr.build_pools(source)


@pytest.fixture(scope="module")
def math89(source, pools):
    return cr.build_math89(source, pools)


# ---------------------------------------------------------------- source file


def test_source_rows(source):
    assert len(source) == 5000
    assert Counter(r["level"] for r in source) == {1: 437, 2: 894, 3: 1131, 4: 1214, 5: 1324}
    assert sum(1 for r in source if r["math500_id"]) == 500
    for r in source[:50]:
        assert ID_RE.match(r["id"]) and r["id"] == problem_id(r["source_row"], r["problem"])
    assert source[3159]["id"] == "math_03159_7e3faf8d9130"
    assert source[2814]["id"] == "math_02814_7fdbd1234d96"
    assert all(r["answer"] for r in source)


def test_boxed_scanner():
    assert last_boxed(r"so $\boxed{\frac{1}{2}}$.") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{1} then \fbox{ \{a,b\} }") == r"\{a,b\}"
    assert boxed_contents(r"\boxed{x^{2}} and \fbox{3}") == ["x^{2}", "3"]
    # One scanner with the grader (protocol 7): `\boxed {3}` with a space is not a box.
    assert boxed_contents(r"\boxed {3}") == []
    assert last_boxed(r"\boxed{unclosed") is None
    assert last_boxed("no box") is None


# ---------------------------------------------------------------- recipes


def test_self_checks_and_pools(pools):
    assert len(pools.historical) == 200 and len(pools.pool) == 100
    assert len(pools.challenge) == 50 and len(pools.screen) == 150
    assert Counter(r["level"] for r in pools.historical) == {L: 40 for L in range(1, 6)}
    assert Counter(r["level"] for r in pools.pool) == {L: 20 for L in range(1, 6)}
    assert Counter(r["level"] for r in pools.screen) == {L: 30 for L in range(1, 6)}
    assert not {r["id"] for r in pools.pool} & {r["id"] for r in pools.historical}
    assert not {r["id"] for r in pools.screen} & {r["id"] for r in pools.pool + pools.challenge}
    checks = pools.self_checks()
    assert all(checks.values()), checks
    dev_ids = {r["id"] for r in pools.dev}
    assert "math_03159_7e3faf8d9130" in dev_ids
    assert any(i.startswith("math_03190_") for i in dev_ids)
    assert "math_02814_7fdbd1234d96" not in dev_ids
    split_counts = Counter(pools.pool_splits[r["id"]] for r in pools.pool if r["level"] == 1)
    assert split_counts == {"train": 12, "validation": 4, "test": 4}
    split_counts = Counter(pools.screen_splits[r["id"]] for r in pools.screen if r["level"] == 3)
    assert split_counts == {"train": 18, "validation": 6, "test": 6}


def test_math89_committed_byte_for_byte(math89):
    committed = (REPO_COHORTS / "math89.jsonl").read_bytes()
    assert render_cohort(math89).encode("utf-8") == committed
    assert load_cohort(REPO_COHORTS / "math89.jsonl") == math89


def test_math89_counts(math89):
    assert len(math89) == 89 and len({r["id"] for r in math89}) == 89
    by_stage = Counter(r["stage"] for r in math89)
    assert by_stage == {"dev": 20, "supplement": 20, "wave3": 49}
    mix = {s: Counter(r["level"] for r in math89 if r["stage"] == s) for s in cr.STAGES}
    assert mix["dev"] == {L: 4 for L in range(1, 6)}
    assert mix["supplement"] == {1: 1, 2: 6, 3: 3, 4: 5, 5: 5}
    assert mix["wave3"] == {1: 10, 2: 10, 3: 10, 4: 10, 5: 9}
    # issue 14 (overriding issue 2's "20 exact, 69 stand-ins"): the 20 exact dev rows and the
    # supplement member named by protocol 15.1 are known rows; the other 68 are stand-ins
    known = [r for r in math89 if not r["standin"]]
    assert len(known) == 21
    assert Counter(r["stage"] for r in known) == {"dev": 20, "supplement": 1}
    (member,) = [r for r in known if r["stage"] == "supplement"]
    assert member["id"] == "math_02814_7fdbd1234d96" and member["level"] == 2
    assert member["selection"] == cr.SEL_SUPP_REAL and "KNOWN member" in member["selection"]
    assert "STAND-IN" not in member["selection"]
    standins = [r for r in math89 if r["standin"]]
    assert len(standins) == 68
    assert all("STAND-IN" in r["selection"] for r in standins)
    assert all(ID_RE.match(r["id"]) and r["family"] == "math" for r in math89)
    assert all(r["split"] in ("train", "validation", "test") for r in math89)


def test_math500_and_demo(source):
    m500 = cr.build_math500(source)
    assert len(m500) == 500 and all(r["stage"] == "math500" for r in m500)
    assert render_cohort(m500).encode() == (REPO_COHORTS / "math500.jsonl").read_bytes()
    demo = cr.build_demo(source)
    assert render_cohort(demo).encode() == (REPO_COHORTS / "demo.jsonl").read_bytes()
    assert len(demo) == cr.DEMO_SIZE
    assert all(r["level"] == 1 and r["answer"].isdigit() for r in demo)


def test_cohort_digest_is_canonical(math89):
    reordered = [dict(reversed(list(r.items()))) for r in math89]
    assert cohort_digest(reordered) == cohort_digest(math89)
    assert len(cohort_digest(math89)) == 64


# ---------------------------------------------------------------- validation


def _row(**over):
    row = {
        "id": "p1",
        "family": "math",
        "stage": "dev",
        "selection": "x",
        "standin": False,
        "problem": "1+1?",
        "answer": "2",
        "level": 1,
        "subject": "Algebra",
        "source_row": 0,
    }
    row.update(over)
    return row


def _write(tmp_path, rows_or_lines, name="c.jsonl"):
    lines = [x if isinstance(x, str) else json.dumps(x) for x in rows_or_lines]
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_malformed_json_names_line(tmp_path):
    p = _write(tmp_path, [_row(), "{not json"])
    with pytest.raises(BtError, match=rf"{re.escape(str(p))}:2: malformed JSON"):
        load_cohort(p)


def test_duplicate_id(tmp_path):
    p = _write(tmp_path, [_row(), _row(id="p2"), _row()])
    with pytest.raises(BtError, match=r"c\.jsonl:3: field 'id' duplicates line 1"):
        load_cohort(p)


@pytest.mark.parametrize(
    "row, msg",
    [
        ({k: v for k, v in _row().items() if k != "answer"}, "field 'answer' is missing"),
        (_row(level="3"), "field 'level' must be an integer"),
        (_row(level=True), "field 'level' must be an integer"),
        (_row(level=7), "field 'level' must be 1-5"),
        (_row(standin="no"), "field 'standin' must be a boolean"),
        (_row(family="chess"), "field 'family' must be one of"),
        (_row(split="dev"), "field 'split' must be one of"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_field_errors(tmp_path, row, msg):
    p = _write(tmp_path, [_row(id="ok"), row])
    with pytest.raises(BtError, match=rf":2: {re.escape(msg)}"):
        load_cohort(p)


def test_optimum_family(tmp_path):
    opt = {
        "id": "o1",
        "family": "optimum",
        "stage": "uoo87",
        "selection": "s",
        "standin": False,
        "kind": "knapsack",
        "bin": "small",
        "instance": {"n": 1, "values": [4], "weights": [2], "capacity": 1},
        "optimum": 3.5,
        "n_optima": 1,
    }
    assert parse_cohort_text(json.dumps(opt), "x.jsonl")[0]["optimum"] == 3.5
    bad = dict(opt, instance=[1])
    with pytest.raises(BtError, match=r"x\.jsonl:1: field 'instance' must be an object"):
        parse_cohort_text(json.dumps(bad), "x.jsonl")
    missing = {k: v for k, v in opt.items() if k != "n_optima"}
    with pytest.raises(BtError, match=r"field 'n_optima' is missing .*optimum"):
        parse_cohort_text(json.dumps(missing), "x.jsonl")


def test_names_env_override_and_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("BT_COHORTS_DIR", str(tmp_path))
    _write(tmp_path, [_row(), _row(id="p2", standin=True, stage="wave3")], name="mine.jsonl")
    assert cohorts_dir() == tmp_path
    assert len(load_cohort("mine")) == 2
    with pytest.raises(BtError, match="unknown cohort 'nope'.*mine"):
        load_cohort("nope")
    (info,) = list_cohorts()
    assert (info.name, info.rows, info.standins, info.stages) == ("mine", 2, 1, ("dev", "wave3"))


def test_working_directory_cohorts_first_then_the_builtin_ones(tmp_path, monkeypatch):
    """A name is looked up in ./cohorts of the working directory, then in the cohorts bt ships;
    a user's file of the same name wins, and listing shows each name once."""
    monkeypatch.delenv("BT_COHORTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cohorts_dir() == tmp_path / "cohorts"
    assert cohort_path("math89") == builtin_cohorts_dir() / "math89.jsonl"  # no ./cohorts yet
    (tmp_path / "cohorts").mkdir()
    _write(tmp_path / "cohorts", [_row()], name="demo.jsonl")
    _write(tmp_path / "cohorts", [_row(id="p9")], name="mine.jsonl")
    assert cohort_path("demo") == tmp_path / "cohorts" / "demo.jsonl"
    assert load_cohort("mine")[0]["id"] == "p9"
    by_name = {i.name: i.path for i in list_cohorts()}
    assert by_name["demo"] == tmp_path / "cohorts" / "demo.jsonl"
    assert by_name["math89"] == builtin_cohorts_dir() / "math89.jsonl"
    with pytest.raises(BtError, match=r"unknown cohort 'nope' \(in .*mine.*math89"):
        load_cohort("nope")


# ---------------------------------------------------------------- CLI


def test_cli_list_and_show(monkeypatch):
    monkeypatch.setenv("BT_COHORTS_DIR", str(REPO_COHORTS))
    runner = CliRunner()
    res = runner.invoke(app, ["cohorts", "list"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if " math89 " in x)
    assert "89" in line and "68" in line and "dev,supplement,wave3" in line
    assert "math500" in res.output and "demo" in res.output
    res = runner.invoke(app, ["cohorts", "show", "math89"])
    assert res.exit_code == 0, res.output
    assert "supplement" in res.output and "STAND-IN" in res.output and "level x stage" in res.output
    assert "stand-ins=68" in res.output
    assert "known rows (not stand-ins): 21 (dev 20, supplement 1); stand-ins: 68" in res.output
    assert "math_02814_7fdbd1234d96 (supplement)" in res.output


def test_bt_cohorts_show_names_the_known_member_through_the_console_script():
    bt = Path(sys.executable).with_name("bt")
    out = subprocess.run(
        [str(bt), "cohorts", "show", "math89"],
        capture_output=True,
        text=True,
        env={**os.environ, "BT_COHORTS_DIR": str(REPO_COHORTS)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "known rows (not stand-ins): 21" in out.stdout and "stand-ins: 68" in out.stdout
    assert "math_02814_7fdbd1234d96" in out.stdout


def test_cli_build_check_and_write(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["cohorts", "build", "math89", "--check", "--out", str(REPO_COHORTS)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["cohorts", "build", "demo", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "demo.jsonl").read_bytes() == (REPO_COHORTS / "demo.jsonl").read_bytes()
    res = runner.invoke(app, ["cohorts", "build", "math89", "--check", "--out", str(tmp_path)])
    assert res.exit_code == 1


def test_list_reports_invalid_file_when_not_strict(tmp_path):
    _write(tmp_path, [_row()], name="good.jsonl")
    _write(tmp_path, [_row(), "{"], name="bad.jsonl")
    with pytest.raises(BtError, match=r"bad\.jsonl:2"):
        list_cohorts(tmp_path)
    infos = {i.name: i for i in list_cohorts(tmp_path, strict=False)}
    assert infos["good"].error is None and infos["good"].rows == 1
    assert "bad.jsonl:2: malformed JSON" in infos["bad"].error


@pytest.mark.heavy
def test_cli_builds_uoo_cohorts_byte_for_byte(tmp_path):
    """`bt cohorts build uoo` regenerates the committed uoo87/uoo29 files exactly."""
    res = CliRunner().invoke(app, ["cohorts", "build", "uoo", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for name in ("uoo87", "uoo29"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (
            builtin_cohorts_dir() / f"{name}.jsonl"
        ).read_bytes()
