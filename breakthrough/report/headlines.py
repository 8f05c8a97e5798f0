"""The study's headline numbers (protocol 9), each computed from the runs and stated in the
sentence it supports: the paper states them in words ("13 cells, 9/9 in-grid wins, median
+0.31 ..."); here each sentence is a template filled from the data, beside the table it comes
from. Pure: label tables, summaries and the JSON of `bt confirm` / `bt probe` in, `Headline`s
out (no I/O; `analyses.study` reads the runs, `report.study` writes the page).

Every function returns None when the runs hold no data for its number; `analyses.study` then
names what is missing and the command that would produce it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from breakthrough.classify.regimes import EPS, FIGURE_CLASSES, REGIMES, collapse_regime, delta_key
from breakthrough.report.names import model_name, regime_name


@dataclass
class Headline:
    """One headline: its section title, the sentences (filled templates), the numbers they
    hold, the tables they come from (name → frame; written as tables/NAME.{csv,parquet}), the
    figures that show them (names of the study's figures) and the figures it would show but
    that would be empty (name → why), which the page names in a line instead of drawing."""

    key: str
    title: str
    sentences: list[str]
    numbers: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    gaps: dict[str, str] = field(default_factory=dict)


def _n(v: float) -> str:
    """A count with thousands separators."""
    return f"{int(v):,}"


def _count(n: int, word: str, plural: str | None = None) -> str:
    """ "1 cell", "13 cells" ("1 trajectory", "8 trajectories" with `plural`)."""
    return f"{int(n):,} {word if int(n) == 1 else plural or word + 's'}"


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.0f}%" if n else "—"


def _signed(v: float | None, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.{digits}f}"


def _models(labels: pd.DataFrame) -> list[str]:
    return sorted(map(str, labels["model"].unique())) if len(labels) else []


# ------------------------------------------------------------------------------ 9.1 regimes


def regime_summary(labels: pd.DataFrame) -> Headline | None:
    """9.1: regime counts per model (5.3's fine labels and the collapsed classes) and how many
    cells are prefix-limited."""
    if labels.empty:
        return None
    models = _models(labels)
    table = pd.DataFrame(
        {
            model_name(m): [
                int((labels[labels["model"] == m]["regime"] == r).sum()) for r in REGIMES
            ]
            for m in models
        },
        index=[regime_name(r) for r in REGIMES],
    )
    table.loc["total"] = table.sum()
    table = table.reset_index(names="regime")
    n = len(labels)
    problems = labels["problem_id"].nunique()
    prefix = int((labels["regime"] == "prefix_limited").sum())
    parts = []
    for m in models:
        g = labels[labels["model"] == m]
        cls = g["regime"].map(collapse_regime)
        parts.append(
            f"{model_name(m)}: "
            + ", ".join(f"{int((cls == c).sum())} {c}" for c in FIGURE_CLASSES if (cls == c).any())
        )
    sentences = [
        f"{_count(n, 'cell')} ({_count(problems, 'problem')} × {len(models)} "
        f"model{'s' if len(models) != 1 else ''}); " + "; ".join(parts) + ".",
        f"{prefix} of {_count(n, 'cell')} {'is' if prefix == 1 else 'are'} prefix-limited.",
    ]
    return Headline(
        "regimes",
        "Regime map (9.1)",
        sentences,
        {"cells": n, "problems": int(problems), "prefix_limited": prefix},
        {"regime_counts": table},
        ("regime_map", "swimmer"),
    )


def tv_events(labels: pd.DataFrame) -> Headline | None:
    """9.1: the non-instant T_V events at the primary δ."""
    if labels.empty:
        return None
    ev = labels[~labels["instant"].astype(bool) & labels["t_v"].notna()]
    cols = [
        c
        for c in ("model", "problem_id", "stage", "level", "t_f", "t_v", "max_advantage", "regime")
        if c in ev.columns
    ]
    table = (
        ev[cols]
        .assign(model=ev["model"].map(model_name), regime=ev["regime"].map(regime_name))
        .reset_index(drop=True)
    )
    items = [
        f"{model_name(r.model)} × {r.problem_id}: T_F = {_fmt_int(r.t_f)}, T_V = "
        f"{_fmt_int(r.t_v)}, max advantage {r.max_advantage:.3f} → {regime_name(r.regime)}"
        for r in ev.itertuples()
    ]
    lead = f"Non-instant T_V events at the primary δ: {len(ev)}" + (
        ": " + "; ".join(items) + "." if items else "."
    )
    return Headline(
        "tv_events", "T_V events (9.1)", [lead], {"events": int(len(ev))}, {"tv_events": table}
    )


def _fmt_int(v: Any) -> str:
    return (
        "—"
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))
        else f"{int(v):,}"
    )


def delta_sensitivity(
    labels: pd.DataFrame, deltas: Sequence[float], primary: float
) -> Headline | None:
    """9.1: T_V(δ) counts over non-instant cells for every δ (standard and conservative R̂), and
    the conservative agreement at the primary δ, per model."""
    if labels.empty:
        return None
    ni = labels[~labels["instant"].astype(bool)]
    rows = []
    for m in _models(labels):
        g = ni[ni["model"] == m]
        for d in deltas:
            k = delta_key(d)
            rows.append(
                {
                    "model": model_name(m),
                    "delta": d,
                    "t_v": int(g[f"t_v_{k}"].notna().sum()) if f"t_v_{k}" in g else 0,
                    "t_v_conservative": int(g[f"t_v_cons_{k}"].notna().sum())
                    if f"t_v_cons_{k}" in g
                    else 0,
                    "non_instant_cells": int(len(g)),
                }
            )
    table = pd.DataFrame(rows)
    total = {
        d: int(ni[f"t_v_{delta_key(d)}"].notna().sum())
        for d in deltas
        if f"t_v_{delta_key(d)}" in ni
    }
    agree = labels["conservative_agrees"].astype(bool)
    dis = labels[~agree]
    agreement = pd.DataFrame(
        [
            {
                "model": model_name(m),
                "cells": int((labels["model"] == m).sum()),
                "agree": int(agree[labels["model"] == m].sum()),
                "disagree": int((~agree[labels["model"] == m]).sum()),
            }
            for m in _models(labels)
        ]
    )
    s1 = (
        f"δ sensitivity over {_n(len(ni))} non-instant cells: "
        + ", ".join(f"δ = {d:g} → {n}" for d, n in total.items())
        + "."
    )
    s2 = (
        f"Conservative R̂ disagreements at δ = {primary:g}: "
        + (
            "none"
            if dis.empty
            else ", ".join(f"{model_name(r.model)} × {r.problem_id}" for r in dis.itertuples())
        )
        + f" ({int(agree.sum())}/{len(labels)} agree)."
    )
    return Headline(
        "delta_sensitivity",
        "δ sensitivity and conservative agreement (9.1)",
        [s1, s2],
        {
            "t_v_by_delta": {str(d): n for d, n in total.items()},
            "conservative_agree": int(agree.sum()),
            "cells": int(len(labels)),
        },
        {"delta_sensitivity": table, "conservative_agreement": agreement},
    )


def cross_model(labels: pd.DataFrame) -> Headline | None:
    """9.1: collapsed cross-model agreement over the problems every model has, with the
    problems per agreed class."""
    if labels.empty or labels["model"].nunique() < 2:
        return None
    agree = compared = 0
    per: dict[str, int] = {}
    rows = []
    for pid, g in labels.groupby("problem_id"):
        if g["model"].nunique() < 2:
            continue
        compared += 1
        cls = dict(
            zip(g["model"], g["regime"].map(lambda r: collapse_regime(r, "agreement")), strict=True)
        )
        same = len(set(cls.values())) == 1
        rows.append(
            {"problem_id": pid, **{model_name(m): c for m, c in sorted(cls.items())}, "agree": same}
        )
        if same:
            agree += 1
            c = next(iter(cls.values()))
            per[c] = per.get(c, 0) + 1
    table = pd.DataFrame(rows)
    models = ", ".join(model_name(m) for m in _models(labels))
    s = (
        f"Collapsed cross-model agreement ({models}): {agree}/{compared} "
        f"problem{'s' if compared != 1 else ''}"
        + (f" ({', '.join(f'{n} {c}' for c, n in sorted(per.items()))})." if per else ".")
    )
    return Headline(
        "cross_model",
        "Cross-model agreement (9.1)",
        [s],
        {"agree": agree, "compared": compared},
        {"cross_model_agreement": table},
    )


# ---------------------------------------------------------------------- 9.2 dose-response


def dose_response(labels: pd.DataFrame, budgets: Sequence[int], tau: float) -> Headline | None:
    """9.2: per model, the non-instant cells measured at every restart budget; the share with
    R(C) ≥ τ per budget; curves that decrease between consecutive budgets and threshold
    reversals (crossing back below τ)."""
    if labels.empty:
        return None
    ni = labels[~labels["instant"].astype(bool)]
    rows, sentences = [], []
    for m in _models(labels):
        g = ni[ni["model"] == m]
        cs = [c for c in sorted(budgets) if f"R_{c}" in g and g[f"R_{c}"].notna().any()]
        if len(cs) < 2:
            continue
        n_all, n_ni = int((labels["model"] == m).sum()), len(g)
        g = g.dropna(subset=[f"R_{c}" for c in cs])
        if g.empty:
            continue
        r = g[[f"R_{c}" for c in cs]].to_numpy(float)
        solved = (r >= tau - EPS).sum(axis=0)
        dec = (np.diff(r, axis=1) < -EPS).any(axis=1)
        above = r >= tau - EPS
        reversal = (above[:, :-1] & ~above[:, 1:]).any(axis=1)
        for c, k in zip(cs, solved, strict=True):
            rows.append(
                {
                    "model": model_name(m),
                    "budget": c,
                    "cells": len(g),
                    "solved_from_scratch": int(k),
                    "share": round(int(k) / len(g), 4),
                }
            )
        out = [_count(n, "instant cell") for n in (n_all - n_ni,) if n] + [
            _count(n, "cell") + " missing a restart budget" for n in (n_ni - len(g),) if n
        ]
        why = (
            f"n = {len(g)} of {_count(n_all, 'cell')}: the non-instant cells measured at "
            f"every budget" + (f"; {' and '.join(out)} left out" if out else "")
        )
        sentences.append(
            f"{model_name(m)} ({why}): "
            + " → ".join(_pct(int(k), len(g)) for k in solved)
            + " at "
            + " → ".join(f"{c:,}" for c in cs)
            + f" ({', '.join(str(int(k)) for k in solved)}"
            f" of {len(g)}); {int(dec.sum())} of {_count(len(g), 'curve')} decrease between "
            f"consecutive "
            f"budgets, {int(reversal.sum())} cross back below τ."
        )
    if not rows:
        return None
    return Headline(
        "dose_response",
        "Restart dose-response (9.2)",
        sentences,
        {"rows": rows},
        {"dose_response": pd.DataFrame(rows)},
        ("dose_response",),
    )


# -------------------------------------------------------------------- 9.3 matched compute


def matched_compute(labels: pd.DataFrame, budgets: Sequence[int], tau: float) -> Headline | None:
    """9.3: per model, the cells with an A1 terminal event: prefix wins and the median
    advantage in-grid (t + B within the restart budgets); wins and ties of the boundary
    proxies; how many reach τ at the largest restart budget and how many match the prefix."""
    if labels.empty or labels["terminal_a1_anchor"].isna().all():
        return None
    c_max = max(budgets)
    rc = f"R_{c_max}"
    rows, sentences = [], []
    for m in _models(labels):
        g = labels[(labels["model"] == m) & labels["terminal_a1_anchor"].notna()]
        if g.empty:
            continue
        proxy = g["terminal_a1_proxy"].fillna(False).astype(bool)
        adv = g["terminal_a1_advantage"].astype(float)
        inn, bnd = adv[~proxy], adv[proxy]
        r_max = g[rc].astype(float) if rc in g else pd.Series(np.nan, index=g.index)
        row: dict[str, Any] = {
            "model": model_name(m),
            "cells": int(len(g)),
            "in_grid": int(len(inn)),
            "in_grid_wins": int((inn > EPS).sum()),
            "in_grid_median_advantage": None if inn.empty else round(float(inn.median()), 3),
            "proxies": int(len(bnd)),
            "proxy_wins": int((bnd > EPS).sum()),
            "proxy_ties": int((bnd.abs() <= EPS).sum()),
            "reach_tau_at_c_max": int((r_max >= tau - EPS).sum()),
            "match_prefix_at_c_max": int(
                (r_max >= g["terminal_a1_rate"].astype(float) - EPS).sum()
            ),
            "c_max": c_max,
        }
        rows.append(row)
        sentences.append(
            f"{model_name(m)}: {_count(row['cells'], 'cell')} with an A1 terminal event; in-grid "
            f"({row['in_grid']}): prefix > restart in {row['in_grid_wins']}/{row['in_grid']}, "
            f"median advantage {_signed(row['in_grid_median_advantage'])}; boundary proxies "
            f"(t + B beyond {c_max:,}; {row['proxies']}): {_count(row['proxy_wins'], 'win')}, "
            f"{_count(row['proxy_ties'], 'tie')}; R({c_max:,}) ≥ τ in "
            f"{row['reach_tau_at_c_max']}/"
            f"{row['cells']}; R({c_max:,}) ≥ the prefix's pooled rate in "
            f"{row['match_prefix_at_c_max']}/{row['cells']}."
        )
    return Headline(
        "matched_compute",
        "Matched compute (9.3)",
        sentences,
        {"rows": rows},
        {"matched_compute": pd.DataFrame(rows)},
        ("matched_compute",),
    )


# ------------------------------------------------------------- 9.4 / 3.5 top-ups, hardening


def topup_resolution(resolution: Sequence[Mapping[str, Any]], target: int) -> Headline | None:
    """3.5 / 9.4: the enlarged probe cells and how they resolved; what the added branches
    alone gave."""
    rows = [dict(r) for r in resolution if int(r.get("cells") or 0) > 0]
    if not rows:
        return None
    lo = target // 4
    sentences = []
    for r in rows:
        added = [k for k in r if k.startswith("added_")]
        sentences.append(
            f"{model_name(r['model'])}: {_count(r['cells'], 'probe cell')} at {target} branches → "
            f"{r['low']} at ≤ {lo}/{target}, {r['intermediate']} intermediate, {r['high']} high "
            f"(≥ τ); the added branches alone give "
            + "/".join(str(i) for i in range(len(added)))
            + " successes in "
            + "/".join(str(r[k]) for k in added)
            + " cells."
        )
    table = pd.DataFrame(rows).assign(model=lambda f: f["model"].map(model_name))
    return Headline(
        "topup_resolution",
        "Top-up resolution (3.5, 9.4)",
        sentences,
        {"rows": rows},
        {"topup_resolution": table},
        ("topup_resolution",),
    )


def label_hardening(hardening: Sequence[Mapping[str, Any]]) -> Headline | None:
    """Appendix: trajectory categories before vs after the top-ups, changes, events removed
    and added."""
    rows = [dict(r) for r in hardening]
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    sentences = []
    for m, g in frame.groupby("model", sort=True):
        g = g.set_index("when")
        cats = ("instant", "interior", "A1 event", "censored")
        b = "/".join(str(int(g.iloc[0][c])) for c in cats)
        a = "/".join(str(int(g.iloc[-1][c])) for c in cats)
        last = g.iloc[-1]
        sentences.append(
            f"{model_name(m)}: instant/interior/A1-event/censored {b} before → {a} after the "
            f"top-ups; labels changed on {_fmt_int(last.get('changed'))} of "
            f"{_count(last['total'], 'trajectory', 'trajectories')}; "
            f"{_fmt_int(last.get('events_removed'))} events removed, "
            f"{_fmt_int(last.get('events_added'))} added."
        )
    return Headline(
        "label_hardening",
        "Label hardening (appendix)",
        sentences,
        {"rows": rows},
        {"label_hardening": frame.assign(model=frame["model"].map(model_name))},
        ("label_hardening",),
    )


def a2(table: pd.DataFrame, verdicts: Mapping[str, Mapping[str, Any]]) -> Headline | None:
    """3.6: the second probe arm's first crossings and the frozen verdict."""
    if table is None or table.empty:
        return None
    sentences = []
    for b2, v in verdicts.items():
        b1 = v.get("budget_1")
        sentences.append(
            f"{_count(v['trajectories'], 'trajectory', 'trajectories')} re-probed at "
            f"B = {int(b2):,} beside B = {_fmt_int(b1)}: "
            f"{v['earlier_by_2b']}/{v['trajectories']} first crossings "
            f"moved earlier by ≥ {2 * int(b1 or 0):,} tokens, {v['no_crossing_at_b2']} without a "
            f"crossing at B = {int(b2):,}; median shift "
            f"{_signed(v['median_shift_steps'], 1)} anchor steps → {v['verdict']}."
        )
    shown = table.assign(model=table["model"].map(model_name))
    return Headline(
        "a2",
        "Continuation-budget falsification (3.6, A2)",
        sentences,
        {"verdicts": dict(verdicts)},
        {"a2": shown},
        ("budget_falsification",),
    )


# --------------------------------------------------------------------- 9.5 confirmatory


def _ci(r: Mapping[str, Any]) -> str:
    lo, hi = (r.get("ci") or [None, None])[:2]
    return f"[{_signed(lo, 3)}, {_signed(hi, 3)}]"


def _included(confirm: Mapping[str, Any]) -> str:
    """ "1 of 2 labelled cells included (1 excluded: base run reached fewer than …)"."""
    cells = confirm.get("cells", {})
    text = f"{cells.get('included', '—')} of {cells.get('labelled', '—')} labelled cells included"
    excluded = confirm.get("excluded") or {}
    short = int(excluded.get("short_base_run") or 0) + int(excluded.get("no_base_run") or 0)
    if short:
        rule = excluded.get("rule") or "no base run long enough"
        text += f" ({short:,} excluded: {rule})"
    return text


def confirmatory(
    confirm: Mapping[str, Any] | None, sweep: Mapping[str, Any] | None
) -> Headline | None:
    """9.5: ΔAUROC with its CI for both endpoints and variants at the forecast point, and the
    post-hoc sweep (negative point estimates, CIs including 0). When no endpoint could be fit
    the first sentence says so and why (never that the test ran), and the figures, which would
    be empty frames, are not shown: `Headline.gaps` says why instead."""
    if not confirm:
        return None
    rows, fitted, reasons = [], [], []
    for r in confirm.get("results", []):
        fit = r.get("status") == "fit"
        rows.append(
            {
                "endpoint": r["endpoint"],
                "variant": r["variant"],
                "status": r["status"],
                "reason": None if fit else r.get("reason"),
                "test_rows": r.get("test_rows"),
                "test_problems": r.get("test_problems"),
                "baseline_auroc": r.get("baseline_auroc"),
                "early_auroc": r.get("early_auroc"),
                "delta_auroc": r.get("delta_auroc"),
                "ci_low": (r.get("ci") or [None])[0],
                "ci_high": (r.get("ci") or [None, None])[1],
                "success": r.get("success") if fit else None,  # no test, no verdict
            }
        )
        name = f"{r['endpoint'].capitalize()} ({r['variant']})"
        if fit:
            fitted.append(
                f"{name}: ΔAUROC "
                f"{_signed(r['delta_auroc'], 3)} {_ci(r)} on {r['test_rows']} test rows "
                f"({_count(r['test_problems'], 'problem')}; baseline {r['baseline_auroc']:.3f}, "
                f"+ early {r['early_auroc']:.3f}) → {'success' if r['success'] else 'no success'}."
            )
        else:
            reasons.append((name, str(r.get("reason") or "no reason given")))
    t = confirm.get("forecast_token")
    if fitted:
        sentences = [
            f"Confirmatory early-signal test at forecast token {_fmt_int(t)}: "
            f"{_included(confirm)}.",
            *fitted,
            *(f"{name}: not fit ({why})." for name, why in reasons),
        ]
    else:  # said first, plainly: no test ran
        why = sorted({w for _, w in reasons})
        sentences = [
            f"The confirmatory early-signal test at forecast token {_fmt_int(t)} could not be "
            "fit: " + (f"{why[0]}." if len(why) == 1 else "no endpoint had enough data."),
            f"{_included(confirm)[0].upper()}{_included(confirm)[1:]}.",
        ]
        if len(why) > 1:
            sentences += [f"{name}: not fit ({w})." for name, w in reasons]
    numbers: dict[str, Any] = {"forecast_token": t, "fit": bool(fitted), "results": rows}
    tables = {"confirmatory": pd.DataFrame(rows)}
    figures: tuple[str, ...] = ("confirmatory_forest",)
    gaps: dict[str, str] = {}
    if not fitted:
        gaps["confirmatory_forest"] = "no endpoint of the confirmatory test could be fit"
    if sweep:
        sweep_rows = pd.DataFrame(sweep.get("rows") or [])
        for e in ("primary", "secondary"):  # no verdict where nothing was fit
            if {f"{e}_status", f"{e}_success"} <= set(sweep_rows.columns):
                sweep_rows[f"{e}_success"] = sweep_rows[f"{e}_success"].where(
                    sweep_rows[f"{e}_status"] == "fit", None
                )
        tables["forecast_sweep"] = sweep_rows
        n, neg, zero = (
            sweep.get("estimates", 0),
            sweep.get("negative_estimates", 0),
            sweep.get("ci_including_zero", 0),
        )
        post = [x for x in sweep.get("forecast_tokens", []) if x != sweep.get("preregistered")]
        swept = ", ".join(f"{x:,}" for x in sweep.get("forecast_tokens", []))
        head = f"Forecast-point sweep over t ∈ {{{swept}}} (post-hoc: {len(post)} points)"
        if n:
            sentences.append(
                f"{head}: {neg} of {n} point estimates negative; {zero} of {n} CIs include 0."
            )
            figures += ("prefix_sweep",)
        else:
            sentences.append(f"{head}: no point could be fit, so there is no estimate to show.")
            gaps["prefix_sweep"] = "no forecast point of the sweep could be fit"
        numbers["sweep"] = {"estimates": n, "negative": neg, "ci_including_zero": zero}
    return Headline(
        "confirmatory",
        "Confirmatory early-signal test (9.5)",
        sentences,
        numbers,
        tables,
        tuple(f for f in figures if f not in gaps),
        gaps,
    )


# -------------------------------------------------------------------- 9.8 probe dissection


def probe_dissection(summaries: Mapping[str, Mapping[str, Any]]) -> Headline | None:
    """9.8: per `bt probe` output, the pooled and within-problem AUROC of each arm at its first
    and last anchor, and the LOO reference."""
    rows, sentences = [], []
    for name, doc in summaries.items():
        table = pd.DataFrame(doc.get("table") or [])
        if table.empty:
            continue
        for arm, g in table[table["score"] == "probe"].groupby("arm", sort=False):
            g = g.sort_values("t")
            ends = [g.iloc[0]] + ([g.iloc[-1]] if len(g) > 1 else [])
            parts = [
                f"t = {int(r['t'])}: pooled {_a(r, 'pooled')}, within (failure-weighted) "
                f"{_a(r, 'within_failure_weighted')}"
                for r in ends
            ]
            sentences.append(f"{name}, {arm} probe: " + "; ".join(parts) + ".")
            rows += [
                {
                    "source": name,
                    "arm": arm,
                    **{
                        k: r.get(k)
                        for k in (
                            "t",
                            "pooled",
                            "pooled_lo",
                            "pooled_hi",
                            "within_failure_weighted",
                            "within_pair_weighted",
                            "rows",
                        )
                    },
                }
                for r in g.to_dict(orient="records")
            ]
        loo = table[table["score"] == "loo"]
        if len(loo):
            sentences.append(f"{name}: LOO pass-rate reference pooled {_a(loo.iloc[0], 'pooled')}.")
    if not sentences:
        return None
    return Headline(
        "probe_dissection",
        "Probe dissection (9.8)",
        sentences,
        {"rows": rows},
        {"probe_dissection": pd.DataFrame(rows)},
        ("probe_dissection",),
    )


def _a(r: Mapping[str, Any], name: str) -> str:
    v, lo, hi = r.get(name), r.get(f"{name}_lo"), r.get(f"{name}_hi")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return f"{v:.3f}"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
