"""Issue 30, item 3, through the installed `bt`: when a command does nothing it says why, and
what would change it, before a model is loaded.

  * `bt continue RUN --add-budget 16` printed `arm B=16: 0 cells, 0 probe samples` and nothing
    else; a rerun of a finished arm loaded the model and ran the arm again;
  * the study page's "Missing" hints were commands that, run, did nothing
    (`bt continue RUN --topup terminal,ambiguous` → `nothing to do`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from bt_cli import run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.models.segments import SOLUTION, THINKING
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.grade import Grade


def _run(path: Path, cells: tuple[str, ...], model: Path) -> Path:
    """A continued run of `cells` (classify_fixture's known labels) recorded for `model`, whose
    files `bt continue` checks before anything else."""
    spec = cell_spec()
    run = write_store(path, {c: spec[c] for c in cells})
    with RunStore(run) as store:
        store.update_manifest({"model_id": str(model), "topup": "terminal,ambiguous"})
    return run


def _base_trace(cell: str, reasoning: int) -> SampleRecord:
    """A base trace of `reasoning` thinking tokens and a short solution (segment codes)."""
    n = reasoning + 8
    return SampleRecord(
        cell_id=cell,
        kind="base",
        anchor=-1,
        budget=0,
        branch=0,
        seed=11,
        prefix_len=0,
        token_ids=np.arange(n, dtype=np.int32),
        text="t",
        finish_reason="eos",
        segments=np.array([THINKING] * reasoning + [SOLUTION] * 8, np.uint8),
    )


def _said(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def test_an_arm_with_no_target_says_why_without_loading_a_model(tmp_path, tiny_model_dir):
    # g:p2 is instant, m:p1 budget-limited (its probes never reach τ): no A2 target
    run = _run(tmp_path / "run", ("g:p2", "m:p1"), tiny_model_dir)
    before = (run / "store.sqlite").read_bytes()
    proc = run_bt("continue", run, "--add-budget", "16")
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "arm B=16: nothing to do: no trajectory is an A2 target" in said, said
    assert (
        "of 2 probed at B=1024, 1 never reach p >= τ=0.75 stably (no T_F event) and 1 "
        "have an instant one" in said
    ), said
    assert "(no model loaded)" in said and "0 cells" not in said
    assert (run / "store.sqlite").read_bytes() == before  # nothing written


def test_a_finished_arm_says_so_before_loading_a_model(tmp_path, tiny_model_dir):
    # g:p1 is prefix-limited (T_F = 128, stable at 256): the arm re-probes 64 ... 256; all stored
    run = _run(tmp_path / "run", ("g:p1",), tiny_model_dir)
    with RunStore(run) as store:
        recs = [
            SampleRecord(
                cell_id="g:p1",
                kind="probe",
                anchor=a,
                budget=16,
                branch=b,
                seed=b,
                prefix_len=0,
                token_ids=np.array([1], np.int32),
                text="x",
                finish_reason="length",
            )
            for a in (64, 96, 112, 128, 256)
            for b in range(4)
        ]
        store.add_samples(recs, [Grade(False, "wrong", "numeric", "math", "t")] * len(recs))
    proc = run_bt("continue", run, "--add-budget", "16")
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert (
        "arm B=16: nothing to do: every probe of the arm is stored (1 target trajectories, "
        "5 anchors x 4 branches at B=16) (no model loaded)" in said
    ), said


def test_every_missing_hint_of_the_study_page_is_a_command_that_fills_it(tmp_path):
    """A run continued under terminal,ambiguous whose top-ups are all stored (no ambiguous cell,
    no A1 event): `--topup terminal,ambiguous` would do nothing (`nothing to do`), so the page
    says why and names no command; the A2 hint names the run, which holds a target."""
    y, n = True, False
    done = {
        "probes": {a: [y] * 4 for a in (128, 256, 512)} | {a: [n] * 4 for a in (64, 96, 112)},
        "restarts": {c: [n] * 4 for c in (1024, 2048, 4096, 8192)},
        "level": 4,
        "stage": "dev",
    }
    runs = tmp_path / "runs"
    write_store(runs / "a", {"g:p9": done})
    with RunStore(runs / "a") as store:  # its base trace: 600 reasoning tokens, what the arm cuts
        store.add_samples([_base_trace("g:p9", 600)], reasoning_tokens={"g:p9": 600})
    proc = run_bt("report", "study", runs, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((runs / "study" / "headlines.json").read_text())
    missing = {m["what"]: m for m in doc["missing"]}
    for what in ("matched compute (9.3)", "top-up resolution (3.5, 9.4)"):
        m = missing[what]
        assert m["command"].startswith("none for these runs: more problems"), m
        assert "top-ups these runs are owed are stored" in m["why"], m
    a2 = missing["continuation-budget falsification (3.6, A2)"]
    assert a2["command"] == f"bt continue {runs / 'a'} --add-budget 4096", a2
    with RunStore(runs / "a", readonly=True) as store:  # run, the A2 hint has work to do
        from breakthrough.pipeline.budget_arm import arm_work

        assert arm_work(store, 4096).missing == 5 * 4
