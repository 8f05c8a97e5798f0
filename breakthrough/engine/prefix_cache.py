"""One prefill per base trace: KV-cache states "prompt + first n generated tokens" on demand.

The reference re-prefilled prompt + prefix for every branch and again for every answer phase
(protocol 3.3 steps 3 and 5). Here the prompt + base trace is prefilled once per cell (design
decision 2); a continuation at any cut point starts from a cheap copy of that cache cut back to
its prefix.

Plain attention layers (mlx-lm `KVCache`) are cut by slicing the one full cache. Layers that
cannot be cut back (a sliding-window `RotatingKVCache` once its window has rotated, the recurrent
`ArraysCache` state of linear-attention layers) are served from snapshots of THOSE LAYERS ONLY,
taken during the one prefill at the cuts the requests will ask for (`snapshot_at`), and extended
forward from the nearest snapshot for any other cut. So a model mixing both (Gemma-4: sliding +
full attention; Qwen3.5: gated-delta + full attention) holds one full-length copy of its plain
layers plus, per snapshot, a bounded state (the window, or the fixed recurrent state):

    bytes = L * plain_bytes_per_token + S * (window * sliding_bytes_per_token + recurrent_bytes)

for a prefix of L tokens and S snapshots: linear in the trace length, linear in the anchor count
with a slope that does not grow with the trace. (Snapshots that deep-copied every layer cost
sum_i cut_i * plain_bytes_per_token, about twice the full cache for the doubling anchor grid.)
`cache_bytes` gives the layout of a model for `MlxEngine.plan` (the engine's memory budget)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PREFILL_CHUNK = 512
KV_STEP = 256  # mlx-lm's KVCache grows its buffers in steps of this many positions


def _stepped(tokens: int) -> int:
    return -(-max(int(tokens), 0) // KV_STEP) * KV_STEP


def _is_plain(layer: Any) -> bool:
    from breakthrough.engine.mlx_compat import KVCache, QuantizedKVCache

    return type(layer) in (KVCache, QuantizedKVCache)


def _plain_layer(layer: Any, n: int) -> Any:
    """A new `KVCache` (or `QuantizedKVCache`) holding views of the first n positions of a
    plain layer."""
    from breakthrough.engine.mlx_compat import KVCache, QuantizedKVCache

    new: Any  # mlx-lm types its caches' slots as None until written
    keys, values = layer.keys, layer.values
    if type(layer) is QuantizedKVCache:
        new = QuantizedKVCache(group_size=layer.group_size, bits=layer.bits)
        if n > 0:
            new.keys = tuple(x[..., :n, :] for x in keys)
            new.values = tuple(x[..., :n, :] for x in values)
            new.offset = n
        return new
    new = KVCache()
    if n > 0:
        new.keys = keys[..., :n, :]
        new.values = values[..., :n, :]
        new.offset = n
        # the buffers these views start (`shared_base`): rows cut from them share attention
        new._bt_base = (keys, values, n)
    return new


def shared_base(layer: Any) -> tuple[Any, Any] | None:
    """(keys, values) buffers of the `PrefixCache` a `KVCache` layer was cut from
    (`_plain_layer`), while it still holds just that cut (nothing written since); else None."""
    base = getattr(layer, "_bt_base", None)
    if base is None or int(layer.offset) != base[2] or layer.keys.shape[2] != base[2]:
        return None
    return base[0], base[1]


KV_GROUP_SIZE = 64  # mlx's quantization group along the head dimension (`--kv-bits`)


def make_cache(model: Any, kv_bits: int | None = None) -> list[Any]:
    """mlx-lm's `make_prompt_cache`, with its plain `KVCache` layers as `QuantizedKVCache` of
    `kv_bits` bits when asked (`--kv-bits`: positions are quantized as they are written, and
    the attention reads them quantized)."""
    from breakthrough.engine.mlx_compat import KVCache, QuantizedKVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    if not kv_bits:
        return cache
    return [
        QuantizedKVCache(group_size=KV_GROUP_SIZE, bits=int(kv_bits)) if type(c) is KVCache else c
        for c in cache
    ]


def slice_cache(cache: list[Any], n: int) -> list[Any]:
    """A new cache holding the first n positions of `cache` (plain KVCache layers only)."""
    return [_plain_layer(layer, n) for layer in cache]


def cache_length(cache: list[Any]) -> int:
    """Positions a cache holds: the offset of its attention layers (recurrent `ArraysCache`
    layers have no length of their own, so a hybrid model is read from its other layers)."""
    for layer in cache:
        if hasattr(layer, "offset"):
            return int(layer.offset)
    if cache:
        raise ValueError("cache has no attention layer to tell its length")
    return 0


def _can_trim(layer: Any, k: int) -> bool:
    """Whether `layer` can drop its last k positions exactly. A sliding window that has rotated
    can drop ONE: the freed slot is the next write's, so the window the following token sees is
    exactly its W most recent positions (mlx-lm's own check refuses any trim once rotated)."""
    from breakthrough.engine.mlx_compat import RotatingKVCache

    if k == 0:
        return True
    if type(layer) is RotatingKVCache:
        return layer.is_trimmable() or (k == 1 and layer.keep == 0 and layer._idx >= 1)
    try:
        return bool(layer.is_trimmable())
    except Exception:  # pragma: no cover
        return False


def trim_to(cache: list[Any], n: int) -> list[Any]:
    """`cache` cut back to n positions: sliced when plain, returned as is when it already holds
    n, else trimmed in place (a rotated window by one position at most). ValueError when it
    cannot be cut back exactly (a recurrent state, a rotated window by more than one): the
    caller must rebuild that state."""
    if all(_is_plain(c) for c in cache):
        return slice_cache(cache, n)
    have = cache_length(cache)
    if have == n:
        return cache
    k = have - n
    if k < 0 or not all(_can_trim(c, k) for c in cache):
        raise ValueError(f"cache of {have} positions cannot be cut back to {n}")
    for layer in cache:
        layer.trim(k)
    return cache


SCORES_PER_HEAD = 1 << 20  # query x key entries of one chunk's attention, per head and layer


def prefill_chunk(length: int, chunk: int = PREFILL_CHUNK) -> int:
    """The chunk for a prefill reaching `length` positions: `chunk`, halved (down to 64) while
    chunk x length exceeds SCORES_PER_HEAD. Where attention is not fused (MLX on CPU) one chunk
    materialises chunk x length scores per head: 512 x 8,251 x 4 heads x 4 B = 68 MB on the
    tiny test model, more than a small --memory-gb (bench/long_trace.py)."""
    while chunk > 64 and chunk * length > SCORES_PER_HEAD:
        chunk //= 2
    return chunk


def reserve_plain(cache: list[Any], tokens: int) -> None:
    """Grow every plain `KVCache` layer of `cache` that holds keys to buffers of `tokens`
    positions (rounded up to KV_STEP) in one allocation, so that a prefill up to that length
    never grows them by concatenation (mlx-lm's growth keeps the old and the new buffer alive
    together: twice a 16K prefix for one step)."""
    import mlx.core as mx

    size = _stepped(tokens)
    for layer in cache:
        if type(layer).__name__ != "KVCache" or layer.keys is None or layer.keys.shape[2] >= size:
            continue  # (a QuantizedKVCache grows in its own steps: a quantized prefix is small)
        n = layer.offset
        keys = mx.zeros((*layer.keys.shape[:2], size, layer.keys.shape[3]), layer.keys.dtype)
        values = mx.zeros(
            (*layer.values.shape[:2], size, layer.values.shape[3]), layer.values.dtype
        )
        if n:
            keys[..., :n, :] = layer.keys[..., :n, :]
            values[..., :n, :] = layer.values[..., :n, :]
        layer.keys, layer.values = keys, values
        mx.eval(layer.keys, layer.values)


def prefill(model: Any, cache: list[Any], ids: Sequence[int], chunk: int = PREFILL_CHUNK) -> None:
    """Run `ids` through the model into `cache` in chunks (as mlx-lm's prefill_step_size),
    smaller ones as the cache grows long (`prefill_chunk`). Plain layers are sized for the
    whole prefill after its first chunk (`reserve_plain`): no growth transient."""
    import mlx.core as mx

    i = 0
    try:
        start = cache_length(cache)
    except ValueError:  # only recurrent layers: no attention scores to bound
        start = 0
    while i < len(ids):
        step = prefill_chunk(start + i + chunk, chunk)
        model(mx.array([list(ids[i : i + step])]), cache=cache)
        mx.eval([c.state for c in cache])
        if i == 0 and step < len(ids):
            reserve_plain(cache, start + len(ids))
        i += step


def layer_nbytes(layer: Any) -> int:
    """Bytes one cache layer holds (0 for an empty or absent one)."""
    if layer is None:
        return 0
    try:
        return int(layer.nbytes)
    except Exception:  # pragma: no cover - a layer type without nbytes
        return 0


class PrefixCache:
    """Cache states of `sequence` (prompt + base trace) at any length, after one prefill.

    The prefill runs on the first `state()` call, so a cell whose samples are all stored costs
    nothing on a rerun. `state(n)` returns a fresh cache object holding sequence[:n]; callers
    may hand it to the engine (which copies it again) or mutate it. `prefill_tokens` counts every
    token pushed through the model by this object (the benchmark's "prefill tokens per cell");
    `nbytes` is what it holds (the full plain layers plus the snapshots)."""

    def __init__(
        self,
        model: Any,
        sequence: Sequence[int],
        snapshot_at: Sequence[int] = (),
        kv_bits: int | None = None,
    ) -> None:
        self.model = model
        self.kv_bits = kv_bits  # quantized plain layers (`make_cache`)
        self.sequence = [int(t) for t in sequence]
        self.snapshot_at = sorted({int(s) for s in snapshot_at if 0 < s <= len(self.sequence)})
        self.prefill_tokens = 0
        self.full: list[Any] | None = None
        # cut -> per-layer copies of the untrimmable layers (None where the layer is plain)
        self.snapshots: dict[int, list[Any]] = {}
        self.plain: bool | None = None
        self._plain_mask: list[bool] = []
        # The cell's group buffers once a group row asked for them (`group_cell`): they then
        # hold the prefix, and this object no longer does.
        self.group: Any = None

    def _prefill(self) -> None:
        from breakthrough.engine.mlx_compat import make_prompt_cache

        cache = make_cache(self.model, self.kv_bits)
        self._plain_mask = [_is_plain(c) for c in cache]
        self.plain = all(self._plain_mask)
        if self.plain:
            prefill(self.model, cache, self.sequence)
            self.prefill_tokens += len(self.sequence)
            self.full = cache
            return
        # Untrimmable layers: stop at every requested cut and copy those layers only; the plain
        # layers are sliced from the one full cache, as in the plain case.
        self.snapshots[0] = [
            None if p else copy.deepcopy(c)
            for p, c in zip(self._plain_mask, make_prompt_cache(self.model), strict=True)
        ]
        pos = 0
        for cut in self.snapshot_at:
            prefill(self.model, cache, self.sequence[pos:cut])
            self.prefill_tokens += cut - pos
            pos = cut
            self.snapshots[cut] = [
                None if p else copy.deepcopy(c)
                for p, c in zip(self._plain_mask, cache, strict=True)
            ]
        # plain layers hold sequence[:pos]; the others live on in the snapshots only
        self.full = [c if p else None for p, c in zip(self._plain_mask, cache, strict=True)]

    def hand_over(self, build: Any) -> Any:
        """The object `build(layers)` makes of this prefix's plain layers (a cell's group buffers,
        `group_rows.group_cell`), made once and kept as `group`; each layer is handed to
        `build` as a `KVCache` whose arrays this object then drops, so that no view of the new
        buffers lives here. Plain models only (`plain`)."""
        if self.group is None:
            if self.plain is None:
                self._prefill()
            if not self.plain or self.full is None:
                raise ValueError("only a plain model's prefix can be handed over")
            self.group = build(self.full)
        return self.group

    @property
    def nbytes(self) -> int:
        """Bytes held: the full cache's plain layers (all of it for a plain model) plus every
        snapshot of the untrimmable layers; a cell's group buffers once they hold the prefix."""
        if self.group is not None:
            return int(self.group.nbytes)
        if self.full is None:
            return 0
        held = sum(layer_nbytes(c) for p, c in zip(self._plain_mask, self.full, strict=True) if p)
        for snap in self.snapshots.values():
            held += sum(layer_nbytes(c) for c in snap)
        return held

    def state(self, n: int) -> list[Any]:
        if not 0 <= n <= len(self.sequence):
            raise ValueError(f"cut {n} outside 0..{len(self.sequence)}")
        if self.group is not None:
            raise ValueError("this prefix lives in group buffers now (hand_over)")
        if self.plain is None:
            self._prefill()
        held = self.full
        assert held is not None  # set by _prefill
        if self.plain:
            return slice_cache(held, n)
        base = max(k for k in self.snapshots if k <= n)
        cache = [
            _plain_layer(full, base) if p else copy.deepcopy(snap)
            for p, full, snap in zip(self._plain_mask, held, self.snapshots[base], strict=True)
        ]
        if n > base:
            prefill(self.model, cache, self.sequence[base:n])
            self.prefill_tokens += n - base
        return cache


@dataclass(frozen=True)
class CacheBytes:
    """A model's cache layout in bytes: `plain_per_token` for layers that grow with the sequence
    (`plain_layers` of them), `bounded_per_token` up to `window` tokens for sliding-window layers,
    `fixed` for recurrent states (per row, whatever the length), and `scores_per_token`: the
    attention scores one layer's decode step materialises per row and cached position where
    attention is not fused (float32, every query head, a few temporaries).

    This is the memory rule of `MlxEngine`: a row holds its OWN tokens only (a
    shared prefix is held once, by the cell's `PrefixCache`) in buffers allocated once at the
    row's final length (`own_row`, no growth transient), and a decode step adds, for the one
    layer being attended, the batch's keys and values assembled at the longest row's length
    plus its scores (`step_transient`)."""

    plain_per_token: float
    bounded_per_token: float
    window: int
    fixed: float
    plain_layers: int = 1
    scores_per_token: float = 0.0

    def row(self, tokens: int) -> float:
        """Bytes of one row's cache at `tokens` positions, in mlx-lm's growing buffers (rounded
        up to KV_STEP positions)."""
        return (
            self.plain_per_token * _stepped(tokens)
            + self.bounded_per_token * min(_stepped(tokens), self.window)
            + self.fixed
        )

    def own_row(self, tokens: int) -> float:
        """Bytes a row of `tokens` own positions allocates (`shared_kv.SharedRowCache`: its
        plain layers exactly once; sliding-window layers still grow in mlx-lm's batch cache,
        so they count twice up to their window)."""
        return (
            self.plain_per_token * max(int(tokens), 0)
            + 2 * self.bounded_per_token * min(_stepped(tokens), self.window)
            + self.fixed
        )

    def step_transient(self, rows: int, longest: int) -> float:
        """Bytes alive only during a decode step of `rows` rows padded to `longest` positions:
        two layers' assembled keys and values (one being attended, the next being built) and
        one layer's attention scores."""
        layers = max(self.plain_layers, 1)
        assembled = min(2, layers) * self.plain_per_token / layers
        return rows * max(int(longest), 1) * (assembled + self.scores_per_token)

    def prefix_cache(self, tokens: int, snapshots: int) -> float:
        """Upper bound of `PrefixCache.nbytes` for a prefix of `tokens` with `snapshots`
        snapshots (a sliding layer's copy may hold its window plus one prefill chunk)."""
        full = self.plain_per_token * _stepped(tokens)
        if self.bounded_per_token == 0 and self.fixed == 0:
            return full
        per_snapshot = (
            self.bounded_per_token * min(tokens, self.window + PREFILL_CHUNK - 1) + self.fixed
        )
        return full + (snapshots + 1) * per_snapshot


def cache_bytes(model: Any, kv_bits: int | None = None) -> CacheBytes:
    """The model's `CacheBytes`, from a two-token forward pass through a fresh cache (plain
    layers quantized to `kv_bits` bits when asked: their packed values, scales and biases)."""
    import mlx.core as mx

    from breakthrough.engine.mlx_compat import (
        ArraysCache,
        KVCache,
        RotatingKVCache,
        make_prompt_cache,
    )

    cache = make_prompt_cache(model)
    model(mx.array([[0, 0]]), cache=cache)
    mx.eval([c.state for c in cache])
    plain = bounded = fixed = 0.0
    window = plain_layers = 0
    for layer in cache:
        if isinstance(layer, (KVCache, RotatingKVCache)):
            kv: tuple[Any, Any] = (layer.keys, layer.values)  # written by the forward above
            per = sum(a[..., :1, :].nbytes for a in kv)
            if kv_bits and not isinstance(layer, RotatingKVCache):
                per = sum(
                    q.nbytes
                    for a in kv
                    for q in mx.quantize(a[..., :1, :], group_size=KV_GROUP_SIZE, bits=int(kv_bits))
                )
            if isinstance(layer, RotatingKVCache):
                bounded += per
                window = max(window, int(layer.max_size))
            else:
                plain += per
                plain_layers += 1
        elif isinstance(layer, ArraysCache):
            fixed += layer_nbytes(layer)
        else:  # an unknown layer type: count what it holds for 2 tokens as growing
            plain += layer_nbytes(layer) / 2
    return CacheBytes(
        plain,
        bounded,
        window,
        fixed,
        max(plain_layers, 1),
        SCORE_TEMPORARIES * 4 * query_heads(model),
    )


SCORE_TEMPORARIES = 3  # scores, their exponentials, the probabilities (float32 each)


def query_heads(model: Any) -> int:
    """The model's attention heads per layer (its config's `num_attention_heads`; 32 when the
    model does not say), for the size of a decode step's attention scores."""
    for holder in (model, getattr(model, "language_model", None)):
        args = getattr(holder, "args", None)
        for name in ("num_attention_heads", "n_heads"):
            value = getattr(args, name, None)
            if isinstance(value, int) and value > 0:
                return value
        text = getattr(args, "text_config", None)
        if isinstance(text, dict) and isinstance(text.get("num_attention_heads"), int):
            return int(text["num_attention_heads"])
    return 32


def kv_heads(model: Any) -> int:
    """The KV heads of the model's plain attention layers, from a one-token forward pass (the
    config's names vary by family; the cache does not lie)."""
    import mlx.core as mx

    from breakthrough.engine.mlx_compat import KVCache, make_prompt_cache

    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    for layer in cache:
        if type(layer) is KVCache and layer.keys is not None:
            return int(layer.keys.shape[1])
    return max(1, query_heads(model))


def kv_bytes_per_token(model: Any) -> float:
    """Bytes of KV state one position costs (all attention layers), from a one-token forward
    pass: an upper bound per token for any length (sliding layers counted as growing)."""
    b = cache_bytes(model)
    return b.plain_per_token + b.bounded_per_token
