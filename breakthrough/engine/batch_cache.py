"""What bt's decode loop asks of one layer of a batch's cache (`BatchLayerCache`), and how a
batch is made from rows' caches (`join_rows`).

A row reaches the batch as one cache per model layer, prefilled at batch 1 (`MlxEngine._start`):
mlx-lm's `KVCache` / `RotatingKVCache` / `ArraysCache` (rows with a copy of their prefix, or
layers bt does not share), or bt's `shared_kv.SharedRowCache` (rows pointing into their cell's
one prefix copy) and `group_kv.GroupRowCache` (rows in their cell's group buffer). Each row
layer type names its batch type by its `merge(rows)` classmethod: mlx-lm's `BatchKVCache`,
`BatchRotatingKVCache`, `ArraysCache`; bt's `shared_kv.SharedBatchCache`. Those satisfy
`BatchLayerCache`: what bt's loop calls between forwards (`extend`, `filter`, `extract`,
`nbytes`: rows join, leave and are taken out with their state).

During a forward the batch layers are called by mlx-lm's model code, by layer kind: an attention
layer's `update_and_fetch`, `make_mask` and `offset` (through `mlx_lm.models.base.
create_attention_mask` and each attention module), a recurrent layer's state slots. The model
classes are mlx-lm's, so those calls are too; bt's `SharedBatchCache` answers the attention
ones (its `update_and_fetch` may return a token that `row_attention` resolves).

The decode loop (`decode_batch.DecodeBatch`) calls nothing else, so a new row layer type needs
only a `merge` that returns a `BatchLayerCache` answering its model's calls."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BatchLayerCache(Protocol):
    """One model layer's cache for the rows of a decode batch, in batch order, as bt's decode
    loop uses it."""

    def extend(self, other: Any) -> None:
        """Append the rows of `other` (a batch of the same type) after this batch's rows."""
        ...

    def filter(self, batch_indices: list[int]) -> None:
        """Keep only the rows at `batch_indices`, in that order."""
        ...

    def extract(self, idx: int) -> Any:
        """Row `idx`'s own cache for this layer (a row layer that can continue alone)."""
        ...

    @property
    def nbytes(self) -> int:
        """Bytes the layer holds."""
        ...


def join_rows(rows: list[list[Any]]) -> list[BatchLayerCache]:
    """One batch layer per model layer from `rows` (each a list of row layers, one per model
    layer): the row layers' own `merge`. A row layer type without one cannot be batched, which
    is a bug of the engine's row building (`MlxEngine._start`), not a user's mistake."""
    batch: list[BatchLayerCache] = []
    for layers in zip(*rows, strict=True):
        merge = getattr(type(layers[0]), "merge", None)
        if merge is None:
            raise TypeError(f"{type(layers[0]).__name__} rows cannot join a decode batch")
        batch.append(merge(list(layers)))
    return batch
