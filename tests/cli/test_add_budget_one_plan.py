"""`bt continue --add-budget B2` plans its work in one place (`budget_arm.arm_work`), so its
`--dry-run`, the "nothing to do" check made before a model loads and the arm itself count the
same samples. Before, the check counted every target anchor while the dry run and the arm left
out those without room for B2 + the answer reserve within the total cap (`check_budget`): a
run whose remaining target anchors all lacked room loaded the model, wrote its arm into the
manifest and said `arm B=...: 0 cells, 0 probe samples`. Through the installed `bt` on runs of
the tiny model, probed at B = 1,024 without a model (`continue_fixture.store_probes`)."""

from __future__ import annotations

import re

from bt_cli import run_bt, snapshot
from continue_fixture import make_run, store_probes, two_cell_run


def _said(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def _nothing_why(said: str) -> str:
    """The reason after "nothing to do: " (up to "(no model loaded)" when there is one)."""
    return said.split("nothing to do: ", 1)[1].split(" (no model loaded)")[0].strip()


def test_no_target_anchor_with_room_is_nothing_to_do_everywhere(tiny_model_dir, tmp_path):
    # targets 64, 128, 256 of both cells; B2 = 15,850 + 512 leaves no room after any prefix
    run = store_probes(two_cell_run(tmp_path, tiny_model_dir), {64: False, 128: True, 256: True})
    plan = run_bt("continue", run, "--add-budget", "15850", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    planned = _said(plan)
    assert "arm B=15850 0 samples, at most 0 tokens" in planned, planned
    why = _nothing_why(planned)
    assert why.startswith(
        "6 target anchors of 2 trajectories leave no room for B=15850 + the answer reserve "
        "512 within the total cap 16384 (--add-budget "
    ), why
    assert re.search(r"--add-budget \d+ or less fits every target anchor\)$", why), why

    before = snapshot(run)
    ran = run_bt("continue", run, "--add-budget", "15850")
    assert ran.returncode == 0, ran.stderr
    said = _said(ran)
    assert "fx: arm B=15850: nothing to do: " in said and "(no model loaded)" in said, said
    assert _nothing_why(said) == why  # the dry run's reason, word for word
    assert "0 cells" not in said and "probe arm at" not in said, said
    assert snapshot(run) == before  # nothing written: no arm recorded for nothing


def test_dry_run_and_arm_count_the_same_when_an_anchor_lacks_room(tiny_model_dir, tmp_path):
    # one cell, a trace of ~16,100 reasoning tokens probed at 64 (0/4), 128 and 16,000 (4/4):
    # targets 64, 128, 16,000; after a 16,000-token prefix B2 + 512 does not fit the cap (the
    # arm's 8 samples branch from 64 and 128 tokens: short prefills, the same counts)
    run = tmp_path / "runs" / "long"
    make_run(run, tiny_model_dir, {"pL": (100, 16000)}).close()
    store_probes(run, {64: False, 128: True, 16000: True})
    plan = run_bt("continue", run, "--add-budget", "16", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "arm B=16 8 samples, at most 4,224 tokens" in _said(plan), plan.stdout  # 8 x (16+512)

    ran = run_bt("continue", run, "--add-budget", "16", "--batch-size", "8")
    assert ran.returncode == 0, ran.stderr
    said = _said(ran)
    assert "long: arm B=16: 1 cell, 8 probe samples;" in said, said  # what the dry run said
    assert "tiny-llama:pL: anchors [16000] leave no room for B=16 + the answer reserve" in said

    again = run_bt("continue", run, "--add-budget", "16", "--dry-run")
    assert "arm B=16 0 samples" in _said(again), again.stdout
    why = _nothing_why(_said(again))
    assert why == (
        "every probe of the arm that can run is stored (1 target trajectories, 3 anchors x 4 "
        "branches at B=16); 1 target anchor of 1 trajectory leaves no room for B=16 + the "
        "answer reserve 512 within the total cap 16384"
    ), why
    rerun = run_bt("continue", run, "--add-budget", "16")
    assert rerun.returncode == 0, rerun.stderr
    said = _said(rerun)
    assert "long: arm B=16: nothing to do: " in said and "(no model loaded)" in said, said
    assert _nothing_why(said) == why
