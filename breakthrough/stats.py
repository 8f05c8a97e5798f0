"""AUROC decomposition, trace-blind baselines, clustered bootstrap and binomial intervals
(scipy's).

Pure functions over numpy arrays: no I/O, no module state. Conventions (protocol 9.8, 16.15):

* ``label`` is 1 for a success (correct) and 0 for a failure; a score is read as "higher
  predicts success", so AUROC = P(score(success) > score(failure)) with ties counted 0.5.
* Over all success/failure ("discordant") pairs, a pair is *within* when both rows share a
  group (problem, or problem x model cell) and *between* otherwise. With
  lam = within pairs / all pairs, pooled = lam * within + (1 - lam) * between holds exactly.
  Within AUROC over pairs equals the per-group AUROCs averaged with s_g * f_g weights; the
  pre-registered failure-weighted mean (weights f_g) is reported beside it.
* A score that depends on the group alone ties every within pair, so its within AUROC is 0.5.
  The leave-one-out (LOO) pass rate gives successes (S-1)/(k-1) and failures S/(k-1) inside a
  group, so every within pair is reversed and its within AUROC is 0.

Everything is rank-based (one sort per score, per-group Mann-Whitney sums), O(n log n); the
bootstrap reuses that sort and costs O(n) per draw.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "DECOMPOSITION_STATS",
    "BootstrapResult",
    "Decomposition",
    "auroc",
    "bootstrap_decomposition",
    "decompose",
    "encode_groups",
    "loo_score",
    "missing",
    "percentile_interval",
    "proportion_ci",
    "summarize",
    "summarize_difference",
]

# Statistics produced by decompose() / bootstrap_decomposition(), in report order.
DECOMPOSITION_STATS = (
    "pooled",
    "within_pair_weighted",
    "within_failure_weighted",
    "between",
    "lam",
)


# --------------------------------------------------------------------------- validation


def _as_label(label: Any, n: int | None = None) -> np.ndarray:
    y = np.asarray(label)
    if y.ndim != 1:
        raise ValueError("label must be one-dimensional")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"label has {y.shape[0]} rows, expected {n}")
    if y.dtype == bool:
        return y.astype(np.int8)
    if not np.issubdtype(y.dtype, np.number):
        raise ValueError(f"label must be boolean or 0/1 numeric, got dtype {y.dtype}")
    if y.size and not np.all((y == 0) | (y == 1)):
        bad = np.unique(y[~((y == 0) | (y == 1))])[:5]
        raise ValueError(f"label must be binary (0/1); found values {bad.tolist()}")
    return y.astype(np.int8)


def _as_score(score: Any, n: int | None = None, name: str = "score") -> np.ndarray:
    s = np.asarray(score, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional")
    if n is not None and s.shape[0] != n:
        raise ValueError(f"{name} has {s.shape[0]} rows, expected {n}")
    if np.isnan(s).any():
        raise ValueError(f"{name} contains NaN; drop or impute those rows first")
    return s


def encode_groups(group: Any) -> tuple[np.ndarray, np.ndarray]:
    """Map group ids (any hashable values, one per row) to codes 0..G-1.

    Returns (codes, uniques) with uniques[codes] == group, codes in first-appearance order.
    A missing group id (None/NaN) is a ValueError.
    """
    import pandas as pd

    g = np.asarray(group)
    if g.ndim != 1:
        raise ValueError("group must be one-dimensional")
    codes, uniques = pd.factorize(g, use_na_sentinel=True)
    if codes.size and codes.min() < 0:
        raise ValueError(f"group has {int((codes < 0).sum())} missing ids")
    return codes.astype(np.int64), np.asarray(uniques)


# --------------------------------------------------------------------------- rank machinery


@dataclass(frozen=True)
class _Ranked:
    """One sort of the rows by score, kept for the point estimate and every bootstrap draw.

    For the bootstrap, failures are merged into units of equal (score, group) and successes
    into units of equal (group, failure units below, failure units tied-or-below), each with a
    multiplicity; a success unit's concordance with the failures is then (cn[lo] + cn[hi]) / 2
    where cn are cumulative failure weights. Tie-heavy scores (LOO, question-only) shrink to a
    few units per group.
    """

    neg_g: np.ndarray  # group of each failure unit, in score order
    neg_mult: np.ndarray | None  # failures per unit (None: all 1)
    pos_g: np.ndarray  # group of each success unit
    pos_mult: np.ndarray | None  # successes per unit (None: all 1)
    lo: np.ndarray  # failure units with a strictly lower score
    hi: np.ndarray  # failure units with a lower or equal score
    ties: bool  # some success ties a failure (lo != hi somewhere)
    n_rows: int
    u_total: float  # Mann-Whitney U over all success/failure pairs
    u_group: np.ndarray  # U over the pairs inside each group
    succ: np.ndarray  # successes per group (float)
    fail: np.ndarray  # failures per group (float)


def _runs(*keys: np.ndarray) -> np.ndarray:
    """Boolean: row starts a new run of equal keys (rows already sorted by the keys)."""
    n = keys[0].size
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


def _rank(codes: np.ndarray, n_groups: int, y: np.ndarray, s: np.ndarray) -> _Ranked:
    o = np.argsort(s, kind="stable")
    ss, gs, neg = s[o], codes[o], y[o] == 0
    s_neg, s_pos = ss[neg], ss[~neg]
    lo = np.searchsorted(s_neg, s_pos, side="left")
    hi = np.searchsorted(s_neg, s_pos, side="right")
    u_total = 0.5 * (float(lo.sum()) + float(hi.sum()))

    # Within groups: regroup the score-sorted rows (stable, so each group stays score-sorted)
    # and count, per success, the failures of its own group below / tied with it.
    o2 = np.argsort(gs, kind="stable")
    g2, s2, neg2 = gs[o2], ss[o2], neg[o2]
    n = g2.size
    pos = np.arange(n)
    cneg = np.r_[0, np.cumsum(neg2)]  # failures before position p: cneg[p]
    new_group = _runs(g2)
    new_block = _runs(g2, s2)
    g_start = np.maximum.accumulate(np.where(new_group, pos, 0)) if n else pos
    b_start = np.maximum.accumulate(np.where(new_block, pos, 0)) if n else pos
    b_last = np.flatnonzero(np.r_[new_block[1:], True]) if n else pos  # last row of each block
    b_end = b_last[np.cumsum(new_block) - 1] + 1 if n else pos
    p = ~neg2
    base = cneg[g_start[p]]
    conc = (cneg[b_start[p]] - base) + (cneg[b_end[p]] - base)  # 2 x concordance
    u_group = 0.5 * np.bincount(g2[p], weights=conc, minlength=n_groups)
    size = np.bincount(codes, minlength=n_groups).astype(np.float64)
    succ = np.bincount(codes, weights=(y == 1), minlength=n_groups).astype(np.float64)

    # Bootstrap units. Failures: runs of equal (score, group).
    g_neg = gs[neg]
    on = np.lexsort((g_neg, s_neg))
    start = np.flatnonzero(_runs(s_neg[on], g_neg[on]))
    neg_g = g_neg[on][start]
    neg_mult = np.diff(np.r_[start, g_neg.size])
    unit_s = s_neg[on][start]
    lo_u = np.searchsorted(unit_s, s_pos, side="left")
    hi_u = np.searchsorted(unit_s, s_pos, side="right")
    # Successes: equal (lo, hi, group); kept in score order so the gathers stream.
    g_pos = gs[~neg]
    op = np.lexsort((g_pos, hi_u, lo_u))
    start = np.flatnonzero(_runs(lo_u[op], hi_u[op], g_pos[op]))
    pos_mult = np.diff(np.r_[start, g_pos.size])
    sel = op[start]
    return _Ranked(
        neg_g=neg_g,
        neg_mult=None if neg_mult.size == 0 or neg_mult.max() == 1 else neg_mult,
        pos_g=g_pos[sel],
        pos_mult=None if pos_mult.size == 0 or pos_mult.max() == 1 else pos_mult,
        lo=lo_u[sel],
        hi=hi_u[sel],
        ties=bool(np.any(lo_u != hi_u)),
        n_rows=int(y.size),
        u_total=u_total,
        u_group=u_group,
        succ=succ,
        fail=size - succ,
    )


def _u_draws(r: _Ranked, counts: np.ndarray) -> np.ndarray:
    """U over all pairs for m resamples at once; ``counts`` (m, G): copies of each group.

    A group drawn c times enters with each row weighted c, so a pair's weight is c_g * c_h;
    cumulative failure weights in score order give each success its weighted concordance.
    Exact integer arithmetic (int32 when it cannot overflow).
    """
    m = counts.shape[0]
    cmax = max(int(counts.max()) if counts.size else 0, 1)
    pmax = int(r.pos_mult.max()) if r.pos_mult is not None else 1
    dt = np.int32 if 2 * max(r.n_rows, 1) * cmax * cmax * pmax < 2**31 else np.int64
    c = counts.astype(dt, copy=False)
    cn = np.zeros((m, r.neg_g.size + 1), dtype=dt)
    wn = np.take(c, r.neg_g, axis=1)  # np.take: faster than fancy indexing here
    if r.neg_mult is not None:
        wn *= r.neg_mult.astype(dt)
    np.cumsum(wn, axis=1, dtype=dt, out=cn[:, 1:])
    v = np.take(cn, r.lo, axis=1)
    if r.ties:
        v += np.take(cn, r.hi, axis=1)
    v *= np.take(c, r.pos_g, axis=1)
    if r.pos_mult is not None:
        v *= r.pos_mult.astype(dt)
    total = v.sum(axis=1, dtype=np.int64).astype(np.float64)
    return 0.5 * total if r.ties else total


# --------------------------------------------------------------------------- point estimates


def auroc(score: Any, label: Any) -> float:
    """Pooled AUROC of ``score`` for ``label`` (1 = success), ties 0.5; NaN if one class."""
    y = _as_label(label)
    s = _as_score(score, y.size)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = _rank(np.zeros(y.size, dtype=np.int64), 1, y, s)
    return r.u_total / (n_pos * n_neg)


def _groups_for(group: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`encode_groups(group)`, checked to have one group id per row."""
    codes, uniques = encode_groups(group)
    if codes.size != n:
        raise ValueError(f"group has {codes.size} rows, expected {n}")
    return codes, uniques


