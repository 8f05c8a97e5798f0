"""What is done and what remains per cell of a run (`bt status`), under the run's own protocol
and its recorded `--topup` rules."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from breakthrough.classify.completeness import STATUSES, unfinished_cells
from breakthrough.classify.panels import probe_panel, restart_panel, rows_by_cell
from breakthrough.classify.plan import plan_next
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
        df = store.samples_frame(arrays=False)
        cells = store.cells_frame()
        man = store.manifest()
    if tau is not None:
        protocol = protocol.with_overrides(tau=tau)
    topup = resolve_topup(run_dir, man, None)
    probes, rests = probe_panel(df, protocol), restart_panel(df, protocol)
    plan = plan_next(probes, rests, protocol=protocol, topup=topup.rules)
    unfinished = unfinished_cells(
        df, cells, probe_rows=rows_by_cell(probes, "anchor"), protocol=protocol
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
