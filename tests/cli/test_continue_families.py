"""Issue 40, section 5: a plain `bt continue` (no run named) continued a `uoo29` run made only
for `bt report uoo` (its base samples), 41 s of generation nobody asked for. Runs found in a
folder are continued only when of the study's task families (math, arith); another family's run
is skipped with one note, continued only when named (`pipeline.targets`). Through the installed
`bt`: exit code, the note, what is and is not written."""

from __future__ import annotations

import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt, snapshot

BASE = ("--limit", "1", "--max-tokens", "8")
CONTINUE = ("--budget", "4", "--answer-budget", "4", "--anchors", "4", "--restarts", "4")
CONTINUE += ("--samples", "1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """runs/arith (the demo's family) and runs/uoo (an optimum run for `bt report uoo`): `bt
    base` of each, made in this process (setup: the tests' subject is `bt continue`)."""
    root = tmp_path_factory.mktemp("families") / "runs"
    for cohort, name in (("arith", "arith"), ("uoo29", "uoo")):
        bt_in_process(
            "base", "--cohort", cohort, *BASE, "--model", tiny_model_dir, "--runs-dir", root,
            "--run", name,
        )  # fmt: skip
    return root


def test_a_plain_continue_skips_a_run_of_another_family_with_one_note(runs, tmp_path):
    uoo = snapshot(runs / "uoo")
    arith = snapshot(runs / "arith")
    dry = run_bt("continue", "--runs-dir", runs, *CONTINUE, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "uoo" not in dry.stdout and "arith" in dry.stdout, dry.stdout
    proc = run_bt("continue", "--runs-dir", runs, *CONTINUE)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note: skipped")]
    assert len(notes) == 1 and f"{runs / 'uoo'} (optimum task family)" in notes[0], proc.stderr
    assert f"bt continue {runs / 'uoo'}" in notes[0]
    assert snapshot(runs / "uoo") == uoo  # nothing generated, nothing recorded
    assert snapshot(runs / "arith") != arith  # the study run was continued
    # named, it is continued: the user asked for it
    proc = run_bt("continue", runs / "uoo", *CONTINUE)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(runs / "uoo") != uoo


def test_only_runs_of_another_family_in_the_folder_is_one_line_and_nothing_written(runs, tmp_path):
    import shutil

    alone = tmp_path / "runs"
    shutil.copytree(runs / "uoo", alone / "uoo")
    before = snapshot(alone / "uoo")
    for extra in ((), ("--add-budget", "8")):
        proc = run_bt("continue", "--runs-dir", alone, *CONTINUE[:2], *extra)
        assert_one_line_error(proc, 2, f"{alone / 'uoo'} (optimum task family)", "bt continue")
        assert snapshot(alone / "uoo") == before
