"""Decode-step attention row by row for batches of shared-prefix rows (issue 28).

mlx-lm's batch attention runs on one left-padded [rows, heads, T_max, dim] tensor: every row is
read at the longest row's length, and for `shared_kv` rows that tensor must first be assembled
each step (every row's prefix copied twice per layer). At the study's KV geometry on CPU
(Qwen3-4B-like, bf16, 24 rows of 300-2,200 positions) one layer's attention took 325 ms with
mlx-lm's own per-row copies and 570 ms assembled; row by row, over each row's own positions, it
takes 136 ms. A whole run is another matter (`bench/continue_throughput.py --model
study-geometry`, 1k trace, at most 16 rows): mlx-lm's copies made 19.7 tok/s, row by row 10.9,
its per-row joins faulting in fresh pages every step (more system time than user time) until
`allocator.keep_freed_memory`; since then, idle, 19.4 tok/s row by row against 21.5 for copies.
Rows share, and attend this way, only when memory needs it.

Each row attends over its own keys only: its prefix view and its suffix, joined, with the same
`scaled_dot_product_attention` call mlx-lm makes, unpadded and unmasked. A padded position gets
an exact zero weight, so the values are those of the padded batch; with MLX's own kernels
(bfloat16, quantized) and the reference BLAS bitwise, with OpenBLAS float32 up to the last bits,
because OpenBLAS's blocking follows the padded length. That same dependence makes the padded
batch's result for a row change with the other rows in flight; row by row it cannot: a row's
attention depends on its own keys only, so "alone = in a batch" holds bitwise by construction.
`tests/engine/test_row_attention.py` checks both, and that tokens equal mlx-lm's batch cache.

mlx-lm's model files call `base.scaled_dot_product_attention` by the name they imported;
`install` points that name, in the modules of one model's classes, at `attend`, which hands
every call that is not a `SharedBatchCache` decode step back to mlx-lm's function unchanged. A
model whose attention calls `mx.fast` directly is left alone (its shared rows keep the padded
path, still exact)."""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
from mlx_lm.models import base

from breakthrough.engine.prefix_attention import attend_shared

# mlx-lm's own function, kept before any module's name points at `attend`.
_mlx_attention = base.scaled_dot_product_attention


def attend(
    queries: Any,
    keys: Any,
    values: Any,
    cache: Any,
    scale: float,
    mask: Any,
    sinks: Any = None,
) -> Any:
    """mlx-lm's `scaled_dot_product_attention`, row by row where `cache` is a
    `SharedBatchCache` whose last fetched keys these are, for a one-token step."""
    rows_of = getattr(cache, "rows_for_attention", None)
    rows = rows_of(queries, keys) if rows_of is not None else None
    if rows is None:
        return _mlx_attention(
            queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks
        )
    if sinks is None and not hasattr(cache, "bits"):
        return attend_shared(queries, rows, scale)
    out = []
    for i, row in enumerate(rows):
        k, v = row.padded(0)
        out.append(
            _mlx_attention(queries[i : i + 1], k, v, cache=row, scale=scale, mask=None, sinks=sinks)
        )
    return out[0] if len(out) == 1 else mx.concatenate(out, axis=0)


def install(model: Any) -> bool:
    """Point the attention of `model`'s modules at `attend`; True when at least one of its
    modules calls mlx-lm's shared attention function (so its shared rows attend row by row)."""
    modules = model.modules() if hasattr(model, "modules") else []
    names = {type(m).__module__ for m in modules} | {type(model).__module__}
    routed = False
    for name in sorted(names):
        module = sys.modules.get(name)
        current = getattr(module, "scaled_dot_product_attention", None)
        if current is _mlx_attention:
            module.scaled_dot_product_attention = attend  # type: ignore[union-attr]
            routed = True
        elif current is attend:
            routed = True
    return routed
