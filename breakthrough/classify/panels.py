"""Per-cell success panels built from a run store's samples frame (pure; no I/O).

A *probe panel* has one row per (cell, anchor) at the probe continuation budget B; a *restart
panel* has one row per (cell, restart budget C). Both count graded samples only (an ungraded
sample, `correct` NaN, is left out of n), pooled over every branch present (`n`, `k`), and
separately over the canonical branches `0 … m−1` (`n_canon`, `k_canon`), which is what the
study's 4 → 8 top-up rules look at (protocol 3.5). Rows with n = 0 are dropped.

Columns
    probe_panel:   cell_id, anchor, n, k, n_canon, k_canon
    restart_panel: cell_id, budget, n, k, n_canon, k_canon

The rules (labels, plan, posterior) read a panel per cell through `rows_by_cell`.
"""

from __future__ import annotations

import pandas as pd

from breakthrough.protocol import DEFAULT, Protocol

PROBE_COLUMNS = ["cell_id", "anchor", "n", "k", "n_canon", "k_canon"]
RESTART_COLUMNS = ["cell_id", "budget", "n", "k", "n_canon", "k_canon"]
PanelRow = tuple[int, int, int, int, int]  # (anchor or budget, n, k, n_canon, k_canon)


def _graded(samples: pd.DataFrame, kind: str) -> pd.DataFrame:
    need = {"cell_id", "kind", "anchor", "budget", "branch", "correct"}
    missing = need - set(samples.columns)
    if missing:
        raise ValueError(f"samples frame lacks columns {sorted(missing)}")
    frame = samples.loc[
        samples["kind"] == kind,
        ["cell_id", "anchor", "budget", "branch", "correct"]
        + (["sample_id"] if "sample_id" in samples.columns else []),
    ]
    frame = frame[frame["correct"].notna()].copy()
    # One verdict per (cell, anchor, budget, branch): a duplicated branch is counted once, the
    # one with the smallest sample_id (order-independent).
    if "sample_id" in frame.columns:
        frame = frame.sort_values("sample_id", kind="mergesort")
    frame = frame.drop_duplicates(["cell_id", "anchor", "budget", "branch"], keep="first")
    frame["correct"] = frame["correct"].astype(bool).astype(int)
    return frame


def _count(frame: pd.DataFrame, keys: list[str], canonical: int) -> pd.DataFrame:
    canon = frame["branch"] < canonical
    frame = frame.assign(
        c_canon=frame["correct"].where(canon, 0), one_canon=canon.astype(int), one=1
    )
    out = (
        frame.groupby(keys, sort=True)
        .agg(
            n=("one", "sum"),
            k=("correct", "sum"),
            n_canon=("one_canon", "sum"),
            k_canon=("c_canon", "sum"),
        )
        .reset_index()
    )
    for col in ("n", "k", "n_canon", "k_canon"):
        out[col] = out[col].astype(int)
    return out


def probe_panel(
    samples: pd.DataFrame, protocol: Protocol = DEFAULT, budget: int | None = None
) -> pd.DataFrame:
    """Probe panel (cell_id, anchor, n, k, n_canon, k_canon) at continuation budget `budget`
    (default protocol.budget); probes at other budgets (e.g. an A2 B = 4,096 re-probe) are
    ignored. Sorted by cell_id, anchor."""
    b = protocol.budget if budget is None else budget
    frame = _graded(samples, "probe")
    frame = frame[frame["budget"].astype(int) == int(b)]
    frame = frame.assign(anchor=frame["anchor"].astype(int))
    if frame.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "cell_id" else int) for c in PROBE_COLUMNS}
        )
    return _count(frame, ["cell_id", "anchor"], protocol.samples)[PROBE_COLUMNS]


def restart_panel(samples: pd.DataFrame, protocol: Protocol = DEFAULT) -> pd.DataFrame:
    """Restart panel (cell_id, budget, n, k, n_canon, k_canon); sorted by cell_id, budget."""
    frame = _graded(samples, "restart")
    frame = frame.assign(budget=frame["budget"].astype(int))
    if frame.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "cell_id" else int) for c in RESTART_COLUMNS}
        )
    return _count(frame, ["cell_id", "budget"], protocol.restart_samples)[RESTART_COLUMNS]


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
