"""What is done and what remains per cell of a run (`bt status`), under the run's own protocol
and its recorded `--topup` rules.

Read-only and meant to answer at once (≤ 0.5 s on an idle machine: it is what a user runs
to see where a run stands), so it never
imports pandas: it reads each sample's key and verdict from the store as plain tuples
(`RunStore.outcomes`) and applies the very rules `bt classify` and the scheduler apply to
their data frames, on the panels by cell (`classify.panels.probe_rows`, `plan.plan_rows`,
`completeness.unfinished_rows`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from breakthrough.classify.completeness import STATUSES, owed_grids, unfinished_rows
from breakthrough.classify.panels import Outcome, probe_rows, restart_rows
from breakthrough.classify.plan import plan_rows
from breakthrough.pipeline.manifest import resolve_topup
from breakthrough.store import RunStore


@dataclass
class CellStatus:
    cell_id: str
    base: str  # "-" | "solved (N)" | "unsolved (N)"
    reasoning: str
    probes: str  # "t:k/n ..."
    restarts: str  # "C:k/n ..."
    next: str  # planned samples, "done", "base", "not continued" or "incomplete: ..."


@dataclass
class RunStatus:
    """`bt status` of one run: its title line, one status per cell, and the count line."""

    title: str
    cells: list[CellStatus]

    def counts(self) -> dict[str, int]:
        """Cells per state: no base trace, not continued, incomplete (neither labelled by
        `bt classify`), work planned, done."""
        out = {"no base trace": 0, **{s: 0 for s in STATUSES}, "work planned": 0, "done": 0}
        for c in self.cells:
            key = next((s for s in STATUSES if c.next.startswith(s)), None)
            if key is None:
                key = {"base": "no base trace", "done": "done"}.get(c.next, "work planned")
            out[key] += 1
        return out

    def as_dict(self, run_dir: Path) -> dict:
        """`bt status --json` of this run: its folder, title, one object per cell and the
        counts of the count line."""
        return {
            "run": str(run_dir),
            "title": self.title,
            "cells": [asdict(c) for c in self.cells],
            "counts": self.counts(),
        }

    def count_line(self) -> str:
        counts = self.counts()
        shown = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        left = sum(counts[s] for s in ("no base trace", *STATUSES))
        unlabelled = (
            f"; {left} not labelled by `bt classify` until `bt continue` completes them"
            if left
            else ""
        )
        return f"{len(self.cells)} cell{'s' if len(self.cells) != 1 else ''}: {shown}{unlabelled}"


def run_status(run_dir: Path, tau: float | None = None) -> RunStatus:
    """The title (with B, τ and the top-up rules the run records) and one status per cell:
    probes at the run's B; the next work as the run's `--topup` rules plan it at `tau`
    (default: the run's); a cell that has not run its protocol says so (`not continued`,
    `incomplete: restarts at ...`, as `bt classify` leaves it unlabelled), never `done`."""
    with RunStore(run_dir, readonly=True) as store:
        protocol = store.protocol()
        stored = store.outcomes()
        cells = store.cell_reasoning_tokens()
        man = store.manifest()
        grids = owed_grids(store.base_segments(), protocol)  # lost probe rows are work missing
        base_gone = store.base_trace_gone()  # and so is a lost base trace
    if tau is not None:
        protocol = protocol.with_overrides(tau=tau)
    topup = resolve_topup(run_dir, man, None)
    outcomes = [Outcome(cid, kind, a, b, br, ok, sid) for sid, cid, kind, a, b, br, ok, _ in stored]
    probes, rests = probe_rows(outcomes, protocol), restart_rows(outcomes, protocol)
    plan = plan_rows(probes, rests, protocol=protocol, topup=topup.rules)
    unfinished = {
        row["cell_id"]: row
        for row in unfinished_rows(
            outcomes,
            [c for c, _ in cells],
            probe_rows=probes,
            protocol=protocol,
            grids=grids,
            base_gone=base_gone,
        )
    }
    base: dict[str, tuple[bool | None, int]] = {}  # cell -> (verdict, tokens) of its base trace
    for _, cid, kind, _, _, _, ok, n_tokens in stored:
        if kind == "base":
            base.setdefault(cid, (ok, n_tokens))
    out = []
    for cell, rt in cells:
        b = base.get(cell)
        p, r = probes.get(cell, []), rests.get(cell, [])
        nxt = [
            f"{i.kind}@{i.anchor if i.kind == 'probe' else i.budget}[{i.reason}]"
            for i in plan
            if i.cell_id == cell
        ]
        if b is None and not p and not r:
            state = "base"
        elif cell in unfinished:
            row = unfinished[cell]
            state = (
                row["status"] if row["status"] != "incomplete" else f"incomplete: {row['missing']}"
            )
        else:
            state = ", ".join(nxt) or "done"
        out.append(
            CellStatus(
                cell_id=cell,
                base="-" if b is None else f"{'solved' if b[0] else 'unsolved'} ({b[1]})",
                reasoning="-" if rt is None else str(rt),
                probes=" ".join(f"{a}:{k}/{n}" for a, n, k, _, _ in p) or "-",
                restarts=" ".join(f"{c}:{k}/{n}" for c, n, k, _, _ in r) or "-",
                next=state,
            )
        )
    title = (
        f"{run_dir} ({man.get('model_alias')}, {man.get('cohort')}; B={protocol.budget}, "
        f"tau={protocol.tau}; top-ups {topup.describe()})"
    )
    return RunStatus(title, out)
