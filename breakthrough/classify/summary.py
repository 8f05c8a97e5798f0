"""The summary of a label table (protocol 5.3 / 9.1), as a JSON-ready dict (pure; no I/O).

Regime and class counts per model, the non-instant T_V(δ) events, δ sensitivity, conservative
R̂ disagreements, cross-model agreement of the collapsed classes, terminal events, and the sizes
of the plans of next work under each `--topup` rule compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from breakthrough.classify.plan import PlanItem, plan_counts
from breakthrough.classify.regimes import EPS, FIGURE_CLASSES, REGIMES, collapse_regime, delta_key
from breakthrough.protocol import DEFAULT, Protocol


def _py(v: Any) -> Any:
    """A JSON-ready scalar: None for NA/NaN, Python numbers for numpy ones."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def summarize(
    labels: pd.DataFrame,
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    delta: float | None = None,
    plans: Mapping[str, Sequence[PlanItem]] | None = None,
    prior: str | None = None,
) -> dict:
    """Summary (5.3 / 9.1): regime counts per model, the non-instant T_V(δ) events, δ
    sensitivity over non-instant cells, conservative disagreements, cross-model agreement of
    the collapsed classes, terminal events, plan sizes per `--topup` rule (`plans`: rule text
    → plan)."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    deltas = sorted(set(protocol.deltas) | {float(delta)})
    out: dict = {
        "tau": tau,
        "budget": protocol.budget,
        "primary_delta": delta,
        "deltas": deltas,
        "protocol_digest": protocol.digest(),
    }
    if prior:
        out["prior"] = prior
    if labels.empty:
        out.update(n_cells=0, regime_counts={})
        return out
    out["n_cells"] = {str(m): int(len(g)) for m, g in labels.groupby("model")}
    out["regime_counts"] = {
        str(m): {r: int((g["regime"] == r).sum()) for r in REGIMES}
        for m, g in labels.groupby("model")
    }
    out["class_counts"] = {
        str(m): {c: int((g["regime_class"] == c).sum()) for c in FIGURE_CLASSES}
        for m, g in labels.groupby("model")
    }
    non_instant = labels[~labels["instant"].astype(bool)]
    ev = non_instant[non_instant["t_v"].notna()]
    cols = [
        c
        for c in ("model", "problem_id", "stage", "level", "t_f", "t_v", "max_advantage", "regime")
        if c in ev.columns
    ]
    out["t_v_events_primary"] = [
        {k: _py(v) for k, v in r.items()} for r in ev[cols].to_dict(orient="records")
    ]
    out["delta_sensitivity_counts"] = {
        str(d): int(non_instant[f"t_v_{delta_key(d)}"].notna().sum()) for d in deltas
    }
    out["delta_sensitivity_counts_conservative"] = {
        str(d): int(non_instant[f"t_v_cons_{delta_key(d)}"].notna().sum()) for d in deltas
    }
    dis = labels[~labels["conservative_agrees"].astype(bool)]
    out["conservative_disagreements"] = [
        {k: _py(v) for k, v in r.items()}
        for r in dis[["model", "problem_id", "t_v", "t_v_cons"]].to_dict(orient="records")
    ]
    # cross-model agreement of the collapsed ("agreement") classes, problems seen in ≥ 2 models
    agree = compared = 0
    for _, g in labels.groupby("problem_id"):
        if g["model"].nunique() < 2:
            continue
        compared += 1
        agree += g["regime"].map(lambda r: collapse_regime(r, "agreement")).nunique() == 1
    out["cross_model_agreement"] = {
        "agree": int(agree),
        "compared": int(compared),
        "text": f"{int(agree)}/{int(compared)}",
        "models": sorted(map(str, labels["model"].unique())),
    }
    term = labels[labels["terminal_a1_anchor"].notna()]
    out["terminal_a1"] = {
        str(m): {
            "events": int(len(g)),
            "proxy_comparisons": int(g["terminal_a1_proxy"].fillna(False).astype(bool).sum()),
            "prefix_wins": int((g["terminal_a1_advantage"] > 0).sum()),
            "ties": int((g["terminal_a1_advantage"].abs() < EPS).sum()),
        }
        for m, g in term.groupby("model")
    }
    out["proxy_anchor_comparisons"] = int(labels["proxy_anchors"].sum())
    if "regime_survival" in labels.columns:
        out["regime_survival"] = {
            str(m): {
                "mean": round(float(g["regime_survival"].mean()), 4),
                "below_0.5": int((g["regime_survival"] < 0.5).sum()),
            }
            for m, g in labels.groupby("model")
        }
    if plans:
        out["plans"] = {name: plan_counts(p) for name, p in plans.items()}
    return out
