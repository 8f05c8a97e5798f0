"""Which cells have not run their protocol yet (pure: a samples frame in, a table out).

A label is a result only when the cell's protocol ran: its probes (3.1) and the restarts it is
owed (4: every restart budget, or the scratch budget alone for a cell instant on its canonical
probe summaries). A run that was interrupted, or never continued, holds cells without them;
labelling those would turn missing work into `unsolved_hard` (no crossing, R = nothing). So
`bt classify` gives them no regime and counts them apart, and `bt status` says what they lack:

    not continued   no probe and no restart stored (a run never continued, or a cell the
                    interrupted run did not reach)
    incomplete      some stored, but the cell's base trace is gone (deleted from the store),
                    a probe cell holds fewer than its canonical branches,
                    an anchor of the cell's grid holds no probe (`owed_grid`, when the base
                    trace is known), a restart budget the cell is owed holds fewer than its
                    canonical attempts, or a top-up was started and not finished (some of its
                    branches stored, not all: `_partial_topups`)

Stored samples count whether graded or not: an ungraded sample is work done (`bt grade`
grades it), not work missing. What a cell still owes after that (bisection, top-ups) is the
plan of next work (`classify.plan`), not a reason to withhold its label: the study labelled
cells before their top-ups too (the development cohort, `--topup terminal`). A top-up started
and not finished (some of its branches stored) is work missing, though: its cell is incomplete.

The scheduler runs a cell's steps in order (probes, bisection, restarts, top-ups), so a cell
whose owed restarts are all in has finished its probes, unless probe rows were lost after it
ran (deleted from the store): the grid the cell's base trace asks for (`owed_grid`) catches
those, and a probe anchor with no sample at all otherwise shows as restarts missing. A
restart budget is owed only where its reasoning budget and the answer reserve fit the total
cap (as `pipeline.branches.check_budget` asks, without the few forced-close tokens it also
counts).

The check itself (`unfinished_rows`) is plain Python over the store's `panels.Outcome`s, so
`bt status` runs it without pandas; `unfinished_cells` is the same check on a samples frame,
as `bt classify` holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from breakthrough.classify.panels import Outcome, PanelRow, outcomes_of
from breakthrough.classify.plan import restart_budgets_of
from breakthrough.protocol import DEFAULT, Protocol

if TYPE_CHECKING:
    import pandas as pd

NOT_CONTINUED = "not continued"
INCOMPLETE = "incomplete"
STATUSES = (NOT_CONTINUED, INCOMPLETE)
# what a cell whose base trace is gone lacks: `bt continue` cuts probes from a stored trace and
# never makes one, so the line names the command that does (the run's `bt base`, same seed)
BASE_GONE = "base trace (lost: rerun bt base)"
COLUMNS = ["cell_id", "model", "problem_id", "status", "missing"]


def _stored(
    outcomes: Iterable[Outcome], kind: str, budget: int | None, canonical: int
) -> dict[str, dict[int, int]]:
    """cell → point (anchor, or restart budget) → canonical branches stored (graded or not)."""
    branches: dict[str, dict[int, set[int]]] = {}
    for o in outcomes:
        if o.kind != kind or (budget is not None and o.budget != budget):
            continue
        at = branches.setdefault(str(o.cell_id), {}).setdefault(
            o.anchor if kind == "probe" else o.budget, set()
        )
        if o.branch < canonical:
            at.add(o.branch)
    return {
        cell: {point: len(have) for point, have in sorted(points.items())}
        for cell, points in sorted(branches.items())
    }


def _partial_topups(
    outcomes: Iterable[Outcome], kind: str, budget: int | None, canonical: int, target: int
) -> dict[str, dict[int, int]]:
    """cell → point → top-up branches stored (`canonical` … `target` − 1), for the points where
    a top-up started and is not whole: a run stopped inside it, or a row lost since (the last
    row written, which leaves no id gap for `bt verify`), never a finished cell; a label would
    pool a count that depends on where it stopped (README: a lost last row leaves its cell
    unlabelled either way)."""
    extra: dict[str, dict[int, set[int]]] = {}
    for o in outcomes:
        if o.kind != kind or (budget is not None and o.budget != budget):
            continue
        if canonical <= o.branch < target:
            point = o.anchor if kind == "probe" else o.budget
            extra.setdefault(str(o.cell_id), {}).setdefault(point, set()).add(o.branch)
    whole = target - canonical
    return {
        cell: {p: len(b) for p, b in sorted(points.items()) if len(b) < whole}
        for cell, points in extra.items()
        if any(len(b) < whole for b in points.values())
    }


def owed_budgets(probe_rows: list[PanelRow], protocol: Protocol) -> tuple[int, ...]:
    """The restart budgets a cell is owed (4), those that fit the total cap (`bt verify` asks
    the same of a cell whose rows are gone)."""
    room = protocol.total_cap - protocol.answer_budget
    return tuple(c for c in restart_budgets_of(probe_rows, protocol.tau, protocol) if c <= room)


# Forced-close tokens `owed_grid` leaves room for: more than any family's forced close (a few
# tokens), so an anchor it counts as owed is one the scheduler probes whatever the model.
FORCED_MARGIN = 16


# The segment codes (`models.segments`) a base trace's anchors count: its thinking tokens, or
# its solution tokens when it has none. Repeated here so `bt status` reads them without NumPy.
THINKING, SOLUTION = 0, 2


def owed_grid(segments: bytes | Sequence[int], protocol: Protocol) -> tuple[int, ...]:
    """The anchors a cell's probes must cover, from its base trace's segment codes (one byte
    a token, as stored): the protocol's anchors up to the first beyond the trace's reasoning
    or without room for B, a forced close and the answer reserve within the total cap (the
    scheduler's grid, `pipeline.cells.plan_cell`, with `FORCED_MARGIN` close tokens: an anchor
    at the cap's edge that the model's short close would still fit is not claimed)."""
    codes = list(segments)
    reasoning = [i for i, c in enumerate(codes) if c == THINKING] or [
        i for i, c in enumerate(codes) if c == SOLUTION
    ]
    grid = []
    for a in protocol.anchors:
        if a > len(reasoning):
            break
        available = protocol.total_cap - (reasoning[a - 1] + 1) - FORCED_MARGIN
        if available <= protocol.answer_budget or protocol.budget > (
            available - protocol.answer_budget
        ):
            break
        grid.append(int(a))
    return tuple(grid)


def owed_grids(
    segments: Mapping[str, bytes | Sequence[int]], protocol: Protocol
) -> dict[str, tuple[int, ...]]:
    """cell → `owed_grid` of its base trace (`RunStore.base_segments()`)."""
    return {cell: owed_grid(seg, protocol) for cell, seg in segments.items()}


def unfinished_rows(
    outcomes: Iterable[Outcome],
    cell_ids: Iterable[str] = (),
    *,
    probe_rows: dict[str, list[PanelRow]] | None = None,
    protocol: Protocol = DEFAULT,
    grids: dict[str, tuple[int, ...]] | None = None,
    base_gone: Iterable[str] = (),
) -> list[dict[str, str]]:
    """One row (a dict of `COLUMNS`) per cell that has not run its protocol (module doc):
    cell_id, model, problem_id, status ("not continued" / "incomplete") and what is missing,
    sorted by cell_id. `cell_ids` names cells the outcomes do not; `probe_rows` (the probe
    panel by cell, `panels.probe_rows`) decides whether a cell is owed every restart budget or
    the scratch budget alone (no rows: every budget); `grids` (`owed_grids`) the anchors each
    cell's probes must hold (a cell it does not name: only the anchors stored); `base_gone`
    the cells whose base trace is gone (`RunStore.base_trace_gone`): incomplete, as their
    probes' prefixes and their T_F read that trace."""
    outcomes = list(outcomes)
    gone = set(map(str, base_gone))
    ids = {str(o.cell_id) for o in outcomes} | set(map(str, cell_ids))
    probes = _stored(outcomes, "probe", protocol.budget, protocol.samples)
    restarts = _stored(outcomes, "restart", None, protocol.restart_samples)
    target = protocol.topup_samples
    topped = {
        "probes": _partial_topups(outcomes, "probe", protocol.budget, protocol.samples, target),
        "restarts": _partial_topups(outcomes, "restart", None, protocol.restart_samples, target),
    }
    rows = []
    for cell in sorted(ids):
        have_p, have_r = probes.get(cell, {}), restarts.get(cell, {})
        if not have_p and not have_r:
            status, missing = NOT_CONTINUED, "no probes, no restarts"
        else:
            counts = {a: have_p.get(a, 0) for a in (grids or {}).get(cell, ())} | have_p
            short = [
                f"{a} ({n} of {protocol.samples})"
                for a, n in sorted(counts.items())
                if n < protocol.samples
            ]
            owed = owed_budgets((probe_rows or {}).get(cell, []), protocol)
            lack = [str(c) for c in owed if have_r.get(c, 0) < protocol.restart_samples]
            no_base = cell in gone
            canon = {"probes": protocol.samples, "restarts": protocol.restart_samples}
            partial = [
                f"{what} top-up at {p} ({canon[what] + n} of {target})"
                for what in ("probes", "restarts")
                for p, n in topped[what].get(cell, {}).items()
            ]
            if not short and not lack and not no_base and not partial:
                continue
            status = INCOMPLETE
            missing = "; ".join(
                ([BASE_GONE] if no_base else [])
                + ([f"restarts at {','.join(lack)}"] if lack else [])
                + ([f"probes at {', '.join(short)}"] if short else [])
                + partial
            )
        model, _, pid = cell.partition(":")
        rows.append(
            {
                "cell_id": cell,
                "model": model,
                "problem_id": pid or cell,
                "status": status,
                "missing": missing,
            }
        )
    return rows


