"""One batched sampler per decode step: every row of the batch drawn in one fused MLX graph.

Why: drawing each row in its own Python call (own key, top-k partition, sort, cumsum, Gumbel
draw) made the per-token overhead grow with the batch, so batching the forward pass gained
little (issue 15). Here one call handles all rows, with per-row parameters as arrays.

Randomness is counter-based and keyed by the row's identity, never by its batch slot: the noise
for token id v at generated-token index k of a row with seed s is
    u = fmix32(row_key(s, k) ^ v * 0x9E3779B1),   g = -log(-log(u))   (a Gumbel draw)
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
from dataclasses import dataclass

import numpy as np

from breakthrough.protocol import Sampling

SAMPLER_ID = "gumbel-fmix32-v1"
"""Names the randomness scheme; part of the engine identity (a run never mixes two schemes)."""

_GOLDEN = 0x9E3779B1
_STEP_MUL = 0x85EBCA77
_SEED_SALT = 0x7F4A7C15
_U24 = float(2.0**-24)


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
    u = ((x >> 8).astype(mx.float32) + 0.5) * _U24  # in (0, 1), never 0 or 1
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

_CHUNK = 256


def _top_candidates_np(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest entries of each row of x [n, V], unsorted (k < V). The k-th
    largest chunk maximum bounds the k-th largest entry from below, so only the entries at or
    above it (few) are partitioned."""
    n, vocab = x.shape
    chunks = vocab // _CHUNK
    if chunks < 2 * k:
        return np.argpartition(-x, k - 1, axis=-1)[:, :k]
    cmax = x[:, : chunks * _CHUNK].reshape(n, chunks, _CHUNK).max(-1)
    if chunks * _CHUNK < vocab:
        cmax = np.concatenate([cmax, x[:, chunks * _CHUNK :].max(-1, keepdims=True)], axis=1)
    floor = np.partition(cmax, cmax.shape[1] - k, axis=-1)[:, cmax.shape[1] - k]
    out = np.empty((n, k), dtype=np.int64)
    for r in range(n):
        ids = np.flatnonzero(x[r] >= floor[r])
        vals = x[r, ids]
        out[r] = ids[np.argpartition(-vals, k - 1)[:k]] if len(ids) > k else ids
    return out


def full_distribution_np(x: np.ndarray) -> tuple:
    """(max [n, 1], exp(x - max) [n, V], sum of it [n, 1], log-sum-exp [n, 1], entropy [n],
    {k: top-k candidate ids of all rows}) of the full distributions of float32 logits x [n, V]:
    computed once per step, shared by the sampler and the instrumentation (the candidate search
    too: `_top_candidates` caches it per k, the same ids whoever asks first)."""
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(-1, keepdims=True, dtype=np.float64).astype(np.float32)
    lse = m + np.log(s)
    ent = np.maximum(lse[:, 0] - np.einsum("ij,ij->i", e, x) / s[:, 0], 0.0)
    return m, e, s, lse, ent, {}


def _top_candidates(x: np.ndarray, k: int, tops: dict | None) -> np.ndarray:
    """`_top_candidates_np(x, k)` of all rows of x, cached in `tops` (one search per step)."""
    if tops is None:
        return _top_candidates_np(x, k)
    if k not in tops:
        tops[k] = _top_candidates_np(x, k)
    return tops[k]


