"""`bt continue` on the tiny model: probes, bisection, restarts, top-ups, resume after SIGKILL."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from bt_cli import bt_in_process
from typer.testing import CliRunner

from breakthrough.classify.panels import probe_panel, restart_panel
from breakthrough.classify.regimes import label_panels
from breakthrough.cli import app
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore
from breakthrough.tasks.grade import Grade

ARGS = ["--budget", "8", "--answer-budget", "4", "--restarts", "8,16", "--anchors", "64,128,256"]


def _frames(run: Path):
    with RunStore(run) as s:
        return s.samples_frame(), s.cells_frame()


def test_continue_runs_every_phase(fixture_run: Path) -> None:
    res = CliRunner().invoke(app, ["continue", str(fixture_run), *ARGS])
    assert res.exit_code == 0, res.output
    # The announcement shows this continuation's settings, not the run's previous ones.
    said = " ".join(res.output.split())
    assert "B=8, answer 4" in said and "restarts at 8,16" in said
    df, cells = _frames(fixture_run)
    proto = DEFAULT.with_overrides(budget=8, answer_budget=4, restart_budgets=(8, 16))
    probes = probe_panel(df, proto)
    a = probes[probes["cell_id"].str.endswith(":pA")].set_index("anchor")
    b = probes[probes["cell_id"].str.endswith(":pB")].set_index("anchor")
    # A: grid 64/128/256 then two bisection rounds inside (64, 128].
    assert list(a.index) == [64, 96, 128, 256] or list(a.index) == [64, 96, 112, 128, 256]
    assert a.loc[64, "k"] == 0 and a.loc[128, "k"] == a.loc[128, "n"] == 4
    # B: censored at the final anchor with 4/4 -> terminal replication, branches 4-7.
    assert list(b.index) == [64, 128, 256] and b.loc[256, "n"] == 8 and b.loc[256, "k"] == 8
    labels = label_panels(probes, restart_panel(df, proto), cells, protocol=proto).set_index(
        "problem_id"
    )
    assert labels.loc["pA", "regime"] == "prefix_limited"
    assert labels.loc["pB", "regime"] == "terminal_A1"
    rest = df[df["kind"] == "restart"]
    assert sorted(set(rest["budget"])) == [8, 16] and len(rest) == 16
    probe_rows = df[df["kind"] == "probe"]
    assert (
        probe_rows["n_tokens"]
        == probe_rows["prefix_len"]
        + probe_rows["extra"].map(
            lambda e: sum(
                __import__("json").loads(e)[k]
                for k in ("reasoning_tokens", "inserted_tokens", "answer_tokens")
            )
        )
    ).all()
    # Rerun: nothing new, said before any model is loaded.
    n = len(df)
    res = CliRunner().invoke(app, ["continue", str(fixture_run), *ARGS])
    assert res.exit_code == 0 and "nothing to do" in " ".join(res.output.split())
    assert len(_frames(fixture_run)[0]) == n
    status = CliRunner().invoke(app, ["status", str(fixture_run)])
    assert status.exit_code == 0 and "64:0/4" in status.output


def test_ambiguous_restart_cells_get_attempts_4_to_7(fixture_run: Path, tiny_model_dir) -> None:
    """A restart cell at 2/4 is enlarged to 8 attempts (the study never ran this rule)."""
    from breakthrough.models.loading import load_model
    from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run

    proto = DEFAULT.with_overrides(budget=8, answer_budget=4, restart_budgets=(8,), anchors=(64,))
    loaded = load_model(str(tiny_model_dir), family="qwen")
    continue_run(fixture_run, loaded, ContinueOptions(protocol=proto, topup=()))
    with RunStore(fixture_run) as s:
        ids = s.conn.execute(
            "SELECT sample_id FROM samples WHERE kind='restart' AND cell_id LIKE '%:pA'"
            " AND branch IN (0, 1)"
        ).fetchall()
        s.set_grades([(i, Grade(True, "correct", "fixture", "math", "t")) for (i,) in ids])
    continue_run(fixture_run, loaded, ContinueOptions(protocol=proto, topup=("ambiguous",)))
    df, _ = _frames(fixture_run)
    r = df[(df["kind"] == "restart") & df["cell_id"].str.endswith(":pA")]
    assert sorted(r["branch"]) == list(range(8))
    assert (r[r["branch"] >= 4]["extra"].str.contains('"topups"')).all()


def test_continue_killed_and_rerun_equals_uninterrupted(fixture_run: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(fixture_run, clean)
    cmd = [sys.executable, "-m", "breakthrough.cli", "continue", *ARGS, "--batch-size", "2"]
    proc = subprocess.Popen(
        [*cmd, str(fixture_run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        with RunStore(fixture_run) as s:
            if len(s.existing_keys("probe")) >= 6:
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with RunStore(fixture_run) as s:
        assert s.verify_integrity() == []
    assert subprocess.run([*cmd, str(fixture_run)], capture_output=True).returncode == 0
    # The uninterrupted reference run (its subject is not the kill): in this process.
    bt_in_process("continue", *ARGS, "--batch-size", "8", clean)
    da, _ = _frames(fixture_run)
    db, _ = _frames(clean)
    key = ["cell_id", "kind", "anchor", "budget", "branch"]
    da, db = da.sort_values(key).reset_index(drop=True), db.sort_values(key).reset_index(drop=True)
    assert da[key].equals(db[key])
    assert all(np.array_equal(x, y) for x, y in zip(da["token_ids"], db["token_ids"], strict=True))
    assert list(da["correct"]) == list(db["correct"])


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--topup", "sometimes"], "--topup"),
        (["--restarts", "8,x"], "--restarts"),
        (["--anchors", "0"], "--anchors"),
        (["--samples", "0"], "--samples: expected a positive integer"),
    ],
)
def test_continue_clear_errors(fixture_run: Path, args, msg) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "breakthrough.cli", "continue", str(fixture_run), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and msg in proc.stderr and proc.stderr.count("\n") == 1


def test_continue_without_runs_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "breakthrough.cli", "continue", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no run directories" in proc.stderr
