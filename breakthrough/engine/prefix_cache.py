"""One prefill per base trace: KV-cache states "prompt + first n generated tokens" on demand.

The reference re-prefilled prompt + prefix for every branch and again for every answer phase
(protocol 3.3 steps 3 and 5). Here the prompt + base trace is prefilled once per cell (design
decision 2); a continuation at any cut point starts from a cheap copy of that cache cut back to
its prefix. Plain attention caches (mlx-lm `KVCache`) are cut by slicing; caches that cannot be
trimmed (e.g. sliding-window `RotatingKVCache`) are served from snapshots taken during the one
prefill and extended forward from the nearest snapshot."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

PREFILL_CHUNK = 512


def _is_plain(layer: Any) -> bool:
    from mlx_lm.models.cache import KVCache

    return type(layer) is KVCache


def slice_cache(cache: list[Any], n: int) -> list[Any]:
    """A new cache holding the first n positions of `cache` (plain KVCache layers only)."""
    from mlx_lm.models.cache import KVCache

    out = []
    for layer in cache:
        new = KVCache()
        if n > 0:
            new.keys = layer.keys[..., :n, :]
            new.values = layer.values[..., :n, :]
            new.offset = n
        out.append(new)
    return out


def cache_length(cache: list[Any]) -> int:
    return int(cache[0].offset) if cache else 0


def trim_to(cache: list[Any], n: int) -> list[Any]:
    """`cache` cut back to n positions: sliced when plain, else trimmed in place if possible."""
    if all(_is_plain(c) for c in cache):
        return slice_cache(cache, n)
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    have = cache_length(cache)
    if not can_trim_prompt_cache(cache):
        raise ValueError("cache cannot be trimmed")
    trim_prompt_cache(cache, have - n)
    return cache


def prefill(model: Any, cache: list[Any], ids: Sequence[int], chunk: int = PREFILL_CHUNK) -> None:
    """Run `ids` through the model into `cache` (chunked, as mlx-lm's prefill_step_size)."""
    import mlx.core as mx

    for i in range(0, len(ids), chunk):
        model(mx.array([list(ids[i : i + chunk])]), cache=cache)
        mx.eval([c.state for c in cache])


class PrefixCache:
    """Cache states of `sequence` (prompt + base trace) at any length, after one prefill.

    The prefill runs on the first `state()` call, so a cell whose samples are all stored costs
    nothing on a rerun. `state(n)` returns a fresh cache object holding sequence[:n]; callers
    may hand it to the engine (which copies it again) or mutate it. `prefill_tokens` counts every
    token pushed through the model by this object (the benchmark's "prefill tokens per cell")."""

    def __init__(self, model: Any, sequence: Sequence[int], snapshot_at: Sequence[int] = ()) -> None:
        self.model = model
        self.sequence = [int(t) for t in sequence]
        self.snapshot_at = sorted({int(s) for s in snapshot_at if 0 < s <= len(self.sequence)})
        self.prefill_tokens = 0
        self.full: list[Any] | None = None
        self.snapshots: dict[int, list[Any]] = {}
        self.plain: bool | None = None

    def _prefill(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        cache = make_prompt_cache(self.model)
        self.plain = all(_is_plain(c) for c in cache)
        if self.plain:
            prefill(self.model, cache, self.sequence)
            self.prefill_tokens += len(self.sequence)
            self.full = cache
            return
        # Non-trimmable caches: stop at every requested cut and keep a copy.
        pos = 0
        for cut in self.snapshot_at:
            prefill(self.model, cache, self.sequence[pos:cut])
            self.prefill_tokens += cut - pos
            pos = cut
            self.snapshots[cut] = copy.deepcopy(cache)
        self.snapshots.setdefault(0, make_prompt_cache(self.model))

    def state(self, n: int) -> list[Any]:
        if not 0 <= n <= len(self.sequence):
            raise ValueError(f"cut {n} outside 0..{len(self.sequence)}")
        if self.plain is None:
            self._prefill()
        if self.plain:
            return slice_cache(self.full, n)
        base = max(k for k in self.snapshots if k <= n)
        cache = copy.deepcopy(self.snapshots[base])
        if n > base:
            prefill(self.model, cache, self.sequence[base:n])
            self.prefill_tokens += n - base
        return cache


def kv_bytes_per_token(model: Any) -> float:
    """Bytes of KV state one position costs (all layers), from a one-token forward pass."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    total = 0.0
    for layer in cache:
        for name in ("keys", "values"):
            arr = getattr(layer, name, None)
            if arr is not None and hasattr(arr, "shape") and len(arr.shape) == 4:
                total += arr[..., :1, :].nbytes
    return total
