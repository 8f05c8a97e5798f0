"""The batched sampler as one fused MLX graph (Metal / CUDA devices): every row drawn at once.

One call handles all rows, with per-row parameters as arrays, so the per-token work does not
grow with the number of Python calls. The candidate set is mlx-lm's `make_sampler` order:
top-p on the FULL distribution (keep a token while the probability mass ranked above it is
< top_p), then min-p (p >= min_p * p_max), then the top-k of those; the survivors are drawn by
Gumbel-max (`keys`) at the given temperature. Temperature 0 is greedy (`argmax`, as mlx-lm's
`greedy_sampler`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from breakthrough.engine.sampling.keys import GOLDEN, U23, fmix32
from breakthrough.protocol import Sampling

if TYPE_CHECKING:  # for annotations only: mlx is imported where it runs
    import mlx.core as mx


def gumbel_noise(keys, ids):
    """Gumbel(0, 1) draws, one per (row key, token id): `keys` uint32 [n], `ids` int [n, K]."""
    import mlx.core as mx

    x = ids.astype(mx.uint32) * mx.array(GOLDEN, dtype=mx.uint32)
    x = fmix32(x ^ keys[:, None])
    u = ((x >> 9).astype(mx.float32) + 0.5) * U23  # in (0, 1), never 0 or 1
    return -mx.log(-mx.log(u))


@dataclass(frozen=True)
class RowParams:
    """Per-row sampling parameters as [n, 1] arrays (or scalars when all rows share them)."""

    temperature: mx.array | float
    top_p: mx.array | float
    min_p: mx.array | float
    top_k: mx.array | int
    k_max: int  # candidates to keep per row (max effective top-k; vocab when unbounded)
    greedy: mx.array | bool  # bool [n] (or a Python bool when all rows share it)
    any_sampled: bool
    all_greedy: bool


def row_params(samplings: Sequence[Sampling], vocab: int) -> RowParams:
    """Arrays of the rows' sampling parameters; scalars when every row shares one setting."""
    import mlx.core as mx

    first = samplings[0]
    ks = [s.top_k if 0 < s.top_k < vocab else vocab for s in samplings]
    greedy = [s.temperature <= 0 for s in samplings]
    sampled_k = [k for k, g in zip(ks, greedy, strict=True) if not g]
    k_max = max(sampled_k) if sampled_k else 1
    if all(s == first for s in samplings):
        return RowParams(
            first.temperature if first.temperature > 0 else 1.0,
            first.top_p,
            first.min_p,
            ks[0],
            k_max,
            greedy[0],
            not greedy[0],
            greedy[0],
        )

    def col(values, dtype):
        return mx.array(np.asarray(values)[:, None], dtype=dtype)

    return RowParams(
        temperature=col(
            [s.temperature if s.temperature > 0 else 1.0 for s in samplings], mx.float32
        ),
        top_p=col([s.top_p for s in samplings], mx.float32),
        min_p=col([s.min_p for s in samplings], mx.float32),
        top_k=col(ks, mx.int32),
        k_max=k_max,
        greedy=mx.array(greedy),
        any_sampled=not all(greedy),
        all_greedy=all(greedy),
    )


