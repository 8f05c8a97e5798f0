"""Decode-step attention over a shared prefix read once per group of rows.

In `bt continue` the rows in flight share most of their context: the branches of an anchor
share prompt + trace[:t] exactly, and every anchor of a cell is a prefix of the cell's one
prompt + base trace, held once by its `PrefixCache`. Attending row by row (or over mlx-lm's
per-row copies) reads that prefix's keys and values once per row and step; here they are read
once per TILE of rows that point into the same prefix buffer, as in Hydragen (Juravsky et al.
2024) and FlashInfer's cascade attention:

  * prefix part, per tile of `TILE_ROWS` rows of one prefix buffer: every query head of the
    tile's rows against the buffer's keys in blocks of `BLOCK` positions, one matrix-matrix
    product per (KV head, block), each row masked to its own prefix length;
  * suffix part, per row: its query heads against its own positions (the tokens after the
    prefix: the rest of its prompt and what it generated);
  * the two combined exactly by log-sum-exp (each part's running max, normaliser and
    unnormalised output).

Batch invariance (a row's attention does not depend on which other rows are in flight, so
kill/resume and `--batch-size` give the same samples). A BLAS's result for one row of a product
follows the product's shape and the row's place among its rows, never the other rows' values
(OpenBLAS: results change with M and K; on AMD Zen, single-threaded, rows 6-11 of every 12 are
rounded apart from rows 0-5: bench/RESULTS.md). So every product has a fixed shape, and a row
always takes the same place: a tile has `TILE_ROWS` places (an empty place is zeros whose
results are dropped), and a row takes place `lane % TILE_ROWS`, its request's lane (the
branch index: the samples of an anchor fill a tile), so rows of one buffer with the same lane
go to different tiles. A block is always `BLOCK` positions (the buffer viewed as [heads, blocks,
BLOCK, dim] without a copy: `mx.as_strided` of its contiguous storage), and a tile holds only
rows that reach the same number of blocks, so the products' batch (heads x blocks) is the row's
own too (MLX's CUDA matmul rounds by the batch's size: bench/RESULTS.md); positions past a
row's prefix get an exactly zero weight. The suffix part involves the row alone. Only the sums
over blocks and the final combination are elementwise, in a fixed order.

Plain `mx` ops: CPU, Metal and CUDA alike. Full-precision caches only: a quantized cache
(`--kv-bits`) attends row by row (`row_attention`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import mlx.core as mx
import numpy as np

# Places per prefix tile: fixed, so a row's products never change shape. 4 = the samples of an
# anchor (lanes 0-3, and 4-7 of a top-up), which share their prefix exactly (each lane's rows
# are tiled deepest first). Measured against 8 and 16: bench/RESULTS.md.
TILE_ROWS = 4
BLOCK = 256  # prefix positions per block (= mlx-lm's KVCache step: buffers are multiples)
_MASKED = -1e30  # a masked score: finite, so a fully masked block stays finite (weight 0)
# True: `_softmax_parts` stays lazy MLX on the CPU too (its GPU branch), so that
# `bench/prefix_attention_step.py --count-ops` can build a step's graph without evaluating it.
LAZY_ON_CPU = False


@lru_cache(maxsize=256)
def _prefix_bias(lengths: tuple[int, ...], blocks: int, repeats: int) -> np.ndarray:
    """[1, blocks, TILE_ROWS * repeats, BLOCK] float32, added to a tile's scores: 0 where query
    row i*repeats + r (row i's query head r of a KV head) sees prefix position p (p <
    lengths[i]), `_MASKED` elsewhere."""
    pos = np.arange(blocks * BLOCK).reshape(blocks, 1, BLOCK)
    limit = np.repeat(np.asarray(lengths, dtype=np.int64), repeats).reshape(1, -1, 1)
    bias = np.where(pos < limit, np.float32(0), np.float32(_MASKED))[None]
    bias.setflags(write=False)
    return bias


@lru_cache(maxsize=256)
def _prefix_bias_mx(lengths: tuple[int, ...], blocks: int, repeats: int) -> mx.array:
    """`_prefix_bias` as an MLX array (on the default device, made once per tile shape)."""
    return mx.array(_prefix_bias(lengths, blocks, repeats))


def _block_view(buffer: mx.array, blocks: int) -> mx.array:
    """The first blocks * BLOCK positions of a [1, heads, capacity, dim] contiguous buffer as
    [heads, blocks, BLOCK, dim], a view (no copy)."""
    _, heads, capacity, dim = buffer.shape
    return mx.as_strided(
        buffer, (heads, blocks, BLOCK, dim), (capacity * dim, BLOCK * dim, dim, 1), 0
    )


def _softmax_parts(scores: list[Any], masks: list[Any]) -> list[tuple[Any, Any, Any]]:
    """(max, exponentials, normaliser) over the last axis of each float32 score array, masked
    by its entry of `masks`: a tile's `_prefix_bias` arguments (a tuple), or an int n: only the
    first n positions are real (a row's own buffer, allocated beyond what it holds). Masked
    positions get an exponential of exactly 0.

    On MLX's CPU device in numpy, whose exp is vectorised (MLX's CPU exp is scalar code, ~13 ns
    an element: most of a step at long contexts): the scores are evaluated together, once per
    layer. Elsewhere lazily in MLX."""
    out = []
    if mx.default_device() != mx.cpu or LAZY_ON_CPU:
        for sc, mask in zip(scores, masks, strict=True):
            if isinstance(mask, tuple):
                sc = sc + _prefix_bias_mx(*mask)
            else:
                sc = mx.where(mx.arange(sc.shape[-1]) < mask, sc, -mx.inf)
            m = mx.max(sc, axis=-1, keepdims=True)
            e = mx.exp(sc - m)
            out.append((m, e, mx.sum(e, axis=-1, keepdims=True)))
        return out
    mx.eval(scores)
    for sc, mask in zip(scores, masks, strict=True):
        if isinstance(mask, tuple):
            x = np.asarray(sc) + _prefix_bias(*mask)
            m = x.max(axis=-1, keepdims=True)
        else:
            x = np.array(sc, copy=True)
            m = x[..., :mask].max(axis=-1, keepdims=True)
            x[..., mask:] = -np.inf
        np.subtract(x, m, out=x)
        np.exp(x, out=x)
        out.append((mx.array(m), mx.array(x), mx.array(x.sum(axis=-1, keepdims=True))))
    return out


def _weighted(parts: tuple[Any, Any, Any], values: mx.array, blocks: bool) -> tuple:
    """(max, normaliser, unnormalised float32 output) from `_softmax_parts` and the values
    [..., n, dim]; combined over the block axis (1) when `blocks`."""
    m, e, s = parts
    o = (e.astype(values.dtype) @ values).astype(mx.float32)
    if not blocks:
        return m, s, o
    top = mx.max(m, axis=1, keepdims=True)
    w = mx.exp(m - top)
    return top[:, 0], mx.sum(w * s, axis=1), mx.sum(w * o, axis=1)


def _shares(row: Any) -> bool:
    """Whether `row`'s prefix is read from a shared buffer (else it attends over its own)."""
    return row.base is not None and row.prefix_len > 0 and row.base[0].shape[2] % BLOCK == 0


