"""`bt status` answers without pandas (issue 30, "Fast answers"): it reads each sample's key and
verdict from the store as plain tuples and applies classify's rules on panels by cell. The
table and `--json` a user sees must be what the pandas path gave, so every test here compares
the installed `bt status` with `pandas_status` below: the pandas assembly `bt status` ran
before (classify's data-frame panels, `plan_next`, `unfinished_cells`), kept as the reference.
Runs: hand-built stores with the awkward cases (ungraded samples, branches beyond the
canonical ones, a probe cell short of its branches, an A2 re-probe at another B, cells without
a base trace, recorded top-up rules, a --tau override) and a real run continued by the tiny
model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bt_cli import run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.classify.completeness import unfinished_cells
from breakthrough.classify.panels import probe_panel, restart_panel, rows_by_cell
from breakthrough.classify.plan import plan_next
from breakthrough.pipeline.manifest import resolve_topup
from breakthrough.pipeline.status import CellStatus, RunStatus
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.grade import Grade


def pandas_status(run_dir: Path, tau: float | None = None) -> RunStatus:
    """`run_status` as bt computed it with pandas before issue 30 (the reference)."""
    with RunStore(run_dir, readonly=True) as store:
        protocol = store.protocol()
        df = store.samples_frame(arrays=False)
        cells = store.cells_frame()
        man = store.manifest()
    if tau is not None:
        protocol = protocol.with_overrides(tau=tau)
    topup = resolve_topup(run_dir, man, None)
    probes, rests = probe_panel(df, protocol), restart_panel(df, protocol)
    plan = plan_next(probes, rests, protocol=protocol, topup=topup.rules)
    # a cell whose probes were cut from a base trace the store no longer holds, or, in a run
    # `bt continue` continued, any cell holding a probe or restart without one (issue 52)
    worked = df["kind"].isin(["probe", "restart"])
    if "continuation" not in man:
        worked &= (df["kind"] == "probe") & (df["prefix_len"] > 0)
    cut = df[worked]["cell_id"]
    gone = set(cut) - set(df[df["kind"] == "base"]["cell_id"])
    unfinished = unfinished_cells(
        df, cells, probe_rows=rows_by_cell(probes, "anchor"), protocol=protocol, base_gone=gone
    ).set_index("cell_id")
    base = df[df["kind"] == "base"].set_index("cell_id")
    out = []
    for cell, rt in zip(cells["cell_id"], cells["reasoning_tokens"], strict=True):
        b = base.loc[cell] if cell in base.index else None
        p = probes[probes["cell_id"] == cell]
        r = rests[rests["cell_id"] == cell]
        nxt = [
            f"{i.kind}@{i.anchor if i.kind == 'probe' else i.budget}[{i.reason}]"
            for i in plan
            if i.cell_id == cell
        ]
        if b is None and not len(p) and not len(r):
            state = "base"
        elif cell in unfinished.index:
            row = unfinished.loc[cell]
            state = (
                row["status"] if row["status"] != "incomplete" else f"incomplete: {row['missing']}"
            )
        else:
            state = ", ".join(nxt) or "done"
        out.append(
            CellStatus(
                cell_id=cell,
                base="-"
                if b is None
                else f"{'solved' if b['correct'] == True else 'unsolved'} ({b['n_tokens']})",  # noqa: E712
                reasoning="-" if rt is None or rt != rt else str(int(rt)),
                probes=" ".join(
                    f"{a}:{k}/{n}" for a, k, n in zip(p["anchor"], p["k"], p["n"], strict=True)
                )
                or "-",
                restarts=" ".join(
                    f"{c}:{k}/{n}" for c, k, n in zip(r["budget"], r["k"], r["n"], strict=True)
                )
                or "-",
                next=state,
            )
        )
    title = (
        f"{run_dir} ({man.get('model_alias')}, {man.get('cohort')}; B={protocol.budget}, "
        f"tau={protocol.tau}; top-ups {topup.describe()})"
    )
    return RunStatus(title, out)


def assert_status_as_pandas_gave(run: Path, *tau: str) -> None:
    """`bt status RUN [--tau T]`: its --json equals the reference's document, and its table
    holds the reference's cells, field for field in column order, and its count line."""
    want = pandas_status(run, float(tau[1]) if tau else None)
    proc = run_bt("status", run, *tau, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [want.as_dict(run)]
    proc = run_bt("status", run, *tau)  # piped: one whole line per cell
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for c in want.cells:
        row = next(line for line in lines if line.startswith(f"│ {c.cell_id} "))
        fields = [f.strip() for f in row.strip("│ ").split("│")]
        assert fields == [c.cell_id, c.base, c.reasoning, c.probes, c.restarts, c.next]
    assert lines[-1] == want.count_line()
    assert want.title in " ".join(proc.stdout.split())


def _rec(cell: str, kind: str, anchor: int, budget: int, branch: int, n: int = 5) -> SampleRecord:
    return SampleRecord(
        cell_id=cell,
        kind=kind,
        anchor=anchor,
        budget=budget,
        branch=branch,
        seed=branch + 7 * anchor + budget,
        prefix_len=max(anchor, 0),
        token_ids=np.arange(n, dtype=np.int32),
        text="t",
        finish_reason="length",
    )


def _awkward_run(path: Path) -> Path:
    """classify_fixture's five cells plus: a base trace on g:p1; g:p9 with ungraded probes at
    64 (branches 0, 1 and 6: two of four canonical), graded 2/4 at 128 and an ungraded re-probe
    at B = 4,096; an ungraded top-up branch on g:p3; g:p8 with an ungraded base and one
    ungraded restart branch."""
    run = write_store(path, cell_spec(), DEFAULT)
    with RunStore(run) as s:
        s.add_cells(
            [
                {"cell_id": f"g:{p}", "model": "g", "item": {"id": p}, "prompt_ids": [1]}
                for p in ("p8", "p9")
            ]
        )
        s.add_samples(
            [_rec("g:p1", "base", -1, 0, 0, 33)],
            [Grade(True, "correct", "numeric", "math", "t")],
            reasoning_tokens={"g:p1": 30},
        )
        s.add_samples(
            [_rec("g:p9", "probe", 64, 1024, b) for b in (0, 1, 6)]
            + [
                _rec("g:p3", "probe", 1024, 1024, 5),
                _rec("g:p9", "probe", 64, 4096, 0),
                _rec("g:p8", "restart", -1, 1024, 2),
                _rec("g:p8", "base", -1, 0, 0, 12),
            ]
        )
        s.add_samples(
            [_rec("g:p9", "probe", 128, 1024, b) for b in range(4)],
            [Grade(b % 2 == 0, "x", "numeric", "math", "t") for b in range(4)],
        )
    return run


@pytest.mark.parametrize("tau", [(), ("--tau", "0.5")], ids=["run's tau", "--tau 0.5"])
def test_status_of_awkward_cells_is_what_pandas_gave(tmp_path, tau):
    assert_status_as_pandas_gave(_awkward_run(tmp_path / "r"), *tau)


@pytest.mark.parametrize("rules", ["posterior", "terminal"])
def test_status_under_recorded_topup_rules_is_what_pandas_gave(tmp_path, rules):
    run = write_store(tmp_path / "r", cell_spec(), DEFAULT)
    with RunStore(run) as s:
        s.update_manifest({"topup": rules, "continue_answer_budget": 512})
    assert_status_as_pandas_gave(run)


def test_status_of_a_continued_tiny_model_run_is_what_pandas_gave(tiny_model_dir, tmp_path):
    """A real run: base traces (continue_fixture), then `bt continue` with the tiny model at
    small budgets (setup, made in this process: the installed `bt status` is the subject),
    checked before and after the continuation."""
    from bt_cli import bt_in_process
    from continue_fixture import two_cell_run

    run = two_cell_run(tmp_path, tiny_model_dir)
    assert_status_as_pandas_gave(run)  # base traces only: every cell "not continued"
    bt_in_process(
        "continue",
        run,
        "--anchors",
        "64,128,256",
        "--budget",
        "8",
        "--answer-budget",
        "8",
        "--restarts",
        "8,16",
        "--samples",
        "4",
        "--batch-size",
        "16",
    )
    assert_status_as_pandas_gave(run)
    assert_status_as_pandas_gave(run, "--tau", "0.5")
