"""breakthrough.stats: worked example, decomposition identity, baselines, bootstrap, intervals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import beta, norm
from sklearn.metrics import roc_auc_score

from breakthrough import stats as S

# The study's worked example: problem A 3 correct / 1 wrong, problem C 1 correct / 3 wrong;
# every attempt of A scores 0.75, every attempt of C 0.25 (a question-only score).
EX_GROUP = ["A"] * 4 + ["C"] * 4
EX_LABEL = [1, 1, 1, 0, 1, 0, 0, 0]
EX_SCORE = [0.75] * 4 + [0.25] * 4


def _group_score(group, value):
    """A question-only score: `value(group id)` for every row of the group."""
    return np.array([float(value(g)) for g in group])


def _cluster_bootstrap(group, statistic, *arrays, n_boot, seed):
    """The generic resampling `bootstrap_decomposition` must equal: each draw takes the rows
    of the drawn groups (a group drawn twice enters as two distinct groups) and calls
    `statistic(copy ids, *resampled arrays)`; the draws come from `S._count_draws`, as the
    fast path's do."""
    codes, uniques = S.encode_groups(group)
    G = uniques.size
    cols = [np.asarray(a) for a in arrays]
    order = np.argsort(codes, kind="stable")
    size = np.bincount(codes, minlength=G)
    start = np.r_[0, np.cumsum(size)[:-1]]
    out = []
    for counts in S._count_draws(np.random.default_rng(seed), G, n_boot, chunk=64):
        for c in counts:
            drawn = np.repeat(np.arange(G), c)  # group ids, one entry per copy
            lens = size[drawn]
            copy_id = np.repeat(np.arange(drawn.size), lens)
            offs = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
            rows = order[start[drawn][copy_id] + offs]
            out.append(np.asarray(statistic(copy_id, *(a[rows] for a in cols)), dtype=np.float64))
    return np.stack(out)


def _brute(group, score, label):
    """Pair loop: (within U, within pairs, between U, between pairs)."""
    wu = wn = bu = bn = 0.0
    for gi, si, yi in zip(group, score, label, strict=True):
        if yi != 1:
            continue
        for gj, sj, yj in zip(group, score, label, strict=True):
            if yj != 0:
                continue
            c = 1.0 if si > sj else 0.5 if si == sj else 0.0
            if gi == gj:
                wu, wn = wu + c, wn + 1
            else:
                bu, bn = bu + c, bn + 1
    return wu, wn, bu, bn


def test_worked_example():
    d = S.decompose(EX_GROUP, EX_SCORE, EX_LABEL)
    assert Fraction(d.pooled).limit_denominator(100) == Fraction(12, 16)
    assert d.within == 0.5 and d.within_failure_weighted == 0.5
    assert (d.n_pairs, d.n_within_pairs, d.n_between_pairs) == (16, 6, 10)
    assert d.lam == pytest.approx(6 / 16)
    assert d.between == pytest.approx(9 / 10)  # 9 of A-success x C-failure concordant, 1 not
    assert d.pooled == pytest.approx(d.lam * d.within + (1 - d.lam) * d.between, abs=1e-15)
    assert S.auroc(EX_SCORE, EX_LABEL) == pytest.approx(roc_auc_score(EX_LABEL, EX_SCORE))


def test_loo_score_and_its_within_auroc_is_zero():
    loo = S.loo_score(EX_GROUP, EX_LABEL)
    # A: successes (3-1)/3, failure 3/3; C: success 0/3, failures 1/3.
    np.testing.assert_allclose(loo, [2 / 3, 2 / 3, 2 / 3, 1, 0, 1 / 3, 1 / 3, 1 / 3])
    d = S.decompose(EX_GROUP, loo, EX_LABEL)
    assert d.within == 0.0 and d.within_failure_weighted == 0.0
    rng = np.random.default_rng(5)
    g = rng.integers(0, 40, 600)
    y = rng.random(600) < rng.random(40)[g]
    d = S.decompose(g, S.loo_score(g, y), y)
    assert d.n_groups_mixed > 0 and d.within == 0.0 and d.within_failure_weighted == 0.0
    assert np.isnan(S.loo_score(["x", "y", "y"], [1, 0, 1])[0])  # single-row group


def test_question_only_score_within_is_half():
    rng = np.random.default_rng(1)
    g = rng.integers(0, 30, 400)
    y = rng.random(400) < 0.5
    q = _group_score(g, lambda gid: (gid * 37) % 11)
    d = S.decompose(g, q, y)
    assert d.within == 0.5 and d.within_failure_weighted == 0.5


rows = st.integers(2, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 5), min_size=n, max_size=n),
        st.lists(st.integers(0, 6).map(lambda v: v / 2), min_size=n, max_size=n),  # many ties
        st.lists(st.booleans(), min_size=n, max_size=n),
    )
)


@settings(max_examples=60, deadline=None)
@given(rows)
def test_identity_and_sklearn_agreement(data):
    group, score, label = data
    y = np.array(label, dtype=int)
    d = S.decompose(group, score, y)
    if 0 < y.sum() < y.size:
        assert d.pooled == pytest.approx(roc_auc_score(y, score), abs=1e-12)
        assert S.auroc(score, y) == pytest.approx(d.pooled, abs=1e-12)
        within = d.within if d.n_within_pairs else 0.0
        between = d.between if d.n_between_pairs else 0.0
        assert d.pooled == pytest.approx(d.lam * within + (1 - d.lam) * between, abs=1e-12)
        wu, wn, bu, bn = _brute(group, score, y)
        assert (d.n_within_pairs, d.n_between_pairs) == (wn, bn)
        if wn:
            assert d.within == pytest.approx(wu / wn, abs=1e-12)
        if bn:
            assert d.between == pytest.approx(bu / bn, abs=1e-12)
    else:
        assert np.isnan(d.pooled) and np.isnan(d.lam)


