"""`bt sample` and `bt cohorts screen` on the tiny test model: N seeded graded attempts per
problem, resume (a rerun adds nothing, a larger N only the new ones), SIGKILL then rerun with
nothing duplicated, one-line refusals, and a screen that writes the cohort of its band."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from bt_cli import bt_in_process
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.engine import EngineSpec
from breakthrough.errors import BtError
from breakthrough.pipeline.sample import SampleRequest
from breakthrough.pipeline.screen import ScreenRequest, select_in_band
from breakthrough.protocol import DEFAULT
from breakthrough.seeds import attempt_seed
from breakthrough.store import RunStore

BT = str(Path(sys.executable).with_name("bt"))


def _sample(runs: Path, model: Path, *extra: str):
    args = [
        "sample",
        "--cohort",
        "demo",
        "--model",
        str(model),
        "--runs-dir",
        str(runs),
        "--run",
        "t",
        "--max-tokens",
        "6",
        "--limit",
        "2",
        *extra,
    ]
    return CliRunner().invoke(app, args)


def _attempts(run_dir: Path):
    with RunStore(run_dir, readonly=True) as s:
        return s.samples_frame(kind="attempt")


def test_sample_stores_n_graded_seeded_attempts_and_resumes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    res = _sample(tmp_path, tiny_model_dir, "--attempts", "3")
    assert res.exit_code == 0, res.output
    run_dir = tmp_path / "attempts" / "t"
    df = _attempts(run_dir)
    assert len(df) == 6 and set(df["kind"]) == {"attempt"}
    for cell, group in df.groupby("cell_id"):
        assert sorted(group["branch"]) == [0, 1, 2]
        assert [int(s) for s in group.sort_values("branch")["seed"]] == [
            attempt_seed(cell, b) for b in range(3)
        ]
    assert df["seed"].nunique() == 6  # distinct seeds
    assert df["grade_status"].isin({"missing", "wrong", "correct"}).all()  # every attempt graded
    assert (df["n_tokens"] <= 6).all() and (df["budget"] == 6).all() and (df["anchor"] == -1).all()
    # different seeds give different draws of the same prompt
    cell0 = df[df["cell_id"] == df["cell_id"].iloc[0]]
    assert len({tuple(t) for t in cell0["token_ids"]}) > 1
    with RunStore(run_dir, readonly=True) as s:
        man = s.manifest()
    assert man["attempts"]["max_tokens"] == 6 and man["protocol"]["base_max_tokens"] == 6
    with RunStore(run_dir, readonly=True) as s:  # the per-token instrumentation rides along
        sig = s.samples_frame(kind="attempt", signals=True)
    assert sig["signals"].map(bool).all()
    assert all(
        len(v) == n
        for d, n in zip(sig["signals"], sig["n_tokens"], strict=True)
        for v in d.values()
    )
    before = {(r.cell_id, r.branch): r.sample_id for r in df.itertuples()}

    # the same request again adds nothing
    res = _sample(tmp_path, tiny_model_dir, "--attempts", "3")
    assert res.exit_code == 0, res.output
    assert "0 attempts generated" in res.output
    assert len(_attempts(run_dir)) == 6

    # a larger N adds only the new indices; the old rows are untouched
    res = _sample(tmp_path, tiny_model_dir, "--attempts", "5")
    assert res.exit_code == 0, res.output
    df5 = _attempts(run_dir)
    assert len(df5) == 10
    for r in df5.itertuples():
        if r.branch < 3:
            assert before[(r.cell_id, r.branch)] == r.sample_id
    # attempt b is the same draw whichever N asked for it
    old = df.set_index(["cell_id", "branch"])["token_ids"]
    new = df5.set_index(["cell_id", "branch"])["token_ids"]
    for key in old.index:
        assert np.array_equal(old[key], new[key])


def test_sample_dry_run_writes_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    res = _sample(tmp_path, tiny_model_dir, "--attempts", "4", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "8 samples, at most 48 tokens (8 of 8 attempts to generate)" in res.output
    assert not (tmp_path / "attempts").exists()


@pytest.mark.parametrize(
    "bad,msg",
    [
        (["--attempts", "0"], "--attempts"),
        (["--attempts", "2", "--max-tokens", "0"], "--max-tokens"),
        (["--attempts", "2", "--cohort", "nope"], "unknown cohort"),
        (["--attempts", "2", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_sample_refusals_are_one_line(tmp_path: Path, tiny_model_dir: Path, bad, msg) -> None:
    args = [
        "sample",
        "--cohort",
        "demo",
        "--model",
        str(tiny_model_dir),
        "--runs-dir",
        str(tmp_path),
        *bad,
    ]
    proc = subprocess.run([BT, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert msg in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_sample_killed_then_rerun_completes_without_duplicates(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    cmd = [
        BT,
        "sample",
        "--cohort",
        "demo",
        "--model",
        str(tiny_model_dir),
        "--runs-dir",
        str(tmp_path),
        "--attempts",
        "4",
        "--max-tokens",
        "24",
        "--batch-size",
        "1",
        "--limit",
        "3",
    ]
    proc = subprocess.Popen(
        [*cmd, "--run", "killed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run_dir = tmp_path / "attempts" / "killed"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (run_dir / "store.sqlite").exists():
            try:
                with RunStore(run_dir, readonly=True) as s:
                    if len(s.existing_keys("attempt")) >= 2:
                        break
            except BtError:
                pass  # the file is being created
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with RunStore(run_dir, readonly=True) as s:
        got = len(s.existing_keys("attempt"))
    assert 2 <= got < 12
    assert subprocess.run([*cmd, "--run", "killed"], capture_output=True).returncode == 0
    # The uninterrupted reference run (its subject is not the kill): in this process.
    bt_in_process(*cmd[1:], "--run", "clean", "--batch-size", "4")
    da, db = _attempts(run_dir), _attempts(tmp_path / "attempts" / "clean")
    assert len(da) == 12 and not da.duplicated(["cell_id", "branch"]).any()
    ka = da.set_index(["cell_id", "branch"]).sort_index()
    kb = db.set_index(["cell_id", "branch"]).sort_index()
    assert list(ka.index) == list(kb.index)
    for key in kb.index:  # the resumed run drew exactly what an uninterrupted one draws
        assert np.array_equal(ka.loc[key, "token_ids"], kb.loc[key, "token_ids"])
        assert ka.loc[key, "correct"] == kb.loc[key, "correct"]


def _screen_args(tmp_path: Path, model: Path, *extra: str) -> list[str]:
    return [
        "cohorts",
        "screen",
        "demo",
        "--name",
        "screened",
        "--out",
        str(tmp_path / "cohorts"),
        "--model",
        str(model),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--seeds",
        "21,22",
        "--max-tokens",
        "6",
        "--limit",
        "3",
        *extra,
    ]


def test_screen_writes_the_band_cohort_and_list_shows_it(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    env = {**os.environ, "BT_COHORTS_DIR": str(tmp_path / "cohorts")}
    (tmp_path / "cohorts").mkdir()
    demo = Path(__file__).resolve().parents[2] / "cohorts" / "demo.jsonl"
    (tmp_path / "cohorts" / "demo.jsonl").write_bytes(demo.read_bytes())
    # a band no problem of the random model reaches: one line, nothing written
    proc = subprocess.run(
        [BT, *_screen_args(tmp_path, tiny_model_dir, "--band", "2,2")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and "no cohort written" in proc.stderr, proc.stderr
    assert not (tmp_path / "cohorts" / "screened.jsonl").exists()
    # the attempts it made are kept; this screen keeps the band [0, 1] and generates nothing new
    proc = subprocess.run(
        [BT, *_screen_args(tmp_path, tiny_model_dir, "--band", "0,1", "--stage", "scr")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "runs" / "screens" / f"demo-{_alias(tiny_model_dir)}"
    df = _attempts(run_dir)
    assert len(df) == 6 and sorted(set(df["seed"])) == [21, 22]
    succ = df.groupby("problem_id")["correct"].apply(
        lambda c: int(c.fillna(False).astype(bool).sum())
    )
    want = [pid for pid in succ.index if 0 <= succ[pid] <= 1]
    rows = [
        json.loads(line)
        for line in (tmp_path / "cohorts" / "screened.jsonl").read_text().splitlines()
    ]
    assert sorted(r["id"] for r in rows) == sorted(want)
    for r in rows:
        assert r["stage"] == "scr" and r["screen_attempts"] == 2
        assert r["screen_successes"] == succ[r["id"]]
        assert r["selection"].startswith(f"bt cohorts screen (protocol 6.2): {succ[r['id']]}/2 ")
        assert "seeds 21,22" in r["selection"] and "6-token attempts" in r["selection"]
    listed = subprocess.run(
        [BT, "cohorts", "list"], capture_output=True, text=True, env=env, timeout=60
    )
    assert listed.returncode == 0 and "screened" in listed.stdout
    # never overwrites: the same name again is one line
    proc = subprocess.run(
        [BT, *_screen_args(tmp_path, tiny_model_dir, "--band", "0,1")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and "already exists" in proc.stderr


def _alias(model_dir: Path) -> str:
    from breakthrough.models.loading import model_identity

    return model_identity(str(model_dir)).alias


def test_band_selection_keeps_exactly_the_rows_in_the_band() -> None:
    rows = [{"id": f"p{i}", "selection": "src"} for i in range(5)]
    counts = {"p0": (0, 6), "p1": (1, 6), "p2": (3, 6), "p3": (5, 6), "p4": (6, 6)}
    sample = SampleRequest(
        cohort="demo",
        models=("a", "b"),
        attempts=3,
        protocol=DEFAULT,
        engine=EngineSpec(),
        runs_dir=Path("runs"),
        seeds=(21, 22, 23),
    )
    req = ScreenRequest(sample=sample, band=(1, 5), name="x")
    kept = select_in_band(rows, counts, req, ["a", "b"], "demo", "0" * 64)
    assert [r["id"] for r in kept] == ["p1", "p2", "p3"]
    assert [r["screen_successes"] for r in kept] == [1, 3, 5]
    assert "3/6 verified successes, in the band [1, 5]" in kept[1]["selection"]
    assert "source selection: src" in kept[1]["selection"]


@pytest.mark.parametrize(
    "bad,msg",
    [
        (["--band", "3,1"], "--band"),
        (["--band", "0,9"], "--band: HI=9"),
        (["--seeds", "21,21"], "--seeds"),
        (["--name", "../x"], "--name"),
    ],
)
def test_screen_refusals_are_one_line(tmp_path: Path, tiny_model_dir: Path, bad, msg) -> None:
    proc = subprocess.run(
        [BT, *_screen_args(tmp_path, tiny_model_dir, *bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert msg in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cohorts").exists()


def test_screen_under_other_settings_names_the_run_option_it_has(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Issue 30 (Found 3): a smaller rerun of a screen was told `use a new run directory (--run
    NAME)`, and `--run` was `No such option`. The option exists now and does what it says."""

    def args(name: str, tokens: str, *extra: str) -> list[str]:
        return [
            "cohorts",
            "screen",
            "demo",
            "--name",
            name,
            "--out",
            str(tmp_path / "cohorts"),
            "--model",
            str(tiny_model_dir),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--seeds",
            "21,22",
            "--max-tokens",
            tokens,
            "--limit",
            "1",
            "--band",
            "0,2",
            *extra,
        ]

    def bt(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [BT, *a],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )

    bt_in_process(*args("first", "6"))  # the earlier screen (setup): in this process
    proc = bt(*args("second", "4"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--run NAME" in proc.stderr
    assert not (tmp_path / "cohorts" / "second.jsonl").exists()
    proc = bt(*args("second", "4", "--run", "short"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "runs" / "screens" / "short" / "store.sqlite").is_file()
    assert (tmp_path / "cohorts" / "second.jsonl").is_file()
