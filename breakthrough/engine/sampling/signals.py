"""Per-token instrumentation (protocol 2.2), from the logits the step already has: no second
forward pass. Every field is of the model's FULL next-token distribution p_t (temperature 1,
before any filter), like `entropies`; the transition fields compare p_t with the previous
step's distribution p_{t-1} of the same row (NaN for a row's first token). The hidden-state
fields describe the final-normalised hidden state that produced the token's logits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from breakthrough.engine.sampling.numpy_search import cached_top_candidates
from breakthrough.engine.sampling.numpy_stats import FullDistribution, full_distribution_np

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


def token_signals_np(
    x: np.ndarray, tokens: np.ndarray, prev: Sequence, full: FullDistribution | None = None
) -> tuple[np.ndarray, list]:
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
    top = cached_top_candidates(x, k, tops)
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
    cols = [
        ent / float(np.log(vocab)),
        tl[:, 0] - tl[:, 1],
        tp[:, 0] - tp[:, 1],
        tp[:, 0],
        mx.sum(tp[:, :5], axis=-1),
        mx.maximum(1.0 - mx.sum(tp[:, :TAIL_K], axis=-1), 0.0),
        mx.exp(ent),
        -mx.take_along_axis(logp, tokens[:, None].astype(mx.int32), axis=-1)[:, 0],
    ]
    cols.append(
        mx.maximum(cols[-1] + (tl[:, 0] - (x - logp)[:, 0]), 0.0)
    )  # regret: surprisal - (-log p_1)
    nan = mx.full((x.shape[0],), float("nan"))
    if prev is None:
        cols += [nan, nan]
    else:
        q, has = prev
        kl = mx.maximum(mx.sum(p * (logp - q), axis=-1), 0.0)
        pq = mx.exp(q)
        mid = mx.log(mx.maximum(0.5 * (p + pq), 1e-38))
        js = mx.maximum(
            0.5 * (mx.sum(p * (logp - mid), axis=-1) + mx.sum(pq * (q - mid), axis=-1)), 0.0
        )
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
