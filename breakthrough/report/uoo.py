"""UoO metrics (uniqueness.md section 10): pure functions on a DataFrame of graded samples.

A graded frame has one row per sample (see `GRADED_COLUMNS`): `run`, `variant`, `model`,
`item_id`, `kind`, `bin`, `fixed29`, `seed`, `score` (0/1), `optimal`, `unique_ok`, `count_ok`,
`label`, `parse_error`, `parsed` (bool), `claimed_count` (float; NaN when unparsed),
`true_count`, `within_x2`, `count_direction`, `size` (the instance's n) and `thinking` (the run's
`--thinking`: "on", "off" or "" when not asked). `graded_frame` builds it from run-store samples
by regrading their text with the `optimum` grader; tests build it by hand."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from breakthrough.tasks.optimum.generator import ALL_BIN_IDS, ALL_BIN_LABELS, KINDS
from breakthrough.tasks.optimum.grader import OptimumGrader

GRADED_COLUMNS = (
    "run", "variant", "model", "item_id", "kind", "bin", "fixed29", "seed", "score", "optimal",
    "unique_ok", "count_ok", "label", "parse_error", "parsed", "claimed_count", "true_count",
    "within_x2", "count_direction", "size", "thinking",
)  # fmt: skip
NO_CLAIM = "∅"  # an unparsed answer's claimed count in agreement statistics
RESOLUTION_NOTE = (
    "fixed29 resolution is 3.4 points (one item); cells with 3 items are descriptive only."
)


# ---------------------------------------------------------------------------------------------
# building the frame


def _to_float(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:  # an absurd claimed count such as 10**400
        return math.inf


def graded_row(grade_detail: dict[str, Any], item: dict[str, Any], **ctx: Any) -> dict[str, Any]:
    """One graded-frame row from a grade's `detail` (grading.optimum record) and its item."""
    checks = grade_detail["checks"]
    diag = grade_detail.get("diag", {})
    parsed = grade_detail.get("parse_error") is None
    claimed = diag.get("claimed_count") if parsed else None
    return {
        **ctx,
        "item_id": item["id"],
        "kind": item["kind"],
        "bin": item["bin"],
        "fixed29": bool(item.get("fixed29", item.get("rep") == 0)),
        "score": int(grade_detail["score"]),
        "optimal": bool(checks["optimal"]),
        "unique_ok": bool(checks["unique"]),
        "count_ok": bool(checks["count"]),
        "label": grade_detail["label"],
        "parse_error": grade_detail.get("parse_error"),
        "parsed": parsed,
        "claimed_count": float("nan") if claimed is None else _to_float(claimed),
        "true_count": int(item["n_optima"]),
        "within_x2": bool(diag.get("within_x2", False)) if parsed else False,
        "count_direction": diag.get("count_direction") if parsed else None,
        "size": int(item.get("n", item["instance"]["n"])),  # n: items, or workers (assignment)
    }


def graded_frame(
    samples: pd.DataFrame,
    items: dict[str, dict[str, Any]],
    *,
    run: str,
    variant: str | None = None,
    thinking: str = "",
) -> pd.DataFrame:
    """Regrade store samples (`problem_id`, `text`, `finish_reason`, optional `model`, `seed`,
    `variant`) against their cohort items; samples of other items are dropped. `thinking`: the
    run's thinking switch, recorded on every row."""
    grader = OptimumGrader()
    rows = []
    for rec in samples.to_dict("records"):
        item = items.get(rec.get("problem_id"))
        if item is None:
            continue
        g = grader.grade(rec.get("text") or "", item, rec.get("finish_reason"))
        rows.append(
            graded_row(
                g.detail,
                item,
                run=run,
                variant=rec.get("variant") or variant or "plain",
                model=rec.get("model"),
                seed=rec.get("seed"),
                thinking=thinking,
            )
        )
    return pd.DataFrame(rows, columns=list(GRADED_COLUMNS))


# ---------------------------------------------------------------------------------------------
# exact tests and intervals


def proportion_ci(
    k: int, n: int, confidence: float = 0.95, method: str = "wilson"
) -> tuple[float, float]:
    """Binomial CI for k of n: method "wilson" or "exact" (Clopper-Pearson); (nan, nan) if n=0."""
    if n == 0:
        return (math.nan, math.nan)
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method=method)
    return (float(ci.low), float(ci.high))


def sign_test(under: int, over: int) -> float:
    """Exact two-sided sign test, p = min(1, 2 * P[X <= min(u, o)]), X ~ Bin(u + o, 1/2)."""
    m = under + over
    if m == 0:
        return 1.0
    return float(min(1.0, 2.0 * stats.binom.cdf(min(under, over), m, 0.5)))


def mcnemar_p(b: int, c: int) -> float:
    """Exact McNemar: p = min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))."""
    return sign_test(b, c)


