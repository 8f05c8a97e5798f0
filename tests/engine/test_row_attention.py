"""Routing of the attention of shared-prefix rows (`engine.row_attention`): full-precision rows
go to `prefix_attention` (tests/engine/test_prefix_attention.py); quantized rows (`--kv-bits`)
attend one by one, with bitwise the result of mlx-lm's padded, masked batch attention."""

from __future__ import annotations

import numpy as np
import pytest
from models.tiny import geometry_model

from breakthrough.engine import mlx_compat, row_attention
from breakthrough.engine.shared_kv import (
    QuantizedSharedRowCache,
    SharedBatchCache,
    SharedRowCache,
)

# mlx after breakthrough's engine: bt loads an optimised BLAS for MLX before MLX is imported
import mlx.core as mx  # noqa: E402  isort:skip

HEADS, Q_HEADS, DIM = 8, 32, 128  # Qwen3-4B's attention: 32 query heads over 8 KV heads


def _rows(dtype, quantized: bool, seed: int) -> list[SharedRowCache]:
    """Five rows of different lengths: two share one prefix view, one shares another, two have
    no prefix; each has a suffix of its own."""
    rng = np.random.default_rng(seed)

    def kv(n: int):
        return mx.array(rng.standard_normal((1, HEADS, n, DIM)).astype(np.float32)).astype(dtype)

    prefixes = [(kv(300), kv(300)), (kv(137), kv(137))]
    rows: list[SharedRowCache] = []
    for prefix, own in [(0, 5), (0, 40), (1, 1), (None, 60), (None, 7)]:
        if quantized:
            pk = pv = None
            if prefix is not None:
                pk = tuple(mx.quantize(prefixes[prefix][0], group_size=64, bits=8))
                pv = tuple(mx.quantize(prefixes[prefix][1], group_size=64, bits=8))
            row: SharedRowCache = QuantizedSharedRowCache(pk, pv, bits=8, group_size=64)
        else:
            row = SharedRowCache(*(prefixes[prefix] if prefix is not None else (None, None)))
        row.reserve(own + 2)
        row.write(kv(own), kv(own))
        rows.append(row)
    return rows


@pytest.mark.parametrize("dtype,quantized", [(mx.float32, True)], ids=["kv8"])
def test_row_by_row_is_batch_invariant_and_equals_the_padded_batch(dtype, quantized) -> None:
    """Five quantized rows of different lengths (shared prefix views and suffixes): each row's
    attention in the batch is bitwise its attention alone, and bitwise the values of mlx-lm's
    padded, masked batch attention (MLX's own quantized kernels: no BLAS blocking involved)."""
    rng = np.random.default_rng(7)
    scale = DIM**-0.5
    for trial in range(3):
        rows = _rows(dtype, quantized, seed=trial)
        batch = rows[0].merge(rows)

        def normal(*shape):
            return mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype)

        new_k, new_v, queries = (
            normal(5, HEADS, 1, DIM),
            normal(5, HEADS, 1, DIM),
            normal(5, Q_HEADS, 1, DIM),
        )
        mask = batch.make_mask(1)  # as a model does: the mask first, then each layer's update
        keys, values = batch.update_and_fetch(new_k, new_v)
        in_batch = batch.rows_for_attention(queries, keys)
        assert in_batch is not None and [r.offset for r in in_batch] == [r.offset for r in rows]
        by_row = row_attention.attend(queries, keys, values, batch, scale, mask)
        for i, row in enumerate(rows):
            k, v = row.padded(0)
            alone = mlx_compat.mlx_attention(
                queries[i : i + 1], k, v, cache=row, scale=scale, mask=None
            )
            assert mx.array_equal(by_row[i : i + 1], alone).item()
        padded = mlx_compat.mlx_attention(
            queries, keys, values, cache=batch, scale=scale, mask=mask
        )
        assert by_row.shape == padded.shape
        assert mx.array_equal(by_row, padded).item()


def test_anything_but_a_fetched_one_token_step_takes_mlx_lms_path() -> None:
    rows = _rows(mx.float32, False, seed=3)
    batch = SharedBatchCache(rows)
    new = mx.zeros((5, HEADS, 1, DIM))
    keys, _ = batch.update_and_fetch(new, new)
    assert batch.rows_for_attention(mx.zeros((5, Q_HEADS, 1, DIM)), keys) is not None
    assert batch.rows_for_attention(mx.zeros((5, Q_HEADS, 1, DIM)), keys + 0) is None  # other keys
    assert batch.rows_for_attention(mx.zeros((5, Q_HEADS, 2, DIM)), keys) is None  # two tokens
    batch.make_mask(1, window_size=64)
    assert batch.rows_for_attention(mx.zeros((5, Q_HEADS, 1, DIM)), keys) is None  # a window


def test_install_routes_the_models_attention_and_nothing_else() -> None:
    from mlx_lm.models import base, qwen3

    model = geometry_model("qwen3-4b", vocab=64, heads=8)
    assert row_attention.install(model) is True
    assert qwen3.scaled_dot_product_attention is row_attention.attend
    assert base.scaled_dot_product_attention is mlx_compat.mlx_attention  # base itself kept
    assert row_attention.install(model) is True  # idempotent
