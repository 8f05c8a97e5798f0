"""Routes the decode-step attention of shared-prefix rows (`shared_kv.SharedBatchCache`).

mlx-lm's batch attention runs on one left-padded [rows, heads, T_max, dim] tensor: every row is
read at the longest row's length, and for `shared_kv` rows that tensor would have to be
assembled each step (every row's prefix copied per layer). Instead, for a one-token step:

  * rows in their cell's group buffer (`group_kv`, the GPU path) go to
    `group_attention.attend_group`: one fused attention call per chunk of a cell's rows;
  * full-precision rows go to `prefix_attention.attend_shared`: the rows that point into one
    prefix buffer attend over it together, once per tile of rows;
  * quantized rows (`--kv-bits`) attend one by one over their own keys (prefix view and suffix,
    joined) with the same `scaled_dot_product_attention` call mlx-lm makes, unpadded and
    unmasked: a padded position gets an exact zero weight, so the values are those of the padded
    batch (bitwise: MLX's own quantized kernels), and a row's attention depends on its own keys
    only, so "alone = in a batch" holds by construction.

`tests/engine/test_prefix_attention.py` and `test_row_attention.py` check both.

mlx-lm's model files call `base.scaled_dot_product_attention` by the name they imported;
`install` points that name, in the modules of one model's classes, at `attend`, which hands
every call that is not a `SharedBatchCache` decode step back to mlx-lm's function unchanged. A
model whose attention calls `mx.fast` directly is left alone (its shared rows keep the padded
path, still exact)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from breakthrough.engine.group_attention import attend_group
from breakthrough.engine.mlx_compat import mlx_attention, mlx_quantized_attention, route_attention
from breakthrough.engine.prefix_attention import attend_alone, attend_shared

# False: full-precision shared rows attend one by one too (the per-row baseline that
# `bench/continue_throughput.py --attention rowwise` measures shared-prefix attention against).
GROUPED = True


def attend(
    queries: Any,
    keys: Any,
    values: Any,
    cache: Any,
    scale: float,
    mask: Any,
    sinks: Any = None,
) -> Any:
    """mlx-lm's `scaled_dot_product_attention`, except for a one-token step of a
    `SharedBatchCache` whose last fetched keys these are: shared-prefix attention for
    full-precision rows, row by row for quantized ones (module doc)."""
    if cache is None and isinstance(keys, tuple):
        # a layer that reads another layer's keys and values (Gemma-4's KV-sharing layers get
        # them with no cache of their own) when that layer's cache is quantized (--kv-bits)
        return attend_quantized(queries, keys, values, scale, mask)
    rows_of = getattr(cache, "rows_for_attention", None)
    rows = rows_of(queries, keys) if rows_of is not None else None
    if rows is None:
        return mlx_attention(
            queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks
        )
    if any(row.in_group for row in rows):  # a GPU engine's group buffers (group_kv)
        return attend_group(queries, rows, scale, others=attend_shared)
    if GROUPED and sinks is None and not hasattr(cache, "bits"):
        return attend_shared(queries, rows, scale)
    out = [attend_alone(queries[i : i + 1], row, scale, sinks) for i, row in enumerate(rows)]
    return out[0] if len(out) == 1 else mx.concatenate(out, axis=0)


def attend_quantized(queries: Any, keys: tuple, values: tuple, scale: float, mask: Any) -> Any:
    """mlx-lm's quantized attention over (packed, scales, biases) triples that arrive without the
    cache that wrote them: the group size and bits are read from the triples' shapes (head_dim =
    scales' last dimension x group size; bits = packed words x 32 / head_dim)."""
    packed, scales, _ = keys
    head_dim = queries.shape[-1]
    group_size = head_dim // scales.shape[-1]
    bits = packed.shape[-1] * 32 // head_dim
    return mlx_quantized_attention(
        queries, keys, values, scale=scale, mask=mask, group_size=group_size, bits=bits
    )


def install(model: Any) -> bool:
    """Point the attention of `model`'s modules at `attend` (`mlx_compat.route_attention`); True
    when at least one of its modules calls mlx-lm's shared attention function (so its shared rows
    take `attend`'s paths)."""
    return route_attention(model, attend)
