"""The numpy draw (MLX's CPU device): one step's tokens from float32 logits, the same definition
as `mlx_path.sample_step` (same candidate set, same hashed Gumbel noise). It is the part of the
step the next forward pass waits for; the statistics (`numpy_stats`) run beside that forward.

MLX's CPU transcendental and selection ops are scalar code, so on CPU the step's
vocabulary-sized work runs in numpy on a view of the evaluated logits."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from breakthrough.engine.sampling.keys import GOLDEN, U23, fmix32
from breakthrough.engine.sampling.numpy_search import candidate_search
from breakthrough.protocol import Sampling

_BOUND_SLACK = 1e-5  # relative margin under which a top-p bound is not trusted (float rounding)


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
        sampled=np.asarray(sampled, dtype=np.int64),
        k=max(ks) if ks else 0,
        ks=col(ks, np.int64),
        top_p=col([sm.top_p for sm in chosen], np.float32),
        min_p=col([sm.min_p for sm in chosen], np.float32),
        temperature=col([sm.temperature for sm in chosen], np.float32),
        all_sampled=len(sampled) == len(samplings),
    )


@dataclass
class Draw:
    """One step's drawn tokens and what its statistics need from the draw."""

    tokens: np.ndarray  # int64 [n]
    sampled: np.ndarray  # indices of the rows drawn by sampling
    scaled: (
        np.ndarray | None
    )  # float32 [r, k]: kept candidates' temperature-scaled logits, -inf for the rest
    top_ids: (
        np.ndarray | None
    )  # int [n, k]: every row's top-k candidate ids (all rows sampled), for reuse
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
    idx, top, bounds = candidate_search(xs, k)
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
        h = fmix32((idx.astype(np.uint32) * np.uint32(GOLDEN)) ^ keys[rows][:, None])
    u01 = ((h >> 9).astype(np.float32) + 0.5) * np.float32(U23)
    choice = np.argmax(scaled - np.log(-np.log(u01)), axis=-1)
    tokens[rows] = idx[np.arange(len(rows)), choice]
    top_ids = idx if settings.all_sampled and k < vocab else None
    return Draw(tokens, rows, scaled, top_ids, exps)