def fisher_p(pass_a: int, n_a: int, pass_b: int, n_b: int) -> tuple[float, float]:
    """Two-sided Fisher exact on [[pass_A, fail_A], [pass_B, fail_B]]: (odds ratio, p)."""
    res = stats.fisher_exact([[pass_a, n_a - pass_a], [pass_b, n_b - pass_b]])
    return float(res.statistic), float(res.pvalue)


# ---------------------------------------------------------------------------------------------
# metrics


def _rate(k: int, n: int) -> float:
    return k / n if n else math.nan


def leaderboard(
    df: pd.DataFrame,
    by: Sequence[str] = ("run",),
    *,
    confidence: float = 0.95,
    method: str = "wilson",
) -> pd.DataFrame:
    """Score over the fixed29 items per group: k, n, fraction and a binomial CI.

    With several samples of an item in a group (repeats), all of them count (pooled rate)."""
    rows = []
    fixed = df[df["fixed29"].astype(bool)]
    for key, g in fixed.groupby(list(by), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        k, n = int(g["score"].sum()), len(g)
        lo, hi = proportion_ci(k, n, confidence, method)
        rows.append({**dict(zip(by, key, strict=True)), "k": k, "n": n, "score": _rate(k, n),
                     "ci_low": lo, "ci_high": hi})  # fmt: skip
    cols = [*by, "k", "n", "score", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=cols)


def check_accuracy(
    df: pd.DataFrame, by: str | Sequence[str] = "bin", *, check: str = "count_ok"
) -> pd.DataFrame:
    """Accuracy of one check (`count_ok` = exact count; or `optimal`, `unique_ok`, `score`) by
    one or more columns, with k and n; bins and kinds in their canonical order."""
    keys = [by] if isinstance(by, str) else list(by)
    out = (
        df.groupby(keys, sort=False, dropna=False)[check]
        .agg(k=lambda s: int(s.astype(int).sum()), n="size")
        .reset_index()
    )
    out["rate"] = out["k"] / out["n"]
    order = {"bin": list(ALL_BIN_IDS), "kind": list(KINDS)}
    sort_cols = []
    for key in keys:
        if key in order:
            out[f"_{key}"] = out[key].map({v: i for i, v in enumerate(order[key])})
            sort_cols.append(f"_{key}")
        else:
            sort_cols.append(key)
    out = out.sort_values(sort_cols, kind="stable").drop(
        columns=[c for c in out.columns if c.startswith("_")]
    )
    if "bin" in keys:
        out.insert(keys.index("bin") + 1, "bin_label", out["bin"].map(ALL_BIN_LABELS))
    return out.reset_index(drop=True)


def by_size(df: pd.DataFrame) -> pd.DataFrame:
    """Per run, kind and problem size n (the question real sizes ask: does undercounting grow
    with size?): items, accuracy (all three checks), exact-count rate, the share of wrong
    counts that are too low (among parsed answers) and the within-2x rate."""
    rows = []
    runs = {r: i for i, r in enumerate(dict.fromkeys(df["run"]))}  # the report's run order
    kinds = {k: i for i, k in enumerate(KINDS)}
    groups = df.groupby(["run", "kind", "size"], sort=False)
    order = sorted(groups.groups, key=lambda g: (runs[g[0]], kinds.get(g[1], len(kinds)), g[2]))
    for run, kind, size in order:
        d = groups.get_group((run, kind, size))
        parsed = d[d["parsed"].astype(bool)]
        wrong = parsed[~parsed["count_ok"].astype(bool)]
        under = int((wrong["claimed_count"].astype(float) < wrong["true_count"]).sum())
        rows.append(
            {
                "run": run,
                "kind": kind,
                "size": int(size),
                "n": len(d),
                "accuracy": float(d["score"].mean()),
                "exact_count": float(d["count_ok"].astype(float).mean()),
                "undercount_share": under / len(wrong) if len(wrong) else float("nan"),
                "within_x2": float(d["within_x2"].astype(float).mean()),
            }
        )
    return pd.DataFrame(rows)


def count_errors(df: pd.DataFrame) -> dict[str, Any]:
    """Count-error anatomy over parsed answers (spec 10.3)."""
    parsed = df[df["parsed"].astype(bool)]
    wrong = parsed[~parsed["count_ok"].astype(bool)]
    claimed = wrong["claimed_count"].astype(float)
    truth = wrong["true_count"].astype(float)
    under = int((claimed < truth).sum())
    over = int((claimed > truth).sum())
    pos = claimed >= 1
    log2 = np.log2(claimed[pos] / truth[pos])
    opt = parsed[parsed["optimal"].astype(bool)]
    return {
        "n": len(df),
        "n_parsed": len(parsed),
        "n_count_exact": int(parsed["count_ok"].astype(bool).sum()),
        "n_count_wrong": len(wrong),
        "under": under,
        "over": over,
        "sign_test_p": sign_test(under, over),
        # within a factor of 2 (claimed >= 1 and N/2 <= claimed <= 2N), over all samples
        # (unparsed counts as not within) and among the wrong counts
        "within_x2_rate": _rate(int(df["within_x2"].astype(bool).sum()), len(df)),
        "within_x2_among_wrong": _rate(int(wrong["within_x2"].astype(bool).sum()), len(wrong)),
        "median_abs_log2_ratio": float(np.median(np.abs(log2))) if len(log2) else math.nan,
        "mean_log2_ratio": float(np.mean(log2)) if len(log2) else math.nan,
        "count_acc_given_optimal": _rate(int(opt["count_ok"].astype(bool).sum()), len(opt)),
    }


def _per_item(df: pd.DataFrame, column: str) -> pd.Series:
    """One value per item (the first sample by seed when an item was sampled more than once)."""
    d = df.sort_values(["item_id", "seed"], kind="stable") if "seed" in df else df
    return d.groupby("item_id", sort=True)[column].first()


def fisher_compare(
    df: pd.DataFrame, a: Any, b: Any, *, by: str = "run", check: str = "score",
    fixed29_only: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Fisher exact test between two groups (runs or models), as published (unpaired)."""
    d = df[df["fixed29"].astype(bool)] if fixed29_only else df
    sa = _per_item(d[d[by] == a], check).astype(int)
    sb = _per_item(d[d[by] == b], check).astype(int)
    odds, p = fisher_p(int(sa.sum()), len(sa), int(sb.sum()), len(sb))
    return {"a": a, "b": b, "k_a": int(sa.sum()), "n_a": len(sa), "k_b": int(sb.sum()),
            "n_b": len(sb), "odds_ratio": odds, "p": p}  # fmt: skip


def mcnemar_compare(
    df: pd.DataFrame, a: Any, b: Any, *, by: str = "variant", check: str = "count_ok"
) -> dict[str, Any]:
    """Exact McNemar between two groups (e.g. prompt variants) on the items both answered.
    b = right under `a` and wrong under `b`; c = the reverse."""
    sa = _per_item(df[df[by] == a], check).astype(bool)
    sb = _per_item(df[df[by] == b], check).astype(bool)
    common = sa.index.intersection(sb.index)
    sa, sb = sa[common], sb[common]
    b_n = int((sa & ~sb).sum())
    c_n = int((~sa & sb).sum())
    return {"a": a, "b": b, "check": check, "n_pairs": len(common), "k_a": int(sa.sum()),
            "k_b": int(sb.sum()), "b_n": b_n, "c_n": c_n, "p": mcnemar_p(b_n, c_n)}  # fmt: skip


def _claim_key(v: float) -> str:
    if v != v:
        return NO_CLAIM
    return str(int(v)) if math.isfinite(v) else str(v)


def count_agreement(df: pd.DataFrame, *, by: str = "run") -> dict[str, Any]:
    """Run-to-run agreement of claimed counts over repeated runs (groups of `by`), on the items
    answered in at least two of them; an unparsed answer counts as one distinct value."""
    claims = (
        df.assign(_claim=df["claimed_count"].map(_claim_key))
        .sort_values([by, "item_id"], kind="stable")
        .groupby(["item_id", by], sort=True)["_claim"]
        .first()
        .unstack(by)
    )
    n_items = n_same = 0
    pair_agree = pair_total = 0
    for _item, row in claims.iterrows():
        vals = [v for v in row.tolist() if isinstance(v, str)]
        if len(vals) < 2:
            continue
        n_items += 1
        n_same += len(set(vals)) == 1
        for x, y in combinations(vals, 2):
            pair_agree += x == y
            pair_total += 1
    score = df.groupby(by)["score"].mean()
    per_item = df.groupby(["item_id", by])["score"].first().unstack(by)
    return {
        "runs": int(claims.shape[1]),
        "n_items": n_items,
        "n_identical": n_same,
        "n_differ": n_items - n_same,
        "share_identical": _rate(n_same, n_items),
        "mean_pairwise_agreement": _rate(pair_agree, pair_total),
        "score_mean": float(score.mean()) if len(score) else math.nan,
        "score_sd": float(score.std(ddof=1)) if len(score) > 1 else math.nan,
        "pass_at_r": float((per_item.max(axis=1) >= 1).mean()) if len(per_item) else math.nan,
        "pass_all_r": float((per_item.min(axis=1) >= 1).mean()) if len(per_item) else math.nan,
        "majority_vote": float((per_item.mean(axis=1) > 0.5).mean()) if len(per_item) else math.nan,
    }


def label_counts(df: pd.DataFrame, by: str = "run") -> pd.DataFrame:
    """Label distribution per group (format health and failure anatomy)."""
    return df.groupby([by, "label"]).size().unstack("label", fill_value=0)


def summarize_runs(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-run graded frames."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(GRADED_COLUMNS))
    return pd.concat(frames, ignore_index=True)
