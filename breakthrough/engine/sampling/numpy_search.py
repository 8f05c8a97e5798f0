"""The numpy candidate search: each row's k largest logits without sorting the vocabulary, and
bounds on the rest of its probability mass (what the numpy draw's top-p cut needs)."""

from __future__ import annotations

import numpy as np

_SEARCH_CHUNK = 64


def _chunked_top(
    x: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
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
        vals = np.concatenate([vals, x[:, groups * w :]], axis=1)
        cols = np.concatenate(
            [cols, np.broadcast_to(np.arange(groups * w, vocab), (n, rest))], axis=1
        )
    pick = np.argpartition(-vals, k - 1, axis=-1)[:, :k]
    ids = np.take_along_axis(cols, pick, axis=-1)
    top = vals.max(-1, keepdims=True)
    outside = gmax.copy()
    outside[rows, best] = -np.inf
    with np.errstate(under="ignore"):
        mass = np.exp(outside - top).sum(-1)  # one entry (the max) of each unsearched group
    return ids, top, mass, mass * w, vals.shape[1] - k


def candidate_search(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, tuple | None]:
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


def top_candidates(x: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest entries of each row of x [n, V], unsorted (all ids when k >= V)."""
    return candidate_search(x, k)[0]


def cached_top_candidates(x: np.ndarray, k: int, tops: dict | None) -> np.ndarray:
    """`top_candidates(x, k)` of all rows of x, cached in `tops` (one search per step)."""
    if tops is None:
        return top_candidates(x, k)
    if k not in tops:
        tops[k] = top_candidates(x, k)
    return tops[k]
