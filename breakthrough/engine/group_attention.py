"""Decode-step attention of rows in group buffers: one fused attention call per chunk of rows.

The rows of a cell live in its group buffer (`group_kv`: the cell's prefix, then one slot per row
for its own tokens). A chunk is the rows of one cell whose slots form one run of `chunk` slots
(`slot // chunk`); its rows go on the query-length axis of `mx.fast.scaled_dot_product_attention`
against the cell's whole buffer, with a boolean mask giving each row its own prefix length and its
own slot. One call per chunk and layer, no log-sum-exp merge: on Metal one fused kernel (query
length <= 8 and query length x query heads per KV head <= 32, `group_kv.chunk_rows`); on CUDA and
the CPU MLX's composed fallback, still a handful of ops per chunk whatever the prefix length.

Everything that depends only on the rows in flight (which row feeds which place of which chunk,
the masks, the order of the outputs) is built once per decode step (`_plan`, cached on the rows'
positions) and reused by every layer. Per layer the graph is then: one gather of the queries, one
attention call per chunk, one concatenation and one gather of the outputs back to batch order,
plus the step's writes (`group_kv.group_step_write`: one scatter per buffer for keys and one for
values). `bench/prefix_attention_step.py --count-ops` counts them.

Batch invariance is `group_kv`'s: a row's keys sit at positions that depend on its request alone,
its place in its chunk is its slot's, every call has the same shapes, and a masked position
contributes an exact zero. An empty place of a chunk repeats a present row's query and sees only
position 0 (its output is dropped), so no call ever attends over nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from breakthrough.engine.group_kv import GroupRowCache


@dataclass(frozen=True)
class _Plan:
    """One decode step's layout (module doc): `chunks` (a batch row index of each chunk, to
    reach its buffer in any layer's rows), `gather` (the batch row feeding each chunk place),
    `masks` ([1, 1, chunk, buffer length] bool per chunk), `others` (rows outside group buffers,
    attended by `prefix_attention`), `others_index` and `order` (for every batch row, its
    output's index among the chunk places then the other rows), and without other rows
    `chunk_of` and `place_in` (each batch row's chunk and place: one gather of the outputs)."""

    chunk: int
    chunks: tuple[int, ...]
    gather: Any
    masks: tuple[Any, ...]
    others: tuple[int, ...]
    others_index: Any
    order: Any
    chunk_of: Any
    place_in: Any


_last: dict[str, Any] = {"key": None, "plan": None}


def _row_key(row: Any) -> tuple:
    if isinstance(row, GroupRowCache):
        return (id(row.cell), row.slot, row.prefix_len, row.suffix_len)
    return (None, id(row))


def _plan(rows: list[Any]) -> _Plan:
    """The step's `_Plan`, made by the first layer and looked up by the others (every layer's
    rows stand at the same positions: the key is the rows' cells, slots and lengths)."""
    key = tuple(_row_key(r) for r in rows)
    if _last["key"] == key:
        return _last["plan"]
    plan = _make_plan(rows)
    _last["key"], _last["plan"] = key, plan
    return plan


def _make_plan(rows: list[Any]) -> _Plan:
    group = [i for i, r in enumerate(rows) if isinstance(r, GroupRowCache)]
    others = tuple(i for i, r in enumerate(rows) if not isinstance(r, GroupRowCache))
    chunk = rows[group[0]].cell.shape.chunk
    members: dict[tuple[int, int], list[int]] = {}
    for i in group:
        r = rows[i]
        members.setdefault((id(r.cell), r.slot // chunk), []).append(i)
    chunks, gather, masks = [], [], []
    place_of = np.zeros(len(rows), dtype=np.int64)
    for c, (_, idx) in enumerate(sorted(members.items(), key=lambda kv: min(kv[1]))):
        layer = rows[idx[0]].layer
        feed = [idx[0]] * chunk
        mask = np.zeros((chunk, layer.length), dtype=bool)
        mask[:, 0] = True  # an empty place sees position 0 only (its output is dropped)
        for i in idx:
            r = rows[i]
            p = r.slot % chunk
            feed[p] = i
            mask[p, : r.prefix_len] = True
            mask[p, r.prefix_len :] = False
            mask[p, r.own_start : r.own_start + r.suffix_len] = True
            place_of[i] = c * chunk + p
        chunks.append(idx[0])
        gather += feed
        masks.append(mx.array(mask[None, None]))
    for k, i in enumerate(others):
        place_of[i] = len(chunks) * chunk + k
    return _Plan(
        chunk,
        tuple(chunks),
        mx.array(np.asarray(gather, dtype=np.int32)),
        tuple(masks),
        others,
        mx.array(np.asarray(others, dtype=np.int32)) if others else None,
        mx.array(place_of.astype(np.int32)),
        mx.array((place_of // chunk).astype(np.int32)),
        mx.array((place_of % chunk).astype(np.int32)),
    )


def attend_group(
    queries: Any, rows: list[Any], scale: float, *, others: Any = None, force_fused: bool = False
) -> Any:
    """Attention output [rows, q_heads, 1, dim] of a one-token decode step whose rows (this
    layer's caches, each already holding this step's key and value) include group rows: one
    fused call per chunk (module doc); the other rows by `others(queries, rows, scale)`
    (`prefix_attention.attend_shared`). `force_fused` asks MLX for its fused kernel (an error
    where it has none: the GPU check's proof that the shapes fit it)."""
    if others is None:
        from breakthrough.engine.prefix_attention import attend_shared as others
    if not any(isinstance(r, GroupRowCache) for r in rows):
        return others(queries, rows, scale)
    plan = _plan(rows)
    n, q_heads, _, dim = queries.shape
    chunk, n_chunks = plan.chunk, len(plan.chunks)
    q = queries[plan.gather].reshape(n_chunks, chunk, q_heads, dim).transpose(0, 2, 1, 3)
    outs = []
    for c, rep in enumerate(plan.chunks):
        layer = rows[rep].layer
        outs.append(
            mx.fast.scaled_dot_product_attention(
                q[c : c + 1],
                layer.keys,
                layer.values,
                scale=scale,
                mask=plan.masks[c],
                force_fused=force_fused,
            )
        )
    out = outs[0] if n_chunks == 1 else mx.concatenate(outs, axis=0)
    out = out.transpose(0, 2, 1, 3)  # [chunks, chunk, q_heads, dim], a view
    if not plan.others:
        return out[plan.chunk_of, plan.place_in][:, :, None, :]
    out = out.reshape(n_chunks * chunk, q_heads, 1, dim)
    if plan.others:
        rest = others(queries[plan.others_index], [rows[i] for i in plan.others], scale)
        out = mx.concatenate([out, rest.astype(out.dtype)], axis=0)
    return out[plan.order]
