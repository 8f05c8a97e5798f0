"""One batched sampler per decode step: every row of the batch drawn in one fused MLX graph.

Why: drawing each row in its own Python call (own key, top-k partition, sort, cumsum, Gumbel
draw) made the per-token overhead grow with the batch, so batching the forward pass gained
little (issue 15). Here one call handles all rows, with per-row parameters as arrays.

Randomness is counter-based and keyed by the row's identity, never by its batch slot: the noise
for token id v at generated-token index k of a row with seed s is
    h = fmix32(row_key(s, k) ^ v * 0x9E3779B1),  u = ((h >> 9) + 1/2) / 2**23,
    g = -log(-log(u))   (a Gumbel draw)
(`fmix32` is MurmurHash3's 32-bit finaliser; `row_key` mixes s and k the same way on the host).
A row's draw therefore depends only on (seed, k, its own logits): the same alone and in any
batch, and the same whether its prompt came from a reused cache or a fresh prefill.

The candidate set is mlx-lm's `make_sampler` order: top-p on the FULL distribution (keep a
token while the probability mass ranked above it is < top_p), then min-p (p >= min_p * p_max),
then the top-k of those; the survivors are drawn by Gumbel-max at the given temperature.
Temperature 0 is greedy (`argmax`, as mlx-lm's `greedy_sampler`).

Per token, in the same graph: the chosen token's log-prob and the entropy of the model's full
next-token distribution (temperature 1, before any filter), and the entropy of the distribution
the token was drawn from (0 for greedy rows). With instrumentation (`token_signals*`), also the
protocol 2.2 per-token fields (SIGNAL_FIELDS) from the same logits: no second forward pass."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from breakthrough.protocol import Sampling

SAMPLER_ID = "gumbel-fmix32-v2"
"""Names the randomness scheme; part of the engine identity (a run never mixes two schemes)."""

_GOLDEN = 0x9E3779B1
_STEP_MUL = 0x85EBCA77
_SEED_SALT = 0x7F4A7C15
_U23 = float(2.0**-23)
# The uniform draw uses the hash's top 23 bits: (j + 0.5) / 2**23 is exact in float32 and lies in
# (0, 1). (v1 used 24 bits, where (2**24 - 0.5) / 2**24 rounds to 1.0 in float32: a Gumbel draw
# of +inf, about once in 2**24 candidates, that could pick a filtered-out token.)


def fmix32(x):
    """MurmurHash3's finaliser on uint32 arrays (numpy or MLX: both wrap on overflow)."""
    x = x ^ (x >> 16)
    x = x * 0x85EBCA6B
    x = x ^ (x >> 13)
    x = x * 0xC2B2AE35
    return x ^ (x >> 16)


def row_keys(seeds: Sequence[int], steps: Sequence[int]) -> np.ndarray:
    """uint32 key per row for its token `steps[i]` (host side, n values per step)."""
    s = np.asarray(seeds, dtype=np.uint64).astype(np.uint32)
    k = np.asarray(steps, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):
        return fmix32(fmix32(s ^ np.uint32(_SEED_SALT)) ^ (k * np.uint32(_STEP_MUL)))


def gumbel_noise(keys, ids):
    """Gumbel(0, 1) draws, one per (row key, token id): `keys` uint32 [n], `ids` int [n, K]."""
    import mlx.core as mx

    x = ids.astype(mx.uint32) * mx.array(_GOLDEN, dtype=mx.uint32)
    x = fmix32(x ^ keys[:, None])
    u = ((x >> 9).astype(mx.float32) + 0.5) * _U23  # in (0, 1), never 0 or 1
    return -mx.log(-mx.log(u))


@dataclass(frozen=True)
class RowParams:
    """Per-row sampling parameters as [n, 1] arrays (or scalars when all rows share them)."""

    temperature: object
    top_p: object
    min_p: object
    top_k: object
    k_max: int  # candidates to keep per row (max effective top-k; vocab when unbounded)
    greedy: object  # bool [n] (or a Python bool when all rows share it)
    any_sampled: bool
    all_greedy: bool


