"""Label hardening (protocol appendix, 3.5): what the top-ups did to the trajectory labels, and
how the enlarged probe cells resolved (9.4). Pure: label tables and panels in, counts out.

Every trajectory falls in one category, before and after the top-ups:
  * instant   a T_F event whose interval ends within the instant bound (16 tokens);
  * interior  any other T_F event;
  * A1 event  no T_F event, and the A1 replication of the final anchor reached τ (≥ 6/8);
  * censored  everything else.
"Before" is the study's development labelling: canonical 4-branch rates with A1 annotated
(`--topup terminal`); "after" is the labelling under the chosen `--topup` rules (the study's
wave 3: A5.1 pooled rates). The reference figure hard-codes these counts (Ministral
7/8/13/21 → 7/4/12/26); here they are counted from the run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

CATEGORIES = ("instant", "interior", "A1 event", "censored")
BEFORE, AFTER = "before top-ups", "after top-ups"


def categories(labels: pd.DataFrame) -> pd.Series:
    """cell_id → category of each trajectory of a label table."""
    if labels.empty:
        return pd.Series(dtype=object)
    event = labels["event_observed"].astype(bool)
    instant = labels["instant"].astype(bool) & event
    a1 = ~event & labels["terminal_a1_anchor"].notna()
    cat = np.select([instant, event, a1], list(CATEGORIES[:3]), default=CATEGORIES[3])
    return pd.Series(cat, index=labels["cell_id"].astype(str), dtype=object)


def hardening_counts(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per model and "when" (before, after): trajectories per category, plus, on the "after"
    rows, how many trajectories changed category and how many T_F events the top-ups removed
    and added."""
    if after.empty:
        return pd.DataFrame(
            columns=[
                "model",
                "when",
                *CATEGORIES,
                "total",
                "changed",
                "events_removed",
                "events_added",
            ]
        )
    b, a = categories(before), categories(after)
    model = pd.Series(after["model"].astype(str).to_numpy(), index=after["cell_id"].astype(str))
    rows = []
    for m in sorted(model.unique()):
        ids = model.index[model == m]
        for stage, cats in ((BEFORE, b), (AFTER, a)):
            got = cats.reindex(ids)
            row = {
                "model": m,
                "when": stage,
                **{c: int((got == c).sum()) for c in CATEGORIES},
                "total": int(got.notna().sum()),
            }
            if stage == AFTER:
                was, now = b.reindex(ids), a.reindex(ids)
                ev_b = was.isin(("instant", "interior"))
                ev_a = now.isin(("instant", "interior"))
                row |= {
                    "changed": int((was != now).sum()),
                    "events_removed": int((ev_b & ~ev_a).sum()),
                    "events_added": int((~ev_b & ev_a).sum()),
                }
            rows.append(row)
    return pd.DataFrame(rows)


def topup_resolution(
    probe_cells: pd.DataFrame, *, tau: float, target: int, canonical: int
) -> pd.DataFrame:
    """Per model (9.4, 3.5 "148 → 55/55/38; 37/37/28/21/25"): probe cells holding `target`
    graded branches; how many resolved low (≤ target/4 successes), intermediate, high
    (≥ τ·target); and how many successes the added branches alone gave (0 … target −
    canonical)."""
    extra = target - canonical
    cols = [
        "model",
        "cells",
        "low",
        "intermediate",
        "high",
        *[f"added_{i}" for i in range(extra + 1)],
    ]
    if probe_cells.empty:
        return pd.DataFrame(columns=cols)
    data = probe_cells[probe_cells["n"] == target]
    hi_k = math.ceil(tau * target - 1e-9)
    lo_k = target // 4
    rows = []
    for m, g in data.groupby("model"):
        k = g["k"].astype(int)
        added = (g["k"] - g["k_canon"]).astype(int).clip(0, extra)
        rows.append(
            {
                "model": str(m),
                "cells": int(len(g)),
                "low": int((k <= lo_k).sum()),
                "intermediate": int(((k > lo_k) & (k < hi_k)).sum()),
                "high": int((k >= hi_k).sum()),
                **{f"added_{i}": int((added == i).sum()) for i in range(extra + 1)},
            }
        )
    return pd.DataFrame(rows, columns=cols)
