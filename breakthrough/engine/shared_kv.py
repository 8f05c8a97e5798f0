"""KV caches whose rows share one physical copy of a prefix.

mlx-lm's `BatchKVCache` keeps one [rows, heads, T, dim] buffer per layer: every branch of an
anchor holds its own copy of the prefix's keys and values (four copies of 2.4 GB at t = 16k on a
Qwen3-4B-sized model), and the buffer grows by concatenation, so for one step the old and the new
buffers are both alive. Here a row is

    prefix (read-only views into the cell's one `PrefixCache`, shared by every branch of every
    anchor of that cell) + its own suffix buffer (allocated once at the row's final length),

and a layer's batch keys/values are assembled at attention time, one layer at a time: the same
left-padded [rows, heads, T, dim] tensor, with the same values, that `BatchKVCache` would have
handed to the attention (rows right-justified at the longest row, zero padding masked out by the
same `create_causal_mask`). So the attention sees exactly today's keys and values, and the memory
that stays allocated is the prefixes once plus each row's own tokens; the assembled tensor of
one layer lives only until that layer's attention has run.

`SharedRowCache` is one row's layer (a `KVCache`, so a batch-1 prefill and mlx-lm's single-row
code use it unchanged); `SharedBatchCache` is the batch of them in bt's decode loop (a
`batch_cache.BatchLayerCache`: rows join, leave and are taken out without copying a key or
value). Rows join with a one-token feed (`MlxEngine` prefills the rest at batch 1 first), so
the batch never runs a padded multi-token prefill."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from breakthrough.engine.mlx_compat import KVCache, create_causal_mask


class SharedRowCache(KVCache):
    """One row of one attention layer: `prefix_keys/values` (views, never written; None when
    the row has no shared prefix) followed by its own `keys/values` suffix buffer.

    `offset` is the row's length (prefix + suffix), as for a `KVCache`. `reserve(n)` sizes the
    suffix buffer for n more tokens at once, so a row whose final length is known never grows
    by concatenation (a write past the buffer still works: it reallocates, as `KVCache` does)."""

    # KVCache's slots, here the suffix buffers: [1, heads, size, dim] arrays (quantized
    # triples of them in a QuantizedSharedRowCache), None before the first write.
    keys: Any
    values: Any
    # True for a row in its cell's group buffer (`group_kv.GroupRowCache`): a batch step writes
    # it with one scatter per buffer and `group_attention` attends over it.
    in_group = False

    def __init__(
        self, prefix_keys: Any = None, prefix_values: Any = None, base: Any = None
    ) -> None:
        super().__init__()
        self.prefix_keys = prefix_keys
        self.prefix_values = prefix_values
        self.prefix_len = 0 if prefix_keys is None else int(prefix_keys.shape[2])
        self.suffix_len = 0
        self.offset = self.prefix_len
        self._wanted = 0  # suffix positions to allocate at the first write (reserve before it)
        # (keys, values): the whole buffers the prefix views start, when they are a cell's one
        # `PrefixCache` copy (`prefix_cache.shared_base`): rows with the same buffers attend
        # over them together (`prefix_attention`); None for a prefix of the row's own.
        self.base = base
        # The request's lane (`GenRequest.lane`): the place this row takes in a tile of rows
        # attending over `base` together (`prefix_attention`), a function of the request alone.
        self.lane = 0

    @classmethod
    def from_cache(cls, layer: KVCache) -> SharedRowCache:
        """A row whose prefix is what the `KVCache` `layer` holds (its arrays are kept as views:
        a slice of a `PrefixCache` stays the one shared copy, and its buffers are the row's
        `base`)."""
        from breakthrough.engine.prefix_cache import shared_base

        if layer.keys is None or layer.values is None or layer.offset == 0:
            return cls()
        return cls(
            layer.keys[..., : layer.offset, :],
            layer.values[..., : layer.offset, :],
            shared_base(layer),
        )

    # -- storage --------------------------------------------------------------------------
    def reserve(self, more: int) -> None:
        """Make room for `more` suffix positions beyond the current ones, in one allocation."""
        need = self.suffix_len + max(0, int(more))
        if self.keys is None:
            self._wanted = max(self._wanted, need)
        elif self._allocated() < need:
            self._reallocate(need)

    def _allocated(self) -> int:
        """Suffix positions the buffers hold (written or not)."""
        return int(self.keys.shape[2])

    def _reallocate(self, size: int) -> None:
        k_shape = (*self.keys.shape[:2], size, self.keys.shape[3])
        v_shape = (*self.values.shape[:2], size, self.values.shape[3])
        new_k = mx.zeros(k_shape, self.keys.dtype)
        new_v = mx.zeros(v_shape, self.values.dtype)
        if self.suffix_len:
            new_k[..., : self.suffix_len, :] = self.keys[..., : self.suffix_len, :]
            new_v[..., : self.suffix_len, :] = self.values[..., : self.suffix_len, :]
        self.keys, self.values = new_k, new_v

    def write(self, keys: Any, values: Any) -> None:
        """Append [1, heads, n, dim] keys and values to the suffix."""
        n = int(keys.shape[2])
        if self.keys is None:
            size = max(self._wanted, n)
            self.keys = mx.zeros((1, keys.shape[1], size, keys.shape[3]), keys.dtype)
            self.values = mx.zeros((1, values.shape[1], size, values.shape[3]), values.dtype)
        elif self.suffix_len + n > self.keys.shape[2]:
            self._reallocate(self.suffix_len + max(n, self.step))
        start = self.suffix_len
        self.keys[..., start : start + n, :] = keys
        self.values[..., start : start + n, :] = values
        self.suffix_len += n
        self.offset += n

    def parts(self) -> tuple[list[Any], list[Any]]:
        """The row's key and value pieces in order (prefix view, then the filled suffix)."""
        ks, vs = [], []
        if self.prefix_len:
            ks.append(self.prefix_keys[..., : self.prefix_len, :])
            vs.append(self.prefix_values[..., : self.prefix_len, :])
        if self.suffix_len:
            ks.append(self.keys[..., : self.suffix_len, :])
            vs.append(self.values[..., : self.suffix_len, :])
        return ks, vs

    def _geometry(self) -> tuple[int, int, int, Any]:
        """(kv heads, key dim, value dim, dtype) of this row's layer."""
        k = self.keys if self.keys is not None else self.prefix_keys
        v = self.values if self.values is not None else self.prefix_values
        return int(k.shape[1]), int(k.shape[3]), int(v.shape[3]), k.dtype

    def padded(self, left: int) -> tuple[Any, Any]:
        """[1, heads, left + offset, dim] keys and values: `left` zero positions, then the row."""
        ks, vs = self.parts()
        if left:
            heads, dk, dv, dtype = self._geometry()
            ks.insert(0, mx.zeros((1, heads, left, dk), dtype))
            vs.insert(0, mx.zeros((1, heads, left, dv), dtype))
        if len(ks) == 1:
            return ks[0], vs[0]
        return mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)

    # -- the KVCache interface ------------------------------------------------------------
    def update_and_fetch(self, keys, values):
        self.write(keys, values)
        return self.padded(0)

    def keys_and_values(self):
        return self.padded(0)

    @property
    def state(self):
        arrays = [a for a in (self.keys, self.values) if a is not None]
        return arrays, self.offset

    @state.setter
    def state(self, v):  # pragma: no cover - mlx-lm's cache files are not used by bt
        raise NotImplementedError("a SharedRowCache is not loaded from a state")

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop the last n positions: from the suffix first, then by shortening the prefix view."""
        n = min(self.offset, int(n))
        from_suffix = min(n, self.suffix_len)
        self.suffix_len -= from_suffix
        rest = n - from_suffix
        if rest:
            self.prefix_len -= rest
        self.offset -= n
        return n

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.offset == 0

    @property
    def nbytes(self) -> int:
        """Bytes this row holds on its own (its suffix buffer; the prefix is shared)."""
        if self.keys is None:
            return 0
        return int(self.keys.nbytes + self.values.nbytes)

    def to_quantized(self, group_size: int = 64, bits: int = 4):  # pragma: no cover
        raise NotImplementedError("a SharedRowCache is not quantized")

    @classmethod
    def merge(cls, caches: list[SharedRowCache]) -> SharedBatchCache:
        return SharedBatchCache(list(caches))


class SharedBatchCache:
    """One attention layer of a batch of `SharedRowCache` rows (`batch_cache.BatchLayerCache`):
    rows right-justified at `_idx` (the longest row), `left_padding` and per-row `offset` arrays,
    the causal mask mlx-lm's batch cache would give. Filtering and extending only move row
    objects: nothing is copied."""

    def __init__(self, rows: list[SharedRowCache]) -> None:
        self.rows = rows
        self._fetched_keys: Any = None  # what update_and_fetch last returned (identity check)
        self._windowed = False  # the last mask asked for a sliding window
        self._sync()

    def _sync(self) -> None:
        lengths = [r.offset for r in self.rows]
        self._idx = max(lengths, default=0)
        self.offset = mx.array(lengths)
        self.left_padding = mx.array([self._idx - n for n in lengths])

    def update_and_fetch(self, keys, values):
        n = int(keys.shape[2])
        if any(row.in_group for row in self.rows):
            return self._update_group(keys, values)
        for i, row in enumerate(self.rows):
            row.write(keys[i : i + 1], values[i : i + 1])
        self._idx += n
        self.offset = self.offset + n
        parts = [row.padded(self._idx - row.offset) for row in self.rows]
        if len(parts) == 1:
            fetched = parts[0]
        else:
            fetched = _joined([k for k, _ in parts], 0), _joined([v for _, v in parts], 0)
        # Lazy: never computed when the attention takes the rows one by one (row_attention).
        self._fetched_keys = fetched[0]
        return fetched

    def _update_group(self, keys, values):
        """A one-token step of a batch with rows in group buffers: every row's key and value
        written (group rows by one scatter per buffer, `GroupRowCache.write_step`; the others
        into their own suffix), and no padded tensor built: a lazy view of a group buffer would
        keep it from being donated to the next step's scatter. The step's own keys are handed
        back only as the token `rows_for_attention` recognises."""
        if int(keys.shape[2]) != 1:
            raise ValueError("rows in group buffers take one-token steps only")
        for i, row in enumerate(self.rows):
            if not row.in_group:
                row.write(keys[i : i + 1], values[i : i + 1])
        group_row: Any = next(row for row in self.rows if row.in_group)
        group_row.write_step(self.rows, keys, values)
        self._idx += 1
        self.offset = self.offset + 1
        self._fetched_keys = keys
        return keys, values

    def rows_for_attention(self, queries: Any, keys: Any) -> list[SharedRowCache] | None:
        """The rows, for `row_attention.attend`, when this is a one-token step on the keys this
        cache just fetched, without a sliding window; None otherwise (the padded tensor is
        used; never for rows in group buffers, which have none)."""
        if keys is not self._fetched_keys or int(queries.shape[2]) != 1 or self._windowed:
            if any(row.in_group for row in self.rows):
                raise RuntimeError("rows in group buffers reached an attention they cannot take")
            return None
        return list(self.rows)

    def make_mask(self, N: int, return_array: bool = False, **kwargs):
        self._windowed = kwargs.get("window_size") is not None
        return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding, **kwargs)

    @property
    def state(self):
        held: dict[int, Any] = {}
        for r in self.rows:
            arrays = r.state[0] if r.in_group else _arrays(r.keys) + _arrays(r.values)
            held.update((id(a), a) for a in arrays)
        return list(held.values())

    def filter(self, batch_indices) -> None:
        idx = batch_indices.tolist() if hasattr(batch_indices, "tolist") else list(batch_indices)
        self.rows = [self.rows[int(i)] for i in idx]
        self._sync()

    def extend(self, other: SharedBatchCache) -> None:
        self.rows = self.rows + list(other.rows)
        self._sync()

    def extract(self, idx: int) -> SharedRowCache:
        return self.rows[idx]

    def is_trimmable(self) -> bool:
        return False

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return not self.rows

    @property
    def nbytes(self) -> int:
        """Bytes held by the rows' own suffixes plus each distinct prefix buffer once."""
        held = sum(r.nbytes for r in self.rows)
        seen: set[int] = set()
        for r in self.rows:
            for a in _arrays(r.prefix_keys) + _arrays(r.prefix_values):
                if id(a) not in seen:
                    seen.add(id(a))
                    held += int(a.nbytes)
        return held