def row_params(samplings: Sequence[Sampling], vocab: int) -> RowParams:
    """Arrays of the rows' sampling parameters; scalars when every row shares one setting."""
    import mlx.core as mx

    first = samplings[0]
    ks = [s.top_k if 0 < s.top_k < vocab else vocab for s in samplings]
    greedy = [s.temperature <= 0 for s in samplings]
    sampled_k = [k for k, g in zip(ks, greedy) if not g]
    k_max = max(sampled_k) if sampled_k else 1
    if all(s == first for s in samplings):
        return RowParams(first.temperature if first.temperature > 0 else 1.0, first.top_p,
                         first.min_p, ks[0], k_max, greedy[0], not greedy[0], greedy[0])

    def col(values, dtype):
        return mx.array(np.asarray(values)[:, None], dtype=dtype)

    return RowParams(
        temperature=col([s.temperature if s.temperature > 0 else 1.0 for s in samplings], mx.float32),
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


# --------------------------------------------------------------------------------------------
# The same sampler in numpy, for MLX's CPU device: MLX's CPU transcendental and selection ops
# are scalar (measured: exp over 32 x 49,152 floats 40 ms, numpy 0.5 ms; argpartition 34 ms),
# so on CPU the step's vocabulary-sized work is done in numpy on a view of the logits.

_STATS_BLOCK = 4
"""Rows per block of `full_distribution_np`: the block's temporaries (2 x 4 rows of a
49,152-token vocabulary, 1.5 MB) are reused instead of allocating [n, V] arrays per pass. With
float32 row sums (numpy's pairwise sum, no float64 cast pass) the statistics job at batch 32 on
the tiny model went 2.2 -> 1.7 ms, and the forward it runs beside is lengthened by 1.4-1.9 ms
instead of 2.1-3.1 ms (`bench/decode_profile.py --beside`). Blocks of 1 to 8 rows measured the
same; all 32 rows at once was slower."""


class FullDistribution(NamedTuple):
    """One step's full next-token distributions (temperature 1, no filter), per row."""

    lse: np.ndarray  # float32 [n, 1]: log-sum-exp of the logits
    entropy: np.ndarray  # float32 [n], nats
    tops: dict  # {k: top-k candidate ids [n, k] of all rows}, filled by whoever searches first
    probs: np.ndarray | None = None  # float32 [n, V]: the probabilities, when asked for


def full_distribution_np(x: np.ndarray, keep_probs: bool = False,
                         exps: tuple[np.ndarray, np.ndarray] | None = None) -> FullDistribution:
    """The `FullDistribution` of float32 logits x [n, V]: computed once per step, shared by the
    sampler's statistics and the instrumentation (the candidate search too: `_top_candidates`
    caches it per k in `tops`, the same ids whoever asks first).

    The entropy is log S - sum(e (x - max)) / S with e = exp(x - max): relative to the max, so
    that no two large numbers cancel in float32. Rows go through in blocks of `_STATS_BLOCK`
    whose temporaries stay in cache, and every sum is numpy's pairwise sum of one row, so a
    row's values do not depend on the batch it is in. `keep_probs`: also keep e / S (the
    instrumentation's p) from the block while it is in cache, instead of a second exp pass.
    `exps`: (row indices, e [r, V]) of rows whose e = exp(x - max) the sampler already computed
    (`Draw.exps`: its exact top-p mass), used instead of a second exp pass over them; the same
    values either way."""
    n, vocab = x.shape
    m = x.max(-1, keepdims=True)
    s = np.empty(n, dtype=np.float32)
    t = np.empty(n, dtype=np.float32)
    probs = np.empty((n, vocab), dtype=np.float32) if keep_probs else None
    todo = np.arange(n)
    if exps is not None and len(exps[0]):
        have, e = exps
        d = x[have] - m[have]
        s[have] = e.sum(-1)
        t[have] = np.multiply(d, e, out=d).sum(-1)
        if probs is not None:
            probs[have] = e / s[have, None]
        todo = np.setdiff1d(todo, have)
    rows = max(1, min(len(todo), _STATS_BLOCK))
    d_buf = np.empty((rows, vocab), dtype=np.float32)
    e_buf = np.empty((rows, vocab), dtype=np.float32)
    contiguous = len(todo) == n  # no reused rows: plain slices, the probabilities written in place
    for a in range(0, len(todo), rows):
        sel = slice(a, a + rows) if contiguous else todo[a : a + rows]
        block = x[sel]
        d = np.subtract(block, m[sel], out=d_buf[: len(block)])
        e = np.exp(d, out=e_buf[: len(block)])
        s[sel] = e.sum(-1)
        t[sel] = np.multiply(d, e, out=d).sum(-1)
        if probs is not None and contiguous:
            np.divide(e, s[sel, None], out=probs[sel])
        elif probs is not None:
            probs[sel] = e / s[sel, None]
    log_s = np.log(s)
    ent = np.maximum(log_s - t / s, 0.0)
    return FullDistribution(m + log_s[:, None], ent, {}, probs)


def _top_candidates(x: np.ndarray, k: int, tops: dict | None) -> np.ndarray:
    """`_top_candidates_np(x, k)` of all rows of x, cached in `tops` (one search per step)."""
    if tops is None:
        return _top_candidates_np(x, k)
    if k not in tops:
        tops[k] = _top_candidates_np(x, k)
    return tops[k]


@dataclass(frozen=True)
class RowSettingsNp:
    """The rows' sampling settings as numpy columns, built once per batch composition."""

    sampled: np.ndarray  # indices of the rows drawn by sampling (temperature > 0)
    k: int  # candidates per sampled row: the largest effective top-k (vocab when unbounded)
    ks: np.ndarray  # int [r, 1] each sampled row's own top-k
    top_p: np.ndarray  # float32 [r, 1]
    min_p: np.ndarray  # float32 [r, 1]
    temperature: np.ndarray  # float32 [r, 1]
    all_sampled: bool


def row_settings_np(samplings: Sequence[Sampling], vocab: int) -> RowSettingsNp:
    """`RowSettingsNp` of rows with these samplings over a vocabulary of `vocab` tokens."""
    sampled = [r for r, sm in enumerate(samplings) if sm.temperature > 0]
    chosen = [samplings[r] for r in sampled]
    ks = [sm.top_k if 0 < sm.top_k < vocab else vocab for sm in chosen]

    def col(values, dtype):
        return np.asarray(values, dtype=dtype).reshape(-1, 1)

    return RowSettingsNp(
        sampled=np.asarray(sampled, dtype=np.int64), k=max(ks) if ks else 0,
        ks=col(ks, np.int64), top_p=col([sm.top_p for sm in chosen], np.float32),
        min_p=col([sm.min_p for sm in chosen], np.float32),
        temperature=col([sm.temperature for sm in chosen], np.float32),
        all_sampled=len(sampled) == len(samplings))


_SEARCH_CHUNK = 64
_BOUND_SLACK = 1e-5  # relative margin under which a top-p bound is not trusted (float rounding)


def _chunked_top(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Search the k largest entries of each row of x [n, V] (k < V) through group maxima.

    The first G * W columns (W = _SEARCH_CHUNK, G = V // W) form G groups of W columns,
    group g = columns g, g + G, g + 2G, ... (strided, so the group maxima are W elementwise
    maxima of contiguous slices, not G short reductions); the last V - G * W columns are always
    searched. Returns (ids [n, k] unsorted, row max [n, 1], lower [n], upper [n], others) where,
    with S = sum_v exp(x_v - max) and S_k its part over the k ids: S_k + lower <= S <= S_k +
    upper + others * (the k-th largest probability, relative to the max). Why: the k largest
    entries lie in the k groups with the largest maxima, so only those are partitioned, and the
    other groups' maxima bound the rest of the mass from both sides without a pass of exp over
    the vocabulary (the sampler's top-p needs S only when the bounds straddle its cut)."""
    n, vocab = x.shape
    w = _SEARCH_CHUNK
    groups = vocab // w
    rows = np.arange(n)[:, None]
    body = x[:, : groups * w].reshape(n, w, groups)
    gmax = body.max(axis=1)  # [n, groups]
    best = np.argpartition(-gmax, k - 1, axis=-1)[:, :k]  # [n, k]
    cols = (np.arange(w)[None, None, :] * groups + best[:, :, None]).reshape(n, k * w)
    vals = np.take(np.ascontiguousarray(x).ravel(), cols + rows * vocab)
    if groups * w < vocab:
        rest = vocab - groups * w
        vals = np.concatenate([vals, x[:, groups * w:]], axis=1)
        cols = np.concatenate([cols, np.broadcast_to(np.arange(groups * w, vocab), (n, rest))], axis=1)
    pick = np.argpartition(-vals, k - 1, axis=-1)[:, :k]
    ids = np.take_along_axis(cols, pick, axis=-1)
    top = vals.max(-1, keepdims=True)
    outside = gmax.copy()
    outside[rows, best] = -np.inf
    with np.errstate(under="ignore"):
        mass = np.exp(outside - top).sum(-1)  # one entry (the max) of each unsearched group
    return ids, top, mass, mass * w, vals.shape[1] - k


def _candidate_search(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, tuple | None]:
    """(ids [n, k] of each row's k largest entries, unsorted; row max [n, 1]; the mass bounds of
    `_chunked_top` as (lower, upper, others), or None where the search was not by groups: the
    whole vocabulary (k >= V), or too few groups for k (a plain partition))."""
    vocab = x.shape[1]
    if k >= vocab:
        return np.broadcast_to(np.arange(vocab), x.shape), x.max(-1, keepdims=True), None
    if 2 * k > vocab // _SEARCH_CHUNK:
        return np.argpartition(-x, k - 1, axis=-1)[:, :k], x.max(-1, keepdims=True), None
    ids, top, lower, upper, others = _chunked_top(x, k)
    return ids, top, (lower, upper, others)


def _top_candidates_np(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest entries of each row of x [n, V], unsorted (all ids when k >= V)."""
    return _candidate_search(x, k)[0]


@dataclass
class Draw:
    """One step's drawn tokens and what its statistics need from the draw."""

    tokens: np.ndarray  # int64 [n]
    sampled: np.ndarray  # indices of the rows drawn by sampling
    scaled: np.ndarray | None  # float32 [r, k]: kept candidates' temperature-scaled logits, -inf for the rest
    top_ids: np.ndarray | None  # int [n, k]: every row's top-k candidate ids (all rows sampled), for reuse
    # (row indices [r], exp(x - max) float32 [r, V]) of the rows whose exact top-p mass the draw
    # computed: the statistics reuse them instead of a second exp pass (full_distribution_np)
    exps: tuple[np.ndarray, np.ndarray] | None = None


_SPLIT_MIN = 1 << 18  # entries below which one thread computes the exact mass alone


_HELPER: ThreadPoolExecutor | None = None


def _helper() -> ThreadPoolExecutor:
    """The one thread that computes half of `_exact_mass` for the draw (its own, not
    batch_step's statistics worker: that one may still be busy with the previous step's
    statistics when the draw runs)."""
    global _HELPER
    if _HELPER is None:
        _HELPER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bt-draw-exp")
    return _HELPER


def _mass_rows(e: np.ndarray, x: np.ndarray, top: np.ndarray, mass: np.ndarray) -> None:
    np.subtract(x, top, out=e)
    np.exp(e, out=e)
    e.sum(-1, dtype=np.float64, out=mass)


def _exact_mass(x: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S = sum_v exp(x_v - top) of each row of x [r, V] (float64 accumulation), the exp values
    e [r, V] float32, which the step's statistics reuse: `Draw.exps`). The rows are split
    between this thread and a helper (numpy releases the GIL in its loops): the draw runs while
    the forward pass waits for its tokens, so the second core is idle then, and this exp pass
    is most of a draw whose top-p cut the bounds leave open (a row's values are the same
    whichever thread computes them)."""
    r = len(x)
    e = np.empty(x.shape, dtype=np.float32)
    mass = np.empty(r, dtype=np.float64)
    if r < 2 or x.size < _SPLIT_MIN:
        _mass_rows(e, x, top, mass)
        return mass, e
    h = r // 2
    other = _helper().submit(_mass_rows, e[h:], x[h:], top[h:], mass[h:])
    _mass_rows(e[:h], x[:h], top[:h], mass[:h])
    other.result()
    return mass, e


def draw_np(x: np.ndarray, keys: np.ndarray, settings: RowSettingsNp) -> Draw:
    """The tokens of one step on float32 logits x [n, V]: the part of `sample_step_np` the next
    forward pass waits for (candidates, filters, hashed Gumbel-max). Every quantity is per row,
    so a row's token is the same alone and in any batch."""
    n, vocab = x.shape
    if not len(settings.sampled):
        return Draw(x.argmax(-1), settings.sampled, None, None)
    # greedy rows take the argmax; sampled rows are filled below (no pass when all are sampled)
    tokens = np.empty(n, dtype=np.int64) if settings.all_sampled else x.argmax(-1)
    rows = settings.sampled
    xs = x if settings.all_sampled else x[rows]
    k = settings.k
    exps = None
    idx, top, bounds = _candidate_search(xs, k)
    cand = np.take_along_axis(xs, idx, axis=-1)
    order = np.argsort(-cand, axis=-1, kind="stable")
    idx = np.take_along_axis(idx, order, axis=-1)
    rel = np.take_along_axis(cand, order, axis=-1) - top  # log-probs + lse - max
    keep = np.arange(k)[None, :] < settings.ks
    top_p = settings.top_p
    cut = (top_p > 0.0) & (top_p < 1.0)
    if cut.any():
        # Top-p on the full distribution: keep a token while the mass ranked above it is
        # < top_p, i.e. before < top_p * S with S the row's whole (max-relative) mass.
        probs = np.exp(rel)
        before = np.cumsum(probs, axis=-1) - probs
        limit = top_p.astype(np.float64)
        if bounds is None:
            if k >= vocab:
                mass = probs.sum(-1)
            else:
                mass, e = _exact_mass(xs, top)
                exps = (rows, e)
            keep &= (before < limit * mass[:, None]) | ~cut
        else:
            lower, upper, others = bounds
            known = probs.sum(-1)
            lo = (known + lower)[:, None] * limit
            hi = (known + upper + others * probs[:, -1])[:, None] * limit
            sure_keep = before < lo * (1.0 - _BOUND_SLACK)
            sure_drop = before >= hi * (1.0 + _BOUND_SLACK)
            unsure = (~sure_keep & ~sure_drop & keep & cut).any(-1)
            decided = sure_keep
            if unsure.any():
                u = np.flatnonzero(unsure)
                mass, e = _exact_mass(xs[u], top[u])
                exps = (rows[u], e)
                decided = decided.copy()
                decided[u] = before[u] < limit[u] * mass[:, None]
            keep &= decided | ~cut
    min_p = settings.min_p
    if (min_p > 0).any():
        with np.errstate(divide="ignore"):
            floor = rel[:, :1] + np.log(min_p)
        keep &= (rel >= floor) | (min_p <= 0.0)
    scaled = np.where(keep, rel / settings.temperature, -np.inf).astype(np.float32)
    with np.errstate(over="ignore"):
        h = fmix32((idx.astype(np.uint32) * np.uint32(_GOLDEN)) ^ keys[rows][:, None])
    u01 = ((h >> 9).astype(np.float32) + 0.5) * np.float32(_U23)
    choice = np.argmax(scaled - np.log(-np.log(u01)), axis=-1)
    tokens[rows] = idx[np.arange(len(rows)), choice]
    top_ids = idx if settings.all_sampled and k < vocab else None
    return Draw(tokens, rows, scaled, top_ids, exps)


def draw_stats_np(x: np.ndarray, draw: Draw, k: int = 0,
                  keep_probs: bool = False) -> tuple[np.ndarray, FullDistribution]:
    """(stats float32 [n, 3]: chosen log-prob, full entropy, sampling entropy; the step's
    `full_distribution_np` tuple) of a `Draw` on logits x: the part of the step that nothing
    waits for (run beside the next forward pass). `k`: the draw's candidate count, so that the
    instrumentation reuses its top-k ids; `keep_probs`: keep the probabilities for it too."""
    n = x.shape[0]
    full = full_distribution_np(x, keep_probs, draw.exps)
    if draw.top_ids is not None and k:
        full.tops[k] = draw.top_ids
    lse, ent = full.lse, full.entropy
    s_ent = np.zeros(n, dtype=np.float32)
    if draw.scaled is not None:
        scaled = draw.scaled
        top = scaled.max(-1, keepdims=True)
        logq = scaled - (top + np.log(np.exp(scaled - top).sum(-1, keepdims=True)))
        with np.errstate(invalid="ignore"):
            s_ent[draw.sampled] = -np.where(np.isfinite(scaled), np.exp(logq) * logq, 0.0).sum(-1)
    chosen = x[np.arange(n), draw.tokens] - lse[:, 0]
    return np.stack([chosen, ent, s_ent], axis=1).astype(np.float32), full


def sample_step_np(logits: np.ndarray, keys: np.ndarray, samplings: Sequence[Sampling]):
    """`sample_step` on a float32 numpy array [n, V] (MLX's CPU device); the same definition:
    same candidate set, same hashed Gumbel noise. Returns (tokens int64 [n], stats [n, 3])."""
    x = np.asarray(logits, dtype=np.float32)
    settings = row_settings_np(samplings, x.shape[1])
    draw = draw_np(x, keys, settings)
    stats, _ = draw_stats_np(x, draw, settings.k)
    return draw.tokens, stats


def top_logprobs_np(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`top_logprobs` in numpy: (ids int32 [n, k], log-probs float32 [n, k]), descending."""
    x = np.asarray(logits, dtype=np.float32)
    k = min(int(k), x.shape[-1])
    m = x.max(-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(-1, keepdims=True))
    idx = _top_candidates_np(x, k)
    vals = np.take_along_axis(x, idx, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return (np.take_along_axis(idx, order, axis=-1).astype(np.int32),
            (np.take_along_axis(vals, order, axis=-1) - lse).astype(np.float32))


# --------------------------------------------------------------------------------------------
# Per-token instrumentation (protocol 2.2), from the logits the step already has: no second
# forward pass. Every field is of the model's FULL next-token distribution p_t (temperature 1,
# before any filter), like `entropies`; the transition fields compare p_t with the previous
# step's distribution p_{t-1} of the same row (NaN for a row's first token).

SIGNAL_FIELDS: tuple[str, ...] = (
    "normalized_entropy",  # entropy / ln|V|
    "top1_top2_logit_margin",  # logit_1 - logit_2
    "top1_top2_probability_margin",  # p_1 - p_2
    "top1_probability",  # p_1
    "top5_probability_mass",  # p_1 + ... + p_5
    "probability_tail_mass",  # 1 - (mass of the TAIL_K most likely tokens)
    "effective_vocabulary_size",  # exp(entropy)
    "surprisal",  # -log p(sampled token)
    "sampled_token_regret",  # log p_1 - log p(sampled token): 0 when the most likely was drawn
    "successive_kl_divergence",  # KL(p_t || p_{t-1}), nats
    "successive_js_divergence",  # JS(p_t, p_{t-1}), nats
)
"""Names (and order) of the instrumentation columns; protocol 2.2's token_metrics names.
(Entropy and the sampled log-prob are GenResult.entropies / logprobs.)"""

TAIL_K = 20
"""The tail is what lies outside the protocol's sampling top-k (protocol 1.4: top_k = 20)."""


def token_signals_np(x: np.ndarray, tokens: np.ndarray, prev: Sequence,
                     full: FullDistribution | None = None) -> tuple[np.ndarray, list]:
    """The SIGNAL_FIELDS of each row of float32 logits `x` [n, V] whose sampled tokens are
    `tokens` [n]; `prev[i]` is what this function returned as row i's state at the previous
    step, or None. `full`: `full_distribution_np(x)` when already computed.
    Returns (signals float32 [n, F], per-row states to pass back at the next step).

    Transitions with one vocabulary-sized log per row: with H the entropies and x' the previous
    logits, KL(p||q) = -H(p) - sum p x' + lse(x') and JS(p, q) = H(m) - (H(p) + H(q)) / 2,
    m = (p + q) / 2, where H(m) = log 2 - (1/2) sum (p + q) log(p + q). The same definition as
    `token_signals` (MLX), in numpy for MLX's CPU device."""
    x = np.asarray(x, dtype=np.float32)
    n, vocab = x.shape
    full = full if full is not None else full_distribution_np(x, keep_probs=True)
    lse, ent, tops = full.lse, full.entropy, full.tops
    p = full.probs if full.probs is not None else np.exp(x - lse)
    k = min(max(TAIL_K, 5), vocab)
    top = _top_candidates(x, k, tops)
    tl = -np.sort(-np.take_along_axis(x, top, axis=-1), axis=-1)
    tp = np.exp(tl - lse)
    out = np.full((n, len(SIGNAL_FIELDS)), np.nan, dtype=np.float32)
    out[:, 0] = ent / np.log(vocab)
    out[:, 1] = tl[:, 0] - tl[:, 1]
    out[:, 2] = tp[:, 0] - tp[:, 1]
    out[:, 3] = tp[:, 0]
    out[:, 4] = tp[:, :5].sum(-1)
    out[:, 5] = np.maximum(1.0 - tp[:, :TAIL_K].sum(-1), 0.0)
    out[:, 6] = np.exp(ent)
    chosen = x[np.arange(n), np.asarray(tokens, dtype=np.int64)]
    out[:, 7] = lse[:, 0] - chosen
    out[:, 8] = np.maximum(tl[:, 0] - chosen, 0.0)
    states = []
    for i in range(n):
        states.append((p[i], x[i], float(lse[i, 0]), float(ent[i])))
        if prev[i] is None or prev[i][0].shape[0] != vocab:
            continue
        q, x_q, lse_q, h_q = prev[i]
        out[i, 9] = max(-float(ent[i]) - float(np.dot(p[i], x_q)) + lse_q, 0.0)
        pq = p[i] + q
        pq += np.float32(1e-30)  # log(0) guard (exp underflow); shifts JS by < 1e-27 nats
        h_mid = float(np.log(2.0)) - 0.5 * float(np.dot(pq, np.log(pq)))
        out[i, 10] = max(h_mid - 0.5 * (float(ent[i]) + h_q), 0.0)
    return out, states


def token_signals(logits, tokens, prev):
    """`token_signals_np` in MLX (Metal / CUDA devices), lazily: logits [n, V], tokens [n],
    prev an [n, V] array of previous log-distributions (rows without one: all zeros, flagged by
    `has_prev`) or None. Returns (signals [n, F], log-distributions [n, V])."""
    import mlx.core as mx

    x = logits.astype(mx.float32)
    vocab = x.shape[-1]
    logp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    p = mx.exp(logp)
    ent = mx.maximum(-mx.sum(p * logp, axis=-1), 0.0)
    k = min(max(TAIL_K, 5), vocab)
    tl = mx.sort(mx.topk(x, k, axis=-1), axis=-1)[:, ::-1]
    tp = mx.exp(tl - (x - logp)[:, :1])
    cols = [ent / float(np.log(vocab)), tl[:, 0] - tl[:, 1], tp[:, 0] - tp[:, 1], tp[:, 0],
            mx.sum(tp[:, :5], axis=-1), mx.maximum(1.0 - mx.sum(tp[:, :TAIL_K], axis=-1), 0.0),
            mx.exp(ent),
            -mx.take_along_axis(logp, tokens[:, None].astype(mx.int32), axis=-1)[:, 0]]
    cols.append(mx.maximum(cols[-1] + (tl[:, 0] - (x - logp)[:, 0]), 0.0))  # regret: surprisal - (-log p_1)
    nan = mx.full((x.shape[0],), float("nan"))
    if prev is None:
        cols += [nan, nan]
    else:
        q, has = prev
        kl = mx.maximum(mx.sum(p * (logp - q), axis=-1), 0.0)
        pq = mx.exp(q)
        mid = mx.log(mx.maximum(0.5 * (p + pq), 1e-38))
        js = mx.maximum(0.5 * (mx.sum(p * (logp - mid), axis=-1) + mx.sum(pq * (q - mid), axis=-1)), 0.0)
        cols += [mx.where(has, kl, nan), mx.where(has, js, nan)]
    return mx.stack(cols, axis=1), logp


HIDDEN_FIELDS: tuple[str, ...] = (
    "hidden_norm",  # ||h_t||_2 of the final-normalised hidden state
    "relative_l2_step",  # ||h_t - h_{t-1}||_2 / ||h_{t-1}||_2
    "cosine_drift",  # 1 - cos(h_t, h_{t-1})
)
"""Per-token fields of the final-normalised hidden state that produced the token's logits
(protocol 2.2); transition fields NaN at a request's first token."""


def hidden_signals_np(h: np.ndarray, prev: Sequence) -> np.ndarray:
    """HIDDEN_FIELDS of float32 hidden states h [n, d]; prev[i]: row i's previous state or None."""
    h = np.asarray(h, dtype=np.float32)
    out = np.full((h.shape[0], len(HIDDEN_FIELDS)), np.nan, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", h, h, dtype=np.float64))
    out[:, 0] = norms
    for i, q in enumerate(prev):
        if q is None or q.shape != h[i].shape:
            continue
        qn = float(np.sqrt(np.dot(q.astype(np.float64), q)))
        if qn > 0:
            out[i, 1] = np.linalg.norm((h[i] - q).astype(np.float64)) / qn
        if qn > 0 and norms[i] > 0:
            out[i, 2] = 1.0 - float(np.dot(h[i].astype(np.float64), q)) / (qn * norms[i])
    return out


def hidden_signals(h, prev):
    """`hidden_signals_np` in MLX, lazily: h [n, d]; prev None or (q [n, d], has_prev bool [n])."""
    import mlx.core as mx

    h = h.astype(mx.float32)
    norms = mx.sqrt(mx.sum(h * h, axis=-1))
    nan = mx.full((h.shape[0],), float("nan"))
    if prev is None:
        return mx.stack([norms, nan, nan], axis=1)
    q, has = prev
    qn = mx.sqrt(mx.sum(q * q, axis=-1))
    step = mx.sqrt(mx.sum((h - q) ** 2, axis=-1)) / qn
    drift = 1.0 - mx.sum(h * q, axis=-1) / (qn * norms)
    return mx.stack([norms, mx.where(has, step, nan), mx.where(has, drift, nan)], axis=1)
