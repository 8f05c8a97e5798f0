"""The batched seeded sampler (engine/sampling/): mlx-lm's candidate set, the right
distribution, batch independence, exact per-token statistics."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.engine.sampling.keys import row_keys
from breakthrough.engine.sampling.mlx_path import candidates, row_params, sample_step, top_logprobs
from breakthrough.protocol import Sampling

GREEDY = Sampling(temperature=0.0)


def _logits(n: int, vocab: int = 400, seed: int = 0, scale: float = 2.0):
    import mlx.core as mx

    return mx.array(np.random.default_rng(seed).normal(size=(n, vocab)).astype(np.float32) * scale)


def _draw(logits, seeds, steps, samplings):
    import mlx.core as mx

    params = row_params(samplings, logits.shape[-1])
    tokens, stats = sample_step(logits, mx.array(row_keys(seeds, steps)), params)
    mx.eval(tokens, stats)
    return np.array(tokens), np.array(stats)


def test_row_keys_depend_on_seed_and_step_only():
    keys = row_keys([1, 1, 2, 2**32 + 1], [0, 1, 0, 0])
    assert keys.dtype == np.uint32
    assert len(set(keys[:3].tolist())) == 3
    assert keys[3] == keys[0]  # seeds are 32-bit
    assert np.array_equal(row_keys([5], [7]), row_keys([5], [7]))


def test_rows_are_batch_independent_with_mixed_settings():
    """Each row's token and statistics are the same alone and in a mixed batch (other seeds,
    greedy rows, other top-k / top-p / min-p / temperature)."""
    settings = [
        Sampling(),
        GREEDY,
        Sampling(top_k=5),
        Sampling(top_p=1.0, top_k=0),
        Sampling(temperature=1.3, min_p=0.05),
        Sampling(),
    ]
    logits = _logits(len(settings))
    seeds, steps = [11, 12, 13, 14, 15, 16], [0, 3, 9, 2, 1, 0]
    tokens, stats = _draw(logits, seeds, steps, settings)
    for i, s in enumerate(settings):
        t1, st1 = _draw(logits[i : i + 1], [seeds[i]], [steps[i]], [s])
        assert t1[0] == tokens[i]
        np.testing.assert_allclose(st1[0], stats[i], rtol=1e-6, atol=1e-6)
    # Two slots with the same logits, seed and token index draw the same token.
    same_logits = _logits(1)
    import mlx.core as mx

    both = mx.concatenate([same_logits, same_logits])
    t, _ = _draw(both, [1, 1], [0, 0], [Sampling()] * 2)
    assert t[0] == t[1]


def test_greedy_is_argmax_and_has_zero_sampling_entropy():
    logits = _logits(3, seed=1)
    tokens, stats = _draw(logits, [1, 2, 3], [0, 0, 0], [GREEDY] * 3)
    assert np.array_equal(tokens, np.argmax(np.array(logits), axis=-1))
    assert np.all(stats[:, 2] == 0.0)


def test_statistics_match_numpy():
    logits = _logits(4, seed=2)
    s = Sampling(temperature=0.7, top_p=0.9, top_k=12)
    tokens, stats = _draw(logits, [1, 2, 3, 4], [5, 6, 7, 8], [s] * 4)
    x = np.array(logits, dtype=np.float64)
    lp = (
        x
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - x.max(-1, keepdims=True)
    )
    p = np.exp(lp)
    np.testing.assert_allclose(stats[:, 0], lp[np.arange(4), tokens], atol=1e-4)
    np.testing.assert_allclose(stats[:, 1], -(p * lp).sum(-1), atol=1e-4)
    for r in range(4):
        order = np.argsort(-lp[r])[: s.top_k]
        mass_before = np.cumsum(p[r, order]) - p[r, order]
        kept = order[mass_before < s.top_p]
        assert tokens[r] in kept
        q = lp[r, kept] / s.temperature
        q = q - np.log(np.exp(q - q.max()).sum()) - q.max()
        np.testing.assert_allclose(stats[r, 2], -(np.exp(q) * q).sum(), atol=1e-4)


def test_draws_follow_the_sampling_distribution():
    """Over many token indices, Gumbel-max with hashed noise reproduces the softmax of the
    candidates' log-probs / temperature (and never leaves the candidate set)."""
    import mlx.core as mx

    n = 4000
    base = _logits(1, vocab=50, seed=3, scale=1.0)
    s = Sampling(temperature=0.8, top_p=0.9, top_k=8)
    tokens, _ = _draw(mx.broadcast_to(base, (n, 50)), [77] * n, list(range(n)), [s] * n)
    x = np.array(base[0], dtype=np.float64)
    lp = x - np.log(np.exp(x).sum())
    order = np.argsort(-lp)[: s.top_k]
    mass_before = np.cumsum(np.exp(lp[order])) - np.exp(lp[order])
    kept = order[mass_before < s.top_p]
    want = np.exp(lp[kept] / s.temperature)
    want /= want.sum()
    assert set(tokens.tolist()) <= set(kept.tolist())
    freq = np.array([(tokens == k).mean() for k in kept])
    assert np.abs(freq - want).max() < 0.03