@dataclass(frozen=True)
class Decomposition:
    """Pooled / within / between AUROC over discordant pairs; pooled = lam*within + (1-lam)*between.

    ``within_pair_weighted`` is the pair-level within AUROC (= s*f-weighted per-group mean);
    ``within_failure_weighted`` weights per-group AUROCs by failures. Undefined values are NaN
    (no success or no failure; no within pairs; no between pairs).
    """

    pooled: float
    within_pair_weighted: float
    within_failure_weighted: float
    between: float
    lam: float
    n_rows: int
    n_groups: int
    n_groups_mixed: int  # groups holding both a success and a failure
    n_success: int
    n_failure: int
    n_pairs: int
    n_within_pairs: int
    n_between_pairs: int

    @property
    def within(self) -> float:
        """The pair-level within AUROC (the term of the identity)."""
        return self.within_pair_weighted

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den > 0 else float("nan")


def decompose(group: Any, score: Any, label: Any) -> Decomposition:
    """Pooled, within (both weightings), between AUROC and lam for one score."""
    y = _as_label(label)
    s = _as_score(score, y.size)
    codes, uniques = _groups_for(group, y.size)
    G = uniques.size
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    r = _rank(codes, G, y, s)
    u_total, u_g, fail = r.u_total, r.u_group, r.fail
    pairs_g = r.succ * fail
    mixed = pairs_g > 0
    n_pairs = n_pos * n_neg
    n_within = int(pairs_g.sum())
    u_within = float(u_g.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        a_g = u_g[mixed] / pairs_g[mixed]
    return Decomposition(
        pooled=_ratio(u_total, n_pairs),
        within_pair_weighted=_ratio(u_within, n_within),
        within_failure_weighted=_ratio(float(np.dot(fail[mixed], a_g)), float(fail[mixed].sum())),
        between=_ratio(u_total - u_within, n_pairs - n_within),
        lam=_ratio(n_within, n_pairs),
        n_rows=int(y.size),
        n_groups=int(G),
        n_groups_mixed=int(mixed.sum()),
        n_success=n_pos,
        n_failure=n_neg,
        n_pairs=int(n_pairs),
        n_within_pairs=n_within,
        n_between_pairs=int(n_pairs - n_within),
    )


# --------------------------------------------------------------------------- baselines


def loo_score(group: Any, label: Any) -> np.ndarray:
    """Leave-one-out pass rate: mean correctness of the other rows of the same group.

    (S_g - y_i) / (k_g - 1); NaN for a group with a single row (no other attempt).
    """
    y = _as_label(label).astype(np.float64)
    codes, uniques = _groups_for(group, y.size)
    k = np.bincount(codes, minlength=uniques.size).astype(np.float64)
    s = np.bincount(codes, weights=y, minlength=uniques.size)
    others = k[codes] - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(others > 0, (s[codes] - y) / np.where(others > 0, others, 1.0), np.nan)


# --------------------------------------------------------------------------- intervals


def proportion_ci(
    successes: int, n: int, confidence: float = 0.95, method: str = "wilson"
) -> tuple[float, float]:
    """scipy's interval for a success rate, `binomtest(k, n).proportion_ci(...)`: method
    "wilson" (Wilson score) or "exact" (Clopper-Pearson); NaNs when n == 0 (no rate)."""
    from scipy.stats import binomtest

    if n <= 0:
        return (float("nan"), float("nan"))
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method=method)
    return (float(ci.low), float(ci.high))