def _arrays(x: Any) -> list[Any]:
    """The arrays of a cache component: none, one array, or a quantized (packed, scales, biases)."""
    if x is None:
        return []
    return list(x) if isinstance(x, tuple) else [x]


def _joined(pieces: list[Any], axis: int) -> Any:
    """`pieces` concatenated along `axis`: arrays, or quantized triples component by component."""
    if isinstance(pieces[0], tuple):
        return tuple(
            mx.concatenate([p[i] for p in pieces], axis=axis) for i in range(len(pieces[0]))
        )
    return mx.concatenate(pieces, axis=axis)


class QuantizedSharedRowCache(SharedRowCache):
    """A `SharedRowCache` whose keys and values are mlx quantized triples (packed, scales,
    biases; `bits`, `group_size`), as mlx-lm's `QuantizedKVCache`: each position is quantized when
    written and the attention reads the quantized cache (mlx-lm's attention takes its quantized
    path for a cache with `bits`). `--kv-bits` holds about half (8 bits) or a quarter (4 bits)
    of a bfloat16 cache's bytes (`CacheBytes`); it changes tokens, so it is part of a run's
    identity."""

    def __init__(
        self,
        prefix_keys: Any = None,
        prefix_values: Any = None,
        *,
        bits: int = 8,
        group_size: int = 64,
    ) -> None:
        KVCache.__init__(self)
        self.base = None  # quantized rows attend row by row (prefix_attention: full precision)
        self.bits, self.group_size = int(bits), int(group_size)
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        self.prefix_len = 0 if prefix_keys is None else int(prefix_keys[0].shape[2])
        self.suffix_len = 0
        self.offset = self.prefix_len
        self._wanted = 0

    @classmethod
    def quantized_from(cls, layer: Any, bits: int, group_size: int) -> QuantizedSharedRowCache:
        """A row whose prefix is what a `QuantizedKVCache` holds (views of its triples); an
        empty row for an empty cache of any kind."""
        if getattr(layer, "keys", None) is None or layer.offset == 0:
            return cls(bits=bits, group_size=group_size)
        if not isinstance(layer.keys, tuple):
            raise ValueError("a full-precision prefix cannot start a quantized row")
        n = layer.offset
        return cls(
            tuple(x[..., :n, :] for x in layer.keys),
            tuple(x[..., :n, :] for x in layer.values),
            bits=layer.bits,
            group_size=layer.group_size,
        )

    def _allocated(self) -> int:
        return int(self.keys[0].shape[2])  # a (packed, scales, biases) triple

    @staticmethod
    def _empty(like: tuple, size: int) -> tuple:
        return tuple(mx.zeros((1, x.shape[1], size, x.shape[3]), x.dtype) for x in like)

    def _reallocate(self, size: int) -> None:
        new_k, new_v = self._empty(self.keys, size), self._empty(self.values, size)
        if self.suffix_len:
            for new, old in zip(new_k + new_v, self.keys + self.values, strict=True):
                new[..., : self.suffix_len, :] = old[..., : self.suffix_len, :]
        self.keys, self.values = new_k, new_v

    def write(self, keys: Any, values: Any) -> None:
        n = int(keys.shape[2])
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        if self.keys is None:
            size = max(self._wanted, n)
            self.keys, self.values = self._empty(qk, size), self._empty(qv, size)
        elif self.suffix_len + n > self.keys[0].shape[2]:
            self._reallocate(self.suffix_len + max(n, self.step))
        start = self.suffix_len
        for buf, new in zip(self.keys + self.values, tuple(qk) + tuple(qv), strict=True):
            buf[..., start : start + n, :] = new
        self.suffix_len += n
        self.offset += n

    def parts(self) -> tuple[list[Any], list[Any]]:
        ks, vs = [], []
        if self.prefix_len:
            ks.append(tuple(x[..., : self.prefix_len, :] for x in self.prefix_keys))
            vs.append(tuple(x[..., : self.prefix_len, :] for x in self.prefix_values))
        if self.suffix_len:
            ks.append(tuple(x[..., : self.suffix_len, :] for x in self.keys))
            vs.append(tuple(x[..., : self.suffix_len, :] for x in self.values))
        return ks, vs

    def padded(self, left: int) -> tuple[Any, Any]:
        ks, vs = self.parts()
        if left:
            like_k = self.keys if self.keys is not None else self.prefix_keys
            like_v = self.values if self.values is not None else self.prefix_values
            ks.insert(0, self._empty(like_k, left))
            vs.insert(0, self._empty(like_v, left))
        if len(ks) == 1:
            return ks[0], vs[0]
        return _joined(ks, 2), _joined(vs, 2)

    @property
    def state(self):
        return _arrays(self.keys) + _arrays(self.values), self.offset

    @state.setter
    def state(self, v):  # pragma: no cover - mlx-lm's cache files are not used by bt
        raise NotImplementedError("a QuantizedSharedRowCache is not loaded from a state")

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in _arrays(self.keys) + _arrays(self.values)))

    @classmethod
    def merge(cls, caches: list[SharedRowCache]) -> QuantizedSharedBatchCache:
        return QuantizedSharedBatchCache(list(caches))