def test_within_is_the_weighted_mean_of_per_group_aurocs():
    """Within AUROC over pairs = per-group AUROCs (scikit-learn's) weighted s_g * f_g; the
    failure-weighted one weights them f_g."""
    rng = np.random.default_rng(2)
    g = rng.integers(0, 12, 300)
    y = (rng.random(300) < 0.6).astype(int)
    s = rng.normal(size=300) + y * 0.3
    per_group = []  # (AUROC, successes, failures) of each group with both outcomes
    for gid in np.unique(g):
        m = g == gid
        n_s, n_f = int(y[m].sum()), int((1 - y[m]).sum())
        if n_s and n_f:
            per_group.append((roc_auc_score(y[m], s[m]), n_s, n_f))
    a, n_s, n_f = (np.array(c, dtype=float) for c in zip(*per_group, strict=True))
    d = S.decompose(g, s, y)
    assert d.n_groups_mixed == len(per_group)
    assert d.within == pytest.approx(np.average(a, weights=n_s * n_f))
    assert d.within_failure_weighted == pytest.approx(np.average(a, weights=n_f))


def test_bootstrap_fast_path_matches_generic_resampling():
    rng = np.random.default_rng(3)
    g = rng.integers(0, 9, 70).astype(str)
    y = (rng.random(70) < 0.5).astype(int)
    s1 = np.round(rng.normal(size=70), 1)
    s2 = S.loo_score(g, y)

    def stat(codes, a, b, yy):
        da, db = S.decompose(codes, a, yy), S.decompose(codes, b, yy)
        return [getattr(da, k) for k in S.DECOMPOSITION_STATS] + [da.pooled - db.pooled]

    generic = _cluster_bootstrap(g, stat, s1, s2, y, n_boot=150, seed=11)
    fast = S.bootstrap_decomposition(g, y, {"s1": s1, "loo": s2}, n_boot=150, seed=11, chunk=7)
    expect = np.column_stack(
        [fast.draws["s1"][k] for k in S.DECOMPOSITION_STATS]
        + [fast.difference("s1", "loo", "pooled")]
    )
    np.testing.assert_allclose(generic, expect, atol=1e-12, equal_nan=True)
    again = S.bootstrap_decomposition(g, y, {"s1": s1}, n_boot=150, seed=11)
    np.testing.assert_array_equal(again.draws["s1"]["pooled"], fast.draws["s1"]["pooled"])
    lo, hi = fast.interval("s1", "pooled")
    assert lo <= S.decompose(g, s1, y).pooled <= hi


def test_bootstrap_skips_single_class_draws():
    g = ["a", "a", "b", "b"]
    boot = S.bootstrap_decomposition(g, [1, 1, 0, 0], {"s": [1.0, 2, 0, 0]}, n_boot=200, seed=0)
    pooled = boot.draws["s"]["pooled"]
    assert np.isnan(pooled).any() and (pooled[np.isfinite(pooled)] == 1.0).all()
    assert boot.n_valid("s", "pooled") == int(np.isfinite(pooled).sum())
    assert all(np.isnan(S.percentile_interval([np.nan, np.nan])))
    assert S.percentile_interval([0.5, np.nan]) == (0.5, 0.5)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (29, 33), (1, 1)])
def test_binomial_intervals(k, n):
    """scipy's methods are the textbook intervals: Wilson's score interval and the exact
    Clopper-Pearson one (Beta quantiles); no rate, no interval."""
    z = norm.ppf(0.975)
    p = k / n
    centre, half = p + z * z / (2 * n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    wilson = ((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n))
    exact = (
        0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1),
        1.0 if k == n else beta.ppf(0.975, k + 1, n - k),
    )
    assert S.proportion_ci(k, n) == pytest.approx(wilson, abs=1e-12)
    assert S.proportion_ci(k, n, method="exact") == pytest.approx(exact, abs=1e-9)
    assert all(np.isnan(S.proportion_ci(0, 0)))


def test_input_validation():
    with pytest.raises(ValueError, match="binary"):
        S.decompose([1, 1, 2], [0.1, 0.2, 0.3], [0, 1, 2])
    with pytest.raises(ValueError, match="NaN"):
        S.decompose([1, 1], [0.1, np.nan], [0, 1])
    with pytest.raises(ValueError, match="rows"):
        S.decompose([1, 1, 1], [0.1, 0.2], [0, 1])
    with pytest.raises(ValueError, match="missing"):
        S.encode_groups(["a", None])


def test_bootstrap_with_coarser_clusters_matches_generic():
    rng = np.random.default_rng(4)
    n = 80
    problem = rng.integers(0, 8, n)
    model = rng.integers(0, 2, n)
    cell = problem * 10 + model
    y = (rng.random(n) < 0.5).astype(int)
    s = rng.normal(size=n)

    def stat(copy_id, c, ss, yy):
        d = S.decompose(copy_id * 1000 + c, ss, yy)
        return [getattr(d, k) for k in S.DECOMPOSITION_STATS]

    generic = _cluster_bootstrap(problem, stat, cell, s, y, n_boot=60, seed=9)
    fast = S.bootstrap_decomposition(cell, y, {"s": s}, n_boot=60, seed=9, cluster=problem)
    expect = np.column_stack([fast.draws["s"][k] for k in S.DECOMPOSITION_STATS])
    np.testing.assert_allclose(generic, expect, atol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="constant"):
        S.bootstrap_decomposition(problem, y, {"s": s}, n_boot=5, cluster=model)
