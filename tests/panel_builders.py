"""Hand-built panels for the classify tests: {cell: {anchor or budget: (k, n[, k_canon[,
n_canon]])}}."""

from __future__ import annotations

import math

import pandas as pd

from breakthrough.classify import regimes as C

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _rows(cell, spec, key):
    rows = []
    for point, v in spec.items():
        k, n, *rest = v
        nc = rest[1] if len(rest) > 1 else min(n, 4)
        kc = rest[0] if rest else (k if n <= 4 else None)
        assert kc is not None, "give canonical successes for a pooled cell"
        rows.append({"cell_id": cell, key: point, "n": n, "k": k, "n_canon": nc, "k_canon": kc})
    return rows


def panels(probes: dict | None = None, restarts: dict | None = None):
    """probes / restarts: {cell_id: {anchor or budget: (k, n[, k_canon[, n_canon]])}};
    n_canon defaults to min(n, 4)."""
    pr = [r for cell, s in (probes or {}).items() for r in _rows(cell, s, "anchor")]
    rr = [r for cell, s in (restarts or {}).items() for r in _rows(cell, s, "budget")]
    pp = pd.DataFrame(pr, columns=["cell_id", "anchor", "n", "k", "n_canon", "k_canon"])
    rp = pd.DataFrame(rr, columns=["cell_id", "budget", "n", "k", "n_canon", "k_canon"])
    return pp, rp


def grid(*ks, n=4, anchors=GRID):
    """Probe spec over the first len(ks) anchors of the grid with the given successes (of n)."""
    return {a: (k, n) for a, k in zip(anchors, ks, strict=False)}


def R(r1024=0, r2048=0, r4096=0, r8192=0, n=4):
    """Restart spec over the study's four budgets with the given successes (of n)."""
    return {1024: (r1024, n), 2048: (r2048, n), 4096: (r4096, n), 8192: (r8192, n)}


def label(probes, restarts, **kw) -> dict:
    """The label row of one cell "m:p" (kw go to `label_panels`)."""
    pp, rp = panels({"m:p": probes}, {"m:p": restarts} if restarts is not None else None)
    frame = C.label_panels(pp, rp, **kw)
    assert len(frame) == 1
    return frame.iloc[0].to_dict()


def na(v) -> bool:
    """A missing value as the label table holds it (None, pd.NA or NaN)."""
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))
