"""`bt base` end to end on the tiny test model: storage, grading, resume, refusal, SIGKILL."""

from __future__ import annotations

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
from breakthrough.errors import BtError
from breakthrough.store import RunStore


def _base(runs: Path, model: Path, *extra: str):
    args = [
        "base",
        "--cohort",
        "demo",
        "--model",
        str(model),
        "--runs-dir",
        str(runs),
        "--run",
        "t",
        "--max-tokens",
        "12",
        *extra,
    ]
    return CliRunner().invoke(app, args)


def test_base_stores_graded_traces_and_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    res = _base(tmp_path, tiny_model_dir, "--limit", "3")
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "t") as s:
        df = s.samples_frame()
        man = s.manifest()
        cells = s.cells_frame()
    assert len(df) == 3 and set(df["kind"]) == {"base"}
    # the weights' content digest, not the folder path (no machine path in a manifest)
    assert man["model_id"].startswith("local:") and man["model_digest"].startswith("sha256:")
    assert man["model_id"][len("local:") :] == man["model_digest"][len("sha256:") :]
    assert man["cohort"] == "demo"
    row = df.iloc[0]
    assert (
        len(row["token_ids"])
        == row["n_tokens"]
        == len(row["logprobs"])
        == len(row["segments"])
        == 12
    )
    assert (row["logprobs"] <= 0).all() and (row["entropies"] >= 0).all()
    assert (
        row["grade_status"] in {"missing", "wrong", "correct"} and row["finish_reason"] == "length"
    )
    assert cells["reasoning_tokens"].notna().sum() == 3
    # Rerun with the whole cohort: only the 2 missing cells are generated.
    res = _base(tmp_path, tiny_model_dir)
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "t") as s:
        df2 = s.samples_frame()
    assert len(df2) == 5
    assert df2.iloc[0]["token_ids"].tolist() == row["token_ids"].tolist()


def test_base_refuses_a_run_made_under_another_protocol(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    assert _base(tmp_path, tiny_model_dir, "--limit", "1").exit_code == 0
    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--model",
            str(tiny_model_dir),
            "--runs-dir",
            str(tmp_path),
            "--run",
            "t",
            "--max-tokens",
            "13",
        ],
    )
    assert res.exit_code != 0
    said = str(res.exception) + res.output
    assert "protocol.base_max_tokens" in said and "12 vs 13" in said  # names the setting


@pytest.mark.parametrize(
    "bad,msg",
    [
        (["--cohort", "nope"], "unknown cohort"),
        (["--problems", "math_99999_x"], "--problems"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_base_clear_errors(tmp_path: Path, tiny_model_dir: Path, bad, msg) -> None:
    args = ["--model", str(tiny_model_dir), "--runs-dir", str(tmp_path), "--cohort", "demo", *bad]
    proc = subprocess.run(
        [sys.executable, "-m", "breakthrough.cli", "base", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert msg in proc.stderr and proc.stderr.count("\n") == 1


def test_base_killed_and_rerun_has_every_cell_once(tmp_path: Path, tiny_model_dir: Path) -> None:
    """SIGKILL mid-run, rerun: every cell exactly once, tokens equal to an uninterrupted run."""
    cmd = [
        sys.executable,
        "-m",
        "breakthrough.cli",
        "base",
        "--cohort",
        "demo",
        "--model",
        str(tiny_model_dir),
        "--runs-dir",
        str(tmp_path),
        "--max-tokens",
        "40",
        "--batch-size",
        "1",
    ]
    proc = subprocess.Popen(
        [*cmd, "--run", "killed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    store_file = tmp_path / "killed" / "store.sqlite"
    deadline = time.time() + 120
    while time.time() < deadline:
        if store_file.exists():
            try:
                with RunStore(tmp_path / "killed", readonly=True) as s:
                    if len(s.existing_keys("base")) >= 1:
                        break
            except BtError:
                pass  # the file is being created (0 bytes, no schema yet)
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with RunStore(tmp_path / "killed") as s:
        assert 1 <= len(s.existing_keys("base")) < 5
    assert subprocess.run([*cmd, "--run", "killed"], capture_output=True).returncode == 0
    # The uninterrupted reference run (its subject is not the kill): in this process.
    bt_in_process(*cmd[3:], "--run", "clean", "--batch-size", "4")
    with RunStore(tmp_path / "killed") as a, RunStore(tmp_path / "clean") as b:
        da, db = a.samples_frame(), b.samples_frame()
    assert sorted(da["cell_id"]) == sorted(db["cell_id"]) and len(set(da["cell_id"])) == 5
    for cid in db["cell_id"]:
        ta = da.loc[da["cell_id"] == cid, "token_ids"].iloc[0]
        tb = db.loc[db["cell_id"] == cid, "token_ids"].iloc[0]
        assert np.array_equal(ta, tb)