@pytest.mark.parametrize(
    "top_p,top_k,min_p",
    [
        (0.95, 20, 0.0),
        (0.5, 20, 0.0),
        (0.95, 0, 0.0),
        (1.0, 5, 0.0),
        (1.0, 0, 0.1),
        (0.9, 10, 0.05),
    ],
)
def test_candidate_set_matches_mlx_lm_filters(top_p, top_k, min_p):
    """top-p on the full distribution, then min-p, then top-k: mlx-lm's make_sampler order."""
    import mlx.core as mx
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    for scale in (0.5, 2.0, 6.0):
        logits = _logits(3, vocab=500, seed=int(scale * 10), scale=scale)
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        ref = lp
        if 0 < top_p < 1:
            ref = apply_top_p(ref, top_p)
        if min_p > 0:
            ref = apply_min_p(ref, min_p)
        if top_k > 0:
            ref = apply_top_k(ref, top_k)
        idx, cand = candidates(lp, Sampling(top_p=top_p, top_k=top_k, min_p=min_p))
        for r in range(3):
            want = set(np.flatnonzero(np.isfinite(np.array(ref[r]))).tolist())
            got = set(np.array(idx[r])[np.isfinite(np.array(cand[r]))].tolist())
            assert got == want


def test_top_logprobs_are_the_full_distribution_top_k():
    logits = _logits(2, seed=4)
    ids, vals = top_logprobs(logits, 5)
    x = np.array(logits, dtype=np.float64)
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    want = np.argsort(-lp, axis=-1)[:, :5]
    assert np.array_equal(np.array(ids), want)
    np.testing.assert_allclose(np.array(vals), np.take_along_axis(lp, want, axis=-1), atol=1e-4)


@pytest.mark.parametrize(
    "sampling",
    [
        Sampling(),
        GREEDY,
        Sampling(top_k=0, top_p=0.9),
        Sampling(temperature=1.2, top_k=50, min_p=0.02),
    ],
)
def test_numpy_step_equals_mlx_step(sampling):
    """The CPU path (numpy, used on MLX's CPU device) and the MLX path draw the same tokens with
    the same statistics: one definition, two implementations."""
    from breakthrough.engine.sampling.numpy_stats import sample_step_np, top_logprobs_np

    logits = _logits(6, vocab=3000, seed=5, scale=3.0)
    seeds, steps = [3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5]
    tokens, stats = _draw(logits, seeds, steps, [sampling] * 6)
    tok_np, stats_np = sample_step_np(np.array(logits), row_keys(seeds, steps), [sampling] * 6)
    assert np.array_equal(tok_np, tokens)
    np.testing.assert_allclose(stats_np, stats, atol=2e-4)
    ids, vals = top_logprobs(logits, 7)
    ids_np, vals_np = top_logprobs_np(np.array(logits), 7)
    assert np.array_equal(np.array(ids), ids_np)
    np.testing.assert_allclose(np.array(vals), vals_np, atol=1e-4)


def test_chunked_top_candidates_are_the_top_k():
    from breakthrough.engine.sampling.numpy_search import top_candidates

    rng = np.random.default_rng(6)
    x = rng.normal(size=(5, 49152)).astype(np.float32)
    x[1] *= 0.01  # nearly flat
    x[2, :300] += 20.0  # the top in one chunk
    x[3] = np.round(x[3])  # many ties
    for k in (1, 20, 64):
        got = top_candidates(x, k)
        for r in range(5):
            kth = np.sort(x[r])[-k]
            assert len(set(got[r].tolist())) == k and np.all(x[r, got[r]] >= kth)


def _top_p_keep_by_definition(row: np.ndarray, k: int, top_p: float) -> np.ndarray:
    """mlx-lm's order in float64 from the full row: the k most likely tokens, each kept while
    the probability mass ranked above it is < top_p."""
    x = row.astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    srt = np.sort(p)[::-1][:k]
    return (np.cumsum(srt) - srt) < top_p


@pytest.mark.parametrize("top1_mass", [0.5, 0.90, 0.9499, 0.9501, 0.99])
def test_top_p_decided_from_group_bounds_or_the_exact_mass(monkeypatch, top1_mass):
    """The numpy draw decides top-p from bounds on the vocabulary's mass and computes the exact
    mass only for rows whose bounds straddle the cut; either way the kept set is the
    definition's. Flat rows are decided by the bounds alone; a row whose top token holds
    ~0.95 of the mass (the protocol's top_p) needs the exact mass."""
    from breakthrough.engine.sampling import numpy_draw as D

    vocab, k = 49152, 20
    rng = np.random.default_rng(11)
    row = rng.normal(size=vocab).astype(np.float32)
    rest = np.exp(row.astype(np.float64)).sum()
    row[123] = np.float32(np.log(top1_mass / (1 - top1_mass) * rest))  # p(123) = top1_mass
    flat = rng.normal(size=(3, vocab)).astype(np.float32) * np.float32([[0.3], [1.0], [2.0]])
    calls = []
    exact = D._exact_mass
    monkeypatch.setattr(D, "_exact_mass", lambda xs, top: calls.append(len(xs)) or exact(xs, top))
    sampling = Sampling(temperature=0.6, top_p=0.95, top_k=k)
    for x in (flat, np.concatenate([flat, row[None]])):
        calls.clear()
        n = len(x)
        draw = D.draw_np(x, row_keys(range(n), [0] * n), D.row_settings_np([sampling] * n, vocab))
        for r in range(n):
            kept = np.isfinite(draw.scaled[r])
            assert np.array_equal(kept, _top_p_keep_by_definition(x[r], k, 0.95)), r
        if n == 3:
            assert calls == []  # flat rows: the bounds decide
        elif abs(top1_mass - 0.95) < 1e-3:
            assert calls == [1]  # only the borderline row pays for the exact mass