def percentile_interval(draws: Any, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval over the finite draws (NaN draws — undefined statistics — skipped)."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return (float("nan"), float("nan"))
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(d, [a, 1.0 - a])
    return (float(lo), float(hi))


# --------------------------------------------------------------------------- bootstrap


def _count_draws(
    rng: np.random.Generator, n_groups: int, n_boot: int, chunk: int
) -> Iterator[np.ndarray]:
    """Yield (m, G) arrays: how often each group is drawn, G draws with replacement per row.

    Every resampling consumes the generator through this function, so the same seed gives the
    same resamples in each (the generic resampling tests/test_stats.py checks against too).
    """
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        idx = rng.integers(0, n_groups, size=(m, n_groups))
        flat = (idx + (np.arange(m) * n_groups)[:, None]).ravel()
        yield np.bincount(flat, minlength=m * n_groups).reshape(m, n_groups)
        done += m


@dataclass(frozen=True)
class BootstrapResult:
    """Draws of the decomposition statistics for each score, on shared group resamples.

    ``draws[name][stat]`` is an (n_boot,) array (NaN where the statistic is undefined in that
    draw, e.g. a single-class draw). ``difference(a, b, stat)`` gives draws of a - b.
    """

    scores: tuple[str, ...]
    n_boot: int
    seed: int | None
    draws: dict[str, dict[str, np.ndarray]]

    def interval(self, name: str, stat: str, confidence: float = 0.95) -> tuple[float, float]:
        return percentile_interval(self.draws[name][stat], confidence)

    def n_valid(self, name: str, stat: str) -> int:
        return int(np.isfinite(self.draws[name][stat]).sum())

    def difference(self, a: str, b: str, stat: str) -> np.ndarray:
        return self.draws[a][stat] - self.draws[b][stat]


def _chunk_stats(r: _Ranked, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Decomposition statistics for m resamples given as group counts (m, G)."""
    G = r.succ.size
    pairs_g = r.succ * r.fail
    mixed = pairs_g > 0
    auc_g = np.divide(r.u_group, pairs_g, out=np.zeros(G), where=mixed)
    f_mixed = np.where(mixed, r.fail, 0.0)
    c = counts.astype(np.float64)
    u_total = _u_draws(r, counts)
    n_pairs = (c @ r.succ) * (c @ r.fail)
    n_within = c @ pairs_g
    n_between = n_pairs - n_within
    u_within = c @ r.u_group
    fw = c @ f_mixed
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "pooled": np.where(n_pairs > 0, u_total / n_pairs, np.nan),
            "within_pair_weighted": np.where(n_within > 0, u_within / n_within, np.nan),
            "within_failure_weighted": np.where(fw > 0, (c @ (f_mixed * auc_g)) / fw, np.nan),
            "between": np.where(n_between > 0, (u_total - u_within) / n_between, np.nan),
            "lam": np.where(n_pairs > 0, n_within / n_pairs, np.nan),
        }


def bootstrap_decomposition(
    group: Any,
    label: Any,
    scores: Mapping[str, Any],
    n_boot: int = 2000,
    seed: int | np.random.Generator = 0,
    chunk: int | None = None,
    cluster: Any = None,
) -> BootstrapResult:
    """Clustered percentile bootstrap of every decomposition statistic, for several scores.

    Resamples clusters with replacement: by default the groups themselves; ``cluster`` (one id
    per row, constant within each group) resamples coarser units, e.g. problems while the
    groups are problem x model cells, so a problem's cells travel together. A cluster drawn
    twice enters as two copies whose groups are distinct groups.

    All scores see the same resamples (draws are paired), so differences between scores on
    the same rows come from ``BootstrapResult.difference``. Equivalent to resampling the rows of
    the drawn groups and calling ``decompose`` on each draw with the same seed (the reference in
    tests/test_stats.py), but O(n) per draw with no re-sorting: a drawn group's rows enter with
    multiplicity = its count.
    """
    y = _as_label(label)
    codes, uniques = _groups_for(group, y.size)
    if uniques.size == 0:
        raise ValueError("no groups to resample")
    cluster_of_group = None
    n_units = int(uniques.size)
    if cluster is not None:
        ccodes, cuniq = encode_groups(cluster)
        if ccodes.size != y.size:
            raise ValueError(f"cluster has {ccodes.size} rows, expected {y.size}")
        cluster_of_group = np.full(uniques.size, -1, dtype=np.int64)
        cluster_of_group[codes] = ccodes
        if np.any(cluster_of_group[codes] != ccodes):
            raise ValueError("cluster must be constant within each group")
        n_units = int(cuniq.size)
    ss = {name: _as_score(v, y.size, name=str(name)) for name, v in scores.items()}
    G = int(uniques.size)
    if chunk is None:  # keep the (chunk, n) weight matrices around 32 MB
        chunk = int(max(1, min(256, 4_000_000 // max(1, y.size))))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ranked = {name: _rank(codes, G, y, s) for name, s in ss.items()}
    parts: dict[str, dict[str, list[np.ndarray]]] = {
        name: {k: [] for k in DECOMPOSITION_STATS} for name in ss
    }
    for counts in _count_draws(rng, n_units, n_boot, chunk):
        if cluster_of_group is not None:
            counts = counts[:, cluster_of_group]
        for name, r in ranked.items():
            for k, v in _chunk_stats(r, counts).items():
                parts[name][k].append(v)
    draws = {
        name: {k: np.concatenate(v) if v else np.zeros(0) for k, v in d.items()}
        for name, d in parts.items()
    }
    return BootstrapResult(
        scores=tuple(ss),
        n_boot=int(n_boot),
        seed=None if isinstance(seed, np.random.Generator) else int(seed),
        draws=draws,
    )


def summarize(
    point: Decomposition,
    boot: BootstrapResult | None,
    name: str,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """A JSON-ready dict: each statistic with its interval and count of valid draws."""
    out: dict[str, Any] = {}
    for stat in DECOMPOSITION_STATS:
        entry: dict[str, Any] = {"estimate": _finite_or_none(getattr(point, stat))}
        if boot is not None:
            lo, hi = boot.interval(name, stat, confidence)
            entry["ci"] = [_finite_or_none(lo), _finite_or_none(hi)]
            entry["n_valid_draws"] = boot.n_valid(name, stat)
        out[stat] = entry
    for k in (
        "n_rows",
        "n_groups",
        "n_groups_mixed",
        "n_success",
        "n_failure",
        "n_pairs",
        "n_within_pairs",
        "n_between_pairs",
    ):
        out[k] = getattr(point, k)
    return out


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def summarize_difference(
    a: Decomposition,
    b: Decomposition,
    boot: BootstrapResult | None,
    name_a: str,
    name_b: str,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """a - b for each statistic (same rows), with paired bootstrap intervals."""
    out: dict[str, Any] = {}
    for stat in DECOMPOSITION_STATS:
        entry: dict[str, Any] = {"estimate": _finite_or_none(getattr(a, stat) - getattr(b, stat))}
        if boot is not None:
            d = boot.difference(name_a, name_b, stat)
            lo, hi = percentile_interval(d, confidence)
            entry["ci"] = [_finite_or_none(lo), _finite_or_none(hi)]
            entry["n_valid_draws"] = int(np.isfinite(d).sum())
        out[stat] = entry
    return out


def missing(value: Any) -> bool:
    """Whether a table cell holds no value: None, pandas' NA, or a NaN float (Python's or
    NumPy's). The one rule every report page and figure uses to show "—" or leave a point out."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return bool(np.isnan(value))
    pd = sys.modules.get("pandas")  # pandas' NA exists only where pandas was loaded
    return pd is not None and value is pd.NA