class QuantizedSharedBatchCache(SharedBatchCache):
    """A batch of `QuantizedSharedRowCache` rows; `bits` and `group_size` send mlx-lm's attention
    down its quantized path."""

    def __init__(self, rows: list[SharedRowCache]) -> None:
        super().__init__(rows)
        first = rows[0] if rows else None
        self.bits = getattr(first, "bits", 8)
        self.group_size = getattr(first, "group_size", 64)

    def row_batch(self, i: int) -> QuantizedSharedBatchCache:
        """Row `i` alone, as a batch of one over the same row object (what it writes is the
        row's): the cache `forward_rows_apart` hands the model for that row's forward."""
        return QuantizedSharedBatchCache([self.rows[i]])

    def resync(self) -> None:
        """Re-read the rows' lengths after they were written through `row_batch` caches."""
        self._sync()


def rows_apart(cache: list[Any]) -> bool:
    """Whether a decode step over `cache` (one batch cache per layer) runs each row's forward
    alone (`forward_rows_apart`): when every layer holds quantized rows (`--kv-bits`).

    Why: a row's keys and values come from the model's projections, which run on the whole
    batch; a BLAS rounds a product's rows by the product's row count and a row's place among
    them (OpenBLAS on AMD Zen: bench/RESULTS.md), so a row's new key differs in its last bit
    between batch sizes. Full precision keeps that difference at one unit in the last place;
    quantizing the key to 8 or 4 bits can move it to the next level (1/255 of its group's
    range), which flips sampled tokens (`--kv-bits 8` samples used to follow
    `--batch-size`). A forward of the row alone has the same shapes whatever else is in flight,
    so the row's tokens equal its tokens at `--batch-size 1` by construction. Layers of other
    kinds (a sliding window, a recurrent state) are batch caches of mlx-lm's that cannot be
    split by row: those models keep the batched forward."""
    return bool(cache) and all(isinstance(c, QuantizedSharedBatchCache) for c in cache)


def forward_rows_apart(cache: list[Any], forward: Any, inputs: Any) -> tuple[Any, Any]:
    """(logits [n, V], hidden [n, d] or None) of one decode step in which each of the n rows of
    `cache` (`rows_apart`) runs `forward(inputs_row [1, 1], row_cache)` -> (logits [1, V],
    hidden [1, d] or None) alone; the batch caches' lengths are re-read afterwards."""
    logits, hidden = [], []
    for i in range(int(inputs.shape[0])):
        step_logits, step_hidden = forward(inputs[i : i + 1], [c.row_batch(i) for c in cache])
        logits.append(step_logits)
        hidden.append(step_hidden)
    for c in cache:
        c.resync()
    if any(h is None for h in hidden):
        return mx.concatenate(logits, axis=0), None
    return mx.concatenate(logits, axis=0), mx.concatenate(hidden, axis=0)
