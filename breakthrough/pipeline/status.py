"""What is done and what remains per cell of a run (`bt status`), under the run's own protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from breakthrough.classify.panels import probe_panel, restart_panel
from breakthrough.classify.plan import plan_next
from breakthrough.store import RunStore


@dataclass
class CellStatus:
    cell_id: str
    base: str  # "-" | "solved (N)" | "unsolved (N)"
    reasoning: str
    probes: str  # "t:k/n ..."
    restarts: str  # "C:k/n ..."
    next: str  # planned samples, "done", "probes" or "base"


def run_status(run_dir: Path, tau: float | None = None) -> tuple[str, list[CellStatus]]:
    """(title, one status per cell): probes at the run's B, the plan at `tau` (default: the
    run's)."""
    with RunStore(run_dir, readonly=True) as store:
        protocol = store.protocol()
        df = store.samples_frame(arrays=False)
        cells = store.cells_frame()
        man = store.manifest()
    if tau is not None:
        protocol = protocol.with_overrides(tau=tau)
    probes, rests = probe_panel(df, protocol), restart_panel(df, protocol)
    plan = plan_next(probes, rests, protocol=protocol)
    base = df[df["kind"] == "base"].set_index("cell_id")
    out = []
    for cell, rt in zip(cells["cell_id"], cells["reasoning_tokens"]):
        b = base.loc[cell] if cell in base.index else None
        p = probes[probes["cell_id"] == cell]
        r = rests[rests["cell_id"] == cell]
        nxt = [f"{i.kind}@{i.anchor if i.kind == 'probe' else i.budget}[{i.reason}]"
               for i in plan if i.cell_id == cell]
        if b is None:
            state = "base"
        else:
            state = ", ".join(nxt) or ("done" if len(p) else "probes")
        out.append(CellStatus(
            cell_id=cell,
            base="-" if b is None else f"{'solved' if b['correct'] == True else 'unsolved'} ({b['n_tokens']})",  # noqa: E712
            reasoning="-" if rt is None or rt != rt else str(int(rt)),
            probes=" ".join(f"{a}:{k}/{n}" for a, k, n in zip(p["anchor"], p["k"], p["n"])) or "-",
            restarts=" ".join(f"{c}:{k}/{n}" for c, k, n in zip(r["budget"], r["k"], r["n"])) or "-",
            next=state,
        ))
    title = f"{run_dir} ({man.get('model_alias')}, {man.get('cohort')}; B={protocol.budget}, tau={protocol.tau})"
    return title, out
