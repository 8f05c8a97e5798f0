"""The numpy statistics of a step (MLX's CPU device): each row's full next-token distribution
(log-sum-exp, entropy, optionally the probabilities) and the drawn token's statistics, run
beside the next forward pass; plus the whole step and the top log-probs in numpy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from breakthrough.engine.sampling.numpy_draw import Draw, draw_np, row_settings_np
from breakthrough.engine.sampling.numpy_search import top_candidates
from breakthrough.protocol import Sampling

_STATS_BLOCK = 4
"""Rows per block of `full_distribution_np`: the block's temporaries (2 x 4 rows of a
49,152-token vocabulary, 1.5 MB) stay in cache and are reused instead of allocating [n, V]
arrays per pass."""


class FullDistribution(NamedTuple):
    """One step's full next-token distributions (temperature 1, no filter), per row."""

    lse: np.ndarray  # float32 [n, 1]: log-sum-exp of the logits
    entropy: np.ndarray  # float32 [n], nats
    tops: dict  # {k: top-k candidate ids [n, k] of all rows}, filled by whoever searches first
    probs: np.ndarray | None = None  # float32 [n, V]: the probabilities, when asked for


def full_distribution_np(
    x: np.ndarray, keep_probs: bool = False, exps: tuple[np.ndarray, np.ndarray] | None = None
) -> FullDistribution:
    """The `FullDistribution` of float32 logits x [n, V]: computed once per step, shared by the
    sampler's statistics and the instrumentation (the candidate search too:
    `cached_top_candidates` caches it per k in `tops`, the same ids whoever asks first).

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


def draw_stats_np(
    x: np.ndarray, draw: Draw, k: int = 0, keep_probs: bool = False
) -> tuple[np.ndarray, FullDistribution]:
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
    idx = top_candidates(x, k)
    vals = np.take_along_axis(x, idx, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return (
        np.take_along_axis(idx, order, axis=-1).astype(np.int32),
        (np.take_along_axis(vals, order, axis=-1) - lse).astype(np.float32),
    )