def unfinished_cells(
    samples: pd.DataFrame,
    cells: pd.DataFrame | None = None,
    *,
    probe_rows: dict[str, list[PanelRow]] | None = None,
    protocol: Protocol = DEFAULT,
    grids: dict[str, tuple[int, ...]] | None = None,
    base_gone: Iterable[str] = (),
) -> pd.DataFrame:
    """`unfinished_rows` of a samples frame as a data frame (columns `COLUMNS`); `cells` (a
    cells frame) names cells the samples do not; `grids` and `base_gone` as there."""
    import pandas as pd

    if len(samples) and "kind" in samples.columns:
        # stored samples count graded or not: a frame without verdicts is all "ungraded"
        have = samples if "correct" in samples.columns else samples.assign(correct=None)
        outcomes = outcomes_of(have)
    else:
        outcomes = []
    ids = list(map(str, samples["cell_id"])) if len(samples) else []
    if cells is not None and len(cells):
        ids += map(str, cells["cell_id"])
    rows = unfinished_rows(
        outcomes, ids, probe_rows=probe_rows, protocol=protocol, grids=grids, base_gone=base_gone
    )
    return pd.DataFrame(rows, columns=COLUMNS)


def status_counts(unfinished: pd.DataFrame) -> dict[str, dict[str, int]]:
    """model → status → cells, over an `unfinished_cells` table (statuses with no cell left
    out)."""
    out: dict[str, dict[str, int]] = {}
    if unfinished is None or unfinished.empty:
        return out
    for (model, status), g in unfinished.groupby(["model", "status"], sort=True):
        out.setdefault(str(model), {})[str(status)] = int(len(g))
    return out