def _tiles(members: list[int], rows: list[Any]) -> list[list[int | None]]:
    """Tiles of the rows `members` (indices into `rows`, all of one buffer and one number of
    blocks): TILE_ROWS places each, row i in place `rows[i].lane % TILE_ROWS` (None: an empty
    place). Each place's rows are taken deepest first, so tile k holds the k-th deepest row of
    every place: the samples of one anchor share a tile."""
    by_place: list[list[int]] = [[] for _ in range(TILE_ROWS)]
    for i in members:
        by_place[rows[i].lane % TILE_ROWS].append(i)
    for place in by_place:
        place.sort(key=lambda i: -rows[i].prefix_len)
    return [
        [place[k] if k < len(place) else None for place in by_place]
        for k in range(max(len(place) for place in by_place))
    ]


def _plan_tiles(rows: list[Any]) -> tuple[list[list[int | None]], list[int]]:
    """(tiles, rows that attend alone): the sharing rows tiled per buffer and number of blocks
    (module doc: a product's shape and batch are then the row's own), each by `_tiles`."""
    groups: dict[tuple[int, int], list[int]] = {}
    alone: list[int] = []
    for i, row in enumerate(rows):
        if _shares(row):
            groups.setdefault((id(row.base[0]), -(-row.prefix_len // BLOCK)), []).append(i)
        else:
            alone.append(i)
    return [tile for members in groups.values() for tile in _tiles(members, rows)], alone


def _tile_scores(queries: mx.array, tile: list[int | None], rows: list[Any], scale: float) -> tuple:
    """(scores [heads, blocks, TILE_ROWS * repeats, BLOCK] float32, their mask's `_prefix_bias`
    arguments, values as blocks) of one tile (`_tiles`): `queries` [n, q_heads, 1, dim] of all
    rows; each row's prefix is the first `prefix_len` positions of the one buffer the tile's
    rows' `base` holds."""
    _, q_heads, _, dim = queries.shape
    present = [i for i in tile if i is not None]
    keys, values = rows[present[0]].base
    heads = int(keys.shape[1])
    repeats = q_heads // heads
    empty = mx.zeros((1, q_heads, 1, dim), queries.dtype)
    queries = mx.concatenate([empty if i is None else queries[i : i + 1] for i in tile], axis=0)
    lengths = [0 if i is None else rows[i].prefix_len for i in tile]
    q = (queries * scale).reshape(TILE_ROWS, heads, repeats, dim).transpose(1, 0, 2, 3)
    q = q.reshape(heads, 1, TILE_ROWS * repeats, dim)
    blocks = -(-max(lengths) // BLOCK)
    scores = (q @ _block_view(keys, blocks).swapaxes(-1, -2)).astype(mx.float32)
    return scores, (tuple(lengths), blocks, repeats), _block_view(values, blocks)


def _own_scores(query: mx.array, row: Any, scale: float) -> tuple:
    """(scores [heads, repeats, size] float32, values [heads, size, dim], positions n that are
    real) of a sharing row over its own positions: its whole suffix buffer, allocated at the
    row's final length (a slice would be a strided operand, which MLX's CPU matmul first copies:
    far slower than the product, bench/RESULTS.md)."""
    keys, values, n = row.keys, row.values, row.suffix_len
    heads, dim = int(keys.shape[1]), int(query.shape[-1])
    q = (query * scale).reshape(heads, -1, dim)
    return (q @ keys[0].swapaxes(-1, -2)).astype(mx.float32), values[0], n


def attend_alone(query: mx.array, row: Any, scale: float, sinks: Any = None) -> mx.array:
    """[1, q_heads, 1, dim]: one row (`query` [1, q_heads, 1, dim]) over its own keys, prefix
    view and suffix joined, with mlx-lm's function, unpadded and unmasked: a row that shares no
    prefix buffer, or any row of a quantized batch (`row_attention`)."""
    from breakthrough.engine.mlx_compat import mlx_attention

    keys, values = row.padded(0)
    return mlx_attention(query, keys, values, cache=row, scale=scale, mask=None, sinks=sinks)


def attend_shared(queries: mx.array, rows: list[Any], scale: float) -> mx.array:
    """Attention output [rows, q_heads, 1, dim] of a one-token decode step for `rows`
    (`shared_kv.SharedRowCache`, each already holding this step's key and value), the prefix
    part computed once per tile of rows sharing a prefix buffer (module doc); a row that shares
    none attends alone."""
    n, q_heads, _, dim = queries.shape
    tiles, alone = _plan_tiles(rows)
    sharing = [i for tile in tiles for i in tile if i is not None]
    tile_work = [_tile_scores(queries, tile, rows, scale) for tile in tiles]
    own_work = [_own_scores(queries[i], rows[i], scale) for i in sharing]
    softmax = _softmax_parts(
        [w[0] for w in tile_work] + [w[0] for w in own_work],
        [w[1] for w in tile_work] + [w[2] for w in own_work],
    )
    pieces, order = [], []  # per tile its rows' outputs [t, q_heads, 1, dim], then alone rows
    own = dict(zip(sharing, softmax[len(tiles) :], strict=True))
    values = dict(zip(sharing, [w[1] for w in own_work], strict=True))
    for tile, work, parts in zip(tiles, tile_work, softmax, strict=False):
        pm, ps, po = _weighted(parts, work[2], blocks=True)  # [heads, TILE_ROWS * rep, .]
        chunk = [i for i in tile if i is not None]
        heads, t, repeats = pm.shape[0], len(chunk), pm.shape[1] // TILE_ROWS
        mine = [_weighted(own[i], values[i], blocks=False) for i in chunk]
        m, s, o = (mx.stack([x[k] for x in mine], axis=1) for k in range(3))  # [heads, t, rep, .]
        m, s, o = (a.reshape(heads, t * a.shape[2], a.shape[3]) for a in (m, s, o))
        if t < TILE_ROWS:  # the present places' query rows
            places = [p for p, i in enumerate(tile) if i is not None]
            taken = mx.array([p * repeats + r for p in places for r in range(repeats)])
            pm, ps, po = pm[:, taken], ps[:, taken], po[:, taken]
        top = mx.maximum(m, pm)
        wp, ws = mx.exp(pm - top), mx.exp(m - top)
        combined = (wp * po + ws * o) / (wp * ps + ws * s)  # [heads, t * rep, dim]
        combined = combined.reshape(heads, t, -1, dim).transpose(1, 0, 2, 3)
        pieces.append(combined.reshape(t, q_heads, 1, dim).astype(queries.dtype))
        order += chunk
    for i in alone:
        pieces.append(attend_alone(queries[i : i + 1], rows[i], scale))
        order.append(i)
    result = pieces[0] if len(pieces) == 1 else mx.concatenate(pieces, axis=0)
    if order == list(range(n)):
        return result
    return result[mx.array(np.argsort(np.asarray(order)))]