def candidate_mask(logits, lse, params: RowParams):
    """(ids, logprobs, keep) of each row's `k_max` most likely tokens, sorted by probability
    (descending); `keep` marks the tokens that survive top-p (on the full distribution), min-p
    and the row's own top-k."""
    import mlx.core as mx

    vocab = logits.shape[-1]
    k = params.k_max
    if k < vocab:
        idx = mx.argpartition(-logits, kth=k - 1, axis=-1)[..., :k]
        cand = mx.take_along_axis(logits, idx, axis=-1)
    else:
        idx = mx.broadcast_to(mx.arange(vocab), logits.shape)
        cand = logits
    order = mx.argsort(-cand, axis=-1)
    idx = mx.take_along_axis(idx, order, axis=-1)
    cand = mx.take_along_axis(cand, order, axis=-1) - lse
    keep = mx.arange(k)[None, :] < params.top_k
    probs = mx.exp(cand)
    mass_before = mx.cumsum(probs, axis=-1) - probs
    top_p, min_p = params.top_p, params.min_p
    if not isinstance(top_p, (int, float)):  # per-row values
        keep = keep & ((mass_before < top_p) | (top_p >= 1.0) | (top_p <= 0.0))
    elif 0.0 < top_p < 1.0:
        keep = keep & (mass_before < top_p)
    if not isinstance(min_p, (int, float)):
        floor = cand[..., :1] + mx.log(mx.maximum(min_p, 1e-30))
        keep = keep & ((cand >= floor) | (min_p <= 0.0))
    elif min_p > 0.0:
        keep = keep & (cand >= cand[..., :1] + float(np.log(min_p)))
    return idx, cand, keep


def candidates(logprobs, sampling: Sampling):
    """(ids, logprobs) of one setting's candidates for each row of `logprobs`, sorted by
    probability; filtered-out entries are -inf (for checks against mlx-lm's filters)."""
    import mlx.core as mx

    logits = logprobs.astype(mx.float32)
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    idx, cand, keep = candidate_mask(logits, lse, row_params([sampling], logits.shape[-1]))
    return idx, mx.where(keep, cand, -float("inf"))


def _full_stats(logits):
    """(log-sum-exp [n, 1], entropy [n]) of the full distribution of float32 logits [n, V]."""
    import mlx.core as mx

    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    p = mx.exp(logits - lse)
    ent = lse[:, 0] - mx.sum(p * logits, axis=-1)
    return lse, mx.maximum(ent, 0.0)


def sample_step(logits, keys, params: RowParams):
    """Draw one token per row of `logits` ([n, V]) and its statistics, lazily (one graph).

    keys: uint32 [n] from `row_keys` (row seed, token index). Returns (tokens uint32 [n],
    stats float32 [n, 3]: chosen log-prob, full-distribution entropy, sampling entropy)."""
    import mlx.core as mx

    logits = logits.astype(mx.float32)
    lse, ent = _full_stats(logits)
    greedy_tok = mx.argmax(logits, axis=-1).astype(mx.uint32)
    if params.all_greedy:
        tokens = greedy_tok
        s_ent = mx.zeros_like(ent)
    else:
        idx, cand, keep = candidate_mask(logits, lse, params)
        neg_inf = mx.array(-float("inf"), dtype=mx.float32)
        scaled = mx.where(keep, cand / params.temperature, neg_inf)
        choice = mx.argmax(scaled + gumbel_noise(keys, idx), axis=-1)
        tokens = mx.take_along_axis(idx, choice[:, None], axis=-1)[:, 0].astype(mx.uint32)
        logq = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
        s_ent = -mx.sum(mx.where(keep, mx.exp(logq) * logq, 0.0), axis=-1)
        if not (isinstance(params.greedy, bool) and not params.greedy):
            tokens = mx.where(params.greedy, greedy_tok, tokens)
            s_ent = mx.where(params.greedy, 0.0, s_ent)
    chosen = mx.take_along_axis(logits, tokens[:, None].astype(mx.int32), axis=-1)[:, 0] - lse[:, 0]
    return tokens, mx.stack([chosen, ent, s_ent], axis=1)


def top_logprobs(logits, k: int):
    """(ids int32 [n, k], log-probs float32 [n, k]) of each row's k most likely tokens of the full
    distribution, descending."""
    import mlx.core as mx

    logits = logits.astype(mx.float32)
    k = min(int(k), logits.shape[-1])
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    idx = mx.argpartition(-logits, kth=k - 1, axis=-1)[..., :k]
    vals = mx.take_along_axis(logits, idx, axis=-1)
    order = mx.argsort(-vals, axis=-1)
    idx = mx.take_along_axis(idx, order, axis=-1).astype(mx.int32)
    return idx, mx.take_along_axis(vals, order, axis=-1) - lse