@pytest.mark.parametrize("greedy_rows", [0, 2])
def test_statistics_reuse_the_draws_exact_mass_exps_bit_for_bit(greedy_rows):
    """Issue 22: rows whose top-p cut needs the exact mass have their exp(x - max) computed by
    the draw (on the next forward's path); the statistics reuse them (`Draw.exps`) instead of a
    second exp pass, and every number is bit-identical to computing them afresh."""
    from breakthrough.engine.sampling import numpy_draw as D
    from breakthrough.engine.sampling.numpy_stats import draw_stats_np

    vocab, k, n = 49152, 20, 7
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, vocab)).astype(np.float32)
    for r in range(0, n, 2):  # rows whose top token holds ~0.95 of the mass: borderline cuts
        rest = np.exp(x[r].astype(np.float64)).sum()
        x[r, 17 * r] = np.float32(np.log(0.9499 / (1 - 0.9499) * rest))
    samplings = [Sampling(temperature=0.0)] * greedy_rows + [
        Sampling(temperature=0.6, top_p=0.95, top_k=k)
    ] * (n - greedy_rows)
    settings = D.row_settings_np(samplings, vocab)
    draw = D.draw_np(x, row_keys(range(n), [0] * n), settings)
    assert draw.exps is not None and len(draw.exps[0]) >= 2
    fresh = D.Draw(draw.tokens, draw.sampled, draw.scaled, draw.top_ids)
    for keep in (False, True):
        got, full = draw_stats_np(x, draw, settings.k, keep_probs=keep)
        want, want_full = draw_stats_np(x, fresh, settings.k, keep_probs=keep)
        assert np.array_equal(got, want)
        assert np.array_equal(full.lse, want_full.lse) and np.array_equal(
            full.entropy, want_full.entropy
        )
        assert (full.probs is None) == (not keep) and (
            not keep or np.array_equal(full.probs, want_full.probs)
        )


def test_uniform_draw_never_reaches_one():
    """The Gumbel draw -log(-log u) is finite for every hash value: u < 1 even for the largest
    one (v1's 24-bit draw rounded it to 1.0 in float32, a +inf that could pick a filtered
    token)."""
    from breakthrough.engine.sampling.keys import U23

    h = np.array([0, 0xFFFFFFFF, 0xFFFFFE00, 0x1FF], dtype=np.uint32)
    u = ((h >> 9).astype(np.float32) + 0.5) * np.float32(U23)
    assert np.all(u > 0) and np.all(u < 1)
    assert np.all(np.isfinite(-np.log(-np.log(u))))


@pytest.mark.parametrize("rows", [1, 3, 7])
def test_full_distribution_blocks_equal_float64_and_each_row_alone(rows):
    """`full_distribution_np` works through the rows in blocks (`_STATS_BLOCK`) with float32
    sums: on a real-size vocabulary its log-sum-exp, entropy and kept probabilities equal a
    float64 computation, for row counts that do not fill the last block, and every row's values
    are bit-identical to that row computed alone (the batch must not change a row's numbers)."""
    from breakthrough.engine.sampling.numpy_stats import full_distribution_np

    x = np.asarray(_logits(rows, vocab=49_152, seed=11, scale=3.0))
    full = full_distribution_np(x, keep_probs=True)
    x64 = x.astype(np.float64)
    lse = np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1, keepdims=True)) + x64.max(
        -1, keepdims=True
    )
    p = np.exp(x64 - lse)
    np.testing.assert_allclose(full.lse, lse, rtol=0, atol=2e-5)
    np.testing.assert_allclose(full.entropy, -(p * (x64 - lse)).sum(-1), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(full.probs, p, rtol=1e-4, atol=1e-9)
    assert full.probs.shape == x.shape and full.tops == {}
    for r in range(rows):
        alone = full_distribution_np(x[r : r + 1], keep_probs=True)
        assert alone.lse[0, 0] == full.lse[r, 0] and alone.entropy[0] == full.entropy[r]
        assert np.array_equal(alone.probs[0], full.probs[r])
    assert full_distribution_np(x).probs is None  # only kept when asked for
