"""What bt's decode loop asks of one layer of a batch's cache (`BatchLayerCache`), and how a
batch is made from rows' caches (`join_rows`).

A row reaches the batch as one cache per model layer, prefilled at batch 1 (`MlxEngine._start`):
mlx-lm's `KVCache` / `RotatingKVCache` / `ArraysCache` (rows with a copy of their prefix, or
layers bt does not share), or bt's `shared_kv.SharedRowCache` (rows pointing into their cell's
one prefix copy) and `group_kv.GroupRowCache` (rows in their cell's group buffer). Each row
layer type names its batch type by its `merge(rows)` classmethod: mlx-lm's `BatchKVCache`,
`BatchRotatingKVCache`, `ArraysCache`; bt's `shared_kv.SharedBatchCache`. Those satisfy
`BatchLayerCache`, which has two sides:

- what mlx-lm's model code calls during a forward (`update_and_fetch`, `make_mask`, `offset`,
  through `mlx_lm.models.base.create_attention_mask` and each attention module): the model
  classes are mlx-lm's, so their cache calls are too;
- what bt's loop calls between forwards (`extend`, `filter`, `extract`, `nbytes`): rows join,
  leave and are taken out with their state.

The decode loop (`decode_batch.DecodeBatch`) calls nothing else, so a new row layer type needs
only a `merge` that returns a `BatchLayerCache`."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BatchLayerCache(Protocol):
    """One model layer's cache for the rows of a decode batch, in batch order."""

    offset: Any  # positions held per row (an array, or an int where all rows agree)

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        """Append the step's keys and values [rows, heads, steps, dim]; return what the layer's
        attention reads (bt's layers may return a token that `row_attention` resolves)."""
        ...

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any) -> Any:
        """The attention mask of an N-position step over the rows' lengths."""
        ...

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
