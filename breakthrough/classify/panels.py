"""Per-cell success panels built from a run's samples (pure; no I/O).

A *probe panel* has one row per (cell, anchor) at the probe continuation budget B; a *restart
panel* has one row per (cell, restart budget C). Both count graded samples only (an ungraded
sample, `correct` NaN, is left out of n), pooled over every branch present (`n`, `k`), and
separately over the canonical branches `0 … m−1` (`n_canon`, `k_canon`), which is what the
study's 4 → 8 top-up rules look at (protocol 3.5). Rows with n = 0 are dropped.

Columns
    probe_panel:   cell_id, anchor, n, k, n_canon, k_canon
    restart_panel: cell_id, budget, n, k, n_canon, k_canon

The rules (labels, plan, posterior) read a panel per cell through `rows_by_cell`.

The counting itself (`panel_rows`) is plain Python over `Outcome` tuples, so `bt status` can
read a run's panels straight from the store without pandas (whose import alone costs it most
of its answer time); the data-frame panels of `bt classify` and the scheduler are built from
the same function, so there is one home for what a panel counts. pandas is imported where a
frame is built, not with this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from breakthrough.protocol import DEFAULT, Protocol

if TYPE_CHECKING:
    import pandas as pd

PROBE_COLUMNS = ["cell_id", "anchor", "n", "k", "n_canon", "k_canon"]
RESTART_COLUMNS = ["cell_id", "budget", "n", "k", "n_canon", "k_canon"]
PanelRow = tuple[int, int, int, int, int]  # (anchor or budget, n, k, n_canon, k_canon)


class Outcome(NamedTuple):
    """One stored sample as the panels and the completeness check read it: its key, its
    verdict (None while ungraded) and its row id (None in a hand-built frame without one)."""

    cell_id: str
    kind: str
    anchor: int
    budget: int
    branch: int
    correct: bool | None
    sample_id: int | None = None


OUTCOME_COLUMNS = ("cell_id", "kind", "anchor", "budget", "branch", "correct")


def outcomes_of(samples: pd.DataFrame) -> list[Outcome]:
    """The `Outcome`s of a samples frame (`RunStore.samples_frame` or a hand-built one with at
    least `OUTCOME_COLUMNS`; `sample_id` optional), in frame order; a NaN verdict is None.
    ValueError naming the columns a frame lacks."""
    import pandas as pd

    missing = set(OUTCOME_COLUMNS) - set(samples.columns)
    if missing:
        raise ValueError(f"samples frame lacks columns {sorted(missing)}")
    ids = samples["sample_id"] if "sample_id" in samples.columns else [None] * len(samples)
    return [
        Outcome(
            cell,
            str(kind),
            int(anchor),
            int(budget),
            int(branch),
            None if pd.isna(ok) else bool(ok),
            None if sid is None or pd.isna(sid) else int(sid),
        )
        for cell, kind, anchor, budget, branch, ok, sid in zip(
            *(samples[c] for c in OUTCOME_COLUMNS), ids, strict=True
        )
    ]


def panel_rows(
    outcomes: Iterable[Outcome], kind: str, canonical: int, budget: int | None = None
) -> dict[str, list[PanelRow]]:
    """The panel of `kind` ("probe" or "restart") by cell, as `rows_by_cell` gives it: per cell
    its (point, n, k, n_canon, k_canon) rows sorted by point (anchor for probes, restart budget
    for restarts), over graded outcomes only, branches below `canonical` counted as canonical;
    `budget` keeps only outcomes at that budget (probes at B). One verdict per (cell, anchor,
    budget, branch): a duplicated branch is counted once, the one with the smallest sample_id
    (order-independent; in input order where ids are missing)."""
    graded = [o for o in outcomes if o.kind == kind and o.correct is not None]
    if any(o.sample_id is not None for o in graded):
        graded.sort(key=lambda o: (o.sample_id is None, o.sample_id or 0))
    seen: set[tuple] = set()
    counts: dict[tuple, list[int]] = {}
    for o in graded:
        key = (o.cell_id, o.anchor, o.budget, o.branch)
        if key in seen:
            continue
        seen.add(key)
        if budget is not None and o.budget != budget:
            continue
        point = o.anchor if kind == "probe" else o.budget
        c = counts.setdefault((o.cell_id, point), [0, 0, 0, 0])
        canon = o.branch < canonical
        c[0] += 1
        c[1] += int(o.correct is True)
        c[2] += int(canon)
        c[3] += int(canon and o.correct is True)
    out: dict[str, list[PanelRow]] = {}
    for (cell, point), (n, k, nc, kc) in sorted(counts.items()):
        out.setdefault(str(cell), []).append((point, n, k, nc, kc))
    return out


def probe_rows(
    outcomes: Iterable[Outcome], protocol: Protocol = DEFAULT, budget: int | None = None
) -> dict[str, list[PanelRow]]:
    """The probe panel by cell at continuation budget `budget` (default protocol.budget)."""
    b = protocol.budget if budget is None else budget
    return panel_rows(outcomes, "probe", protocol.samples, int(b))


def restart_rows(
    outcomes: Iterable[Outcome], protocol: Protocol = DEFAULT
) -> dict[str, list[PanelRow]]:
    """The restart panel by cell."""
    return panel_rows(outcomes, "restart", protocol.restart_samples)


def _frame(rows: dict[str, list[PanelRow]], columns: list[str]) -> pd.DataFrame:
    """A panel data frame (sorted by cell_id, point) of rows by cell."""
    import pandas as pd

    if not rows:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "cell_id" else int) for c in columns}
        )
    return pd.DataFrame(
        [(cell, *row) for cell in sorted(rows) for row in rows[cell]], columns=columns
    ).astype({c: int for c in columns[1:]})


def probe_panel(
    samples: pd.DataFrame, protocol: Protocol = DEFAULT, budget: int | None = None
) -> pd.DataFrame:
    """Probe panel (cell_id, anchor, n, k, n_canon, k_canon) at continuation budget `budget`
    (default protocol.budget); probes at other budgets (e.g. an A2 B = 4,096 re-probe) are
    ignored. Sorted by cell_id, anchor."""
    return _frame(probe_rows(outcomes_of(samples), protocol, budget), PROBE_COLUMNS)


def restart_panel(samples: pd.DataFrame, protocol: Protocol = DEFAULT) -> pd.DataFrame:
    """Restart panel (cell_id, budget, n, k, n_canon, k_canon); sorted by cell_id, budget."""
    return _frame(restart_rows(outcomes_of(samples), protocol), RESTART_COLUMNS)


def rows_by_cell(panel: pd.DataFrame | None, key: str) -> dict[str, list[PanelRow]]:
    """Per cell, its panel rows as (point, n, k, n_canon, k_canon) tuples sorted by point
    (`key` = "anchor" or "budget"); rows with n = 0 are left out. Every rule reads panels this
    way, so none depends on the panel's row order."""
    out: dict[str, list[PanelRow]] = {}
    if panel is None or panel.empty:
        return out
    cols = ["cell_id", key, "n", "k", "n_canon", "k_canon"]
    for cell, point, n, k, nc, kc in panel[cols].itertuples(index=False):
        if int(n) > 0:
            out.setdefault(str(cell), []).append((int(point), int(n), int(k), int(nc), int(kc)))
    for rows in out.values():
        rows.sort()
    return out