def sample_step_np(logits: np.ndarray, keys: np.ndarray, samplings: Sequence[Sampling],
                   full: tuple | None = None):
    """`sample_step` on a float32 numpy array [n, V] (MLX's CPU device); the same definition:
    same candidate set, same hashed Gumbel noise. `full`: `full_distribution_np(logits)` when
    already computed. Returns (tokens int64 [n], stats [n, 3])."""
    x = np.asarray(logits, dtype=np.float32)
    n, vocab = x.shape
    m, e, s, lse, ent, tops = full if full is not None else full_distribution_np(x)
    tokens = x.argmax(-1)
    s_ent = np.zeros(n, dtype=np.float32)
    sampled = [r for r in range(n) if samplings[r].temperature > 0]
    if sampled:
        ks = [samplings[r].top_k if 0 < samplings[r].top_k < vocab else vocab for r in sampled]
        k = max(ks)
        rows = np.asarray(sampled)
        xs = x[rows]
        if k >= vocab:
            idx = np.broadcast_to(np.arange(vocab), xs.shape)
        elif len(sampled) == n:  # every row sampled (the usual case): the step's shared search
            idx = _top_candidates(x, k, tops)
        else:
            idx = _top_candidates_np(xs, k)
        cand = np.take_along_axis(xs, idx, axis=-1)
        order = np.argsort(-cand, axis=-1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=-1)
        cand = np.take_along_axis(cand, order, axis=-1) - lse[rows]
        keep = np.arange(k)[None, :] < np.asarray(ks)[:, None]
        probs = np.exp(cand)
        mass_before = np.cumsum(probs, axis=-1) - probs
        top_p = np.asarray([samplings[r].top_p for r in sampled], dtype=np.float32)[:, None]
        keep &= (mass_before < top_p) | (top_p >= 1.0) | (top_p <= 0.0)
        min_p = np.asarray([samplings[r].min_p for r in sampled], dtype=np.float32)[:, None]
        if (min_p > 0).any():
            with np.errstate(divide="ignore"):
                floor = cand[:, :1] + np.log(min_p)
            keep &= (cand >= floor) | (min_p <= 0.0)
        temp = np.asarray([samplings[r].temperature for r in sampled], dtype=np.float32)[:, None]
        scaled = np.where(keep, cand / temp, -np.inf).astype(np.float32)
        with np.errstate(over="ignore"):
            h = fmix32((idx.astype(np.uint32) * np.uint32(_GOLDEN)) ^ keys[rows][:, None])
        u = ((h >> 8).astype(np.float32) + 0.5) * np.float32(_U24)
        g = -np.log(-np.log(u))
        choice = np.argmax(scaled + g, axis=-1)
        tokens[rows] = idx[np.arange(len(rows)), choice]
        top = scaled.max(-1, keepdims=True)
        logq = scaled - (top + np.log(np.exp(scaled - top).sum(-1, keepdims=True)))
        with np.errstate(invalid="ignore"):
            s_ent[rows] = -np.where(keep, np.exp(logq) * logq, 0.0).sum(-1)
    chosen = x[np.arange(n), tokens] - lse[:, 0]
    return tokens, np.stack([chosen, ent, s_ent], axis=1).astype(np.float32)


def top_logprobs_np(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`top_logprobs` in numpy: (ids int32 [n, k], log-probs float32 [n, k]), descending."""
    x = np.asarray(logits, dtype=np.float32)
    k = min(int(k), x.shape[-1])
    m = x.max(-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(-1, keepdims=True))
    idx = _top_candidates_np(x, k) if k < x.shape[-1] else np.broadcast_to(np.arange(x.shape[-1]), x.shape)
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
    "successive_kl_divergence",  # KL(p_t || p_{t-1}), nats
    "successive_js_divergence",  # JS(p_t, p_{t-1}), nats
)
"""Names (and order) of the instrumentation columns; protocol 2.2's token_metrics names.
(Entropy and the sampled log-prob are GenResult.entropies / logprobs.)"""

TAIL_K = 20
"""The tail is what lies outside the protocol's sampling top-k (protocol 1.4: top_k = 20)."""


def token_signals_np(x: np.ndarray, tokens: np.ndarray, prev: Sequence,
                     full: tuple | None = None) -> tuple[np.ndarray, list]:
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
    m, e, s, lse, ent, tops = full if full is not None else full_distribution_np(x)
    p = e / s
    k = min(max(TAIL_K, 5), vocab)
    top = _top_candidates(x, k, tops) if k < vocab else np.broadcast_to(np.arange(vocab), x.shape)
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
    out[:, 7] = lse[:, 0] - x[np.arange(n), np.asarray(tokens, dtype=np.int64)]
    states = []
    for i in range(n):
        states.append((p[i], x[i], float(lse[i, 0]), float(ent[i])))
        if prev[i] is None or prev[i][0].shape[0] != vocab:
            continue
        q, x_q, lse_q, h_q = prev[i]
        out[i, 8] = max(-float(ent[i]) - float(np.dot(p[i], x_q)) + lse_q, 0.0)
        pq = p[i] + q
        pq += np.float32(1e-30)  # log(0) guard (exp underflow); shifts JS by < 1e-27 nats
        h_mid = float(np.log(2.0)) - 0.5 * float(np.dot(pq, np.log(pq)))
        out[i, 9] = max(h_mid - 0.5 * (float(ent[i]) + h_q), 0.0)
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
