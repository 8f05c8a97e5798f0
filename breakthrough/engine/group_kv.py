"""Group buffers: one key and one value buffer per cell and plain attention layer, holding the
cell's prefix and a fixed number of slots for its rows' own tokens (the GPU path).

On a GPU a decode step's cost is its kernel launches, not its bytes, and shared-prefix attention
over separate per-row buffers (`prefix_attention`) issues a few dozen small ops per row and layer.
Here every row of a cell lives in its cell's one buffer per layer,

    [ prefix (the cell's prompt + base trace) | slot 0 | slot 1 | ... | slot S-1 | trash ]

so that the rows of a cell attend with one fused `scaled_dot_product_attention` call per chunk of
rows (`group_attention`), each row masked to its own prefix length plus its own slot. Nothing is
copied per row or step: a step's new keys and values of every row of the batch go into each cell's
buffer with one scatter per buffer (rows of other cells write to the trash positions, which no
row reads), and the buffer, held by one Python reference only, is donated to that scatter.

Batch invariance (a row's tokens never depend on the rows that share its batch). The buffer's
length is fixed for the cell's life (`GroupShape`), so the key length of every attention call is
too; a row's slot is a function of its own request (`GroupCell.slot_for`: its anchor's ordinal and
its lane), never of which slots were free, so its keys always sit at the same positions; and its
place in its chunk is its slot's place (`slot % chunk`). A request whose slot is taken waits
(`MlxEngine` parks it) rather than taking another. Masked positions contribute exact zeros, so the
other rows' slots and stale values never enter a row's result.

A finished row's own keys and values are copied out (`GroupKept`) when it keeps its state for an
answer phase, and its slot is free again; the follower writes them back into its slot. Nothing
outside this module holds a view of a group buffer: a live view would stop the donation and turn
every scatter into a copy of the whole buffer."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from breakthrough.engine.shared_kv import SharedRowCache

SLOT_ALIGN = 256  # a slot's positions are a multiple of this (= mlx-lm's KVCache step)
TRASH = 32  # positions at the buffer's end that rows of other cells write a step's keys to
# Rows per fused attention call: Metal's vector kernel takes query length <= 8 and query length x
# query heads per KV head <= 32 (8 rows for Qwen3-4B's 32 over 8 heads).
MAX_CHUNK_ROWS = 8
MAX_CHUNK_QUERIES = 32


def chunk_rows(query_heads: int, kv_heads: int) -> int:
    """Rows per fused attention call for a model's attention shape (at least 1)."""
    per_kv = max(1, int(query_heads) // max(1, int(kv_heads)))
    return max(1, min(MAX_CHUNK_ROWS, MAX_CHUNK_QUERIES // per_kv))


def slot_positions(own_tokens: int) -> int:
    """A slot's size for rows of at most `own_tokens` own positions (rounded up to SLOT_ALIGN)."""
    return -(-max(int(own_tokens), 1) // SLOT_ALIGN) * SLOT_ALIGN


@dataclass(frozen=True)
class GroupShape:
    """What a cell's group buffers look like, fixed for the engine's plan.

    slots: slots per cell (a multiple of `chunk`).
    slot_size: positions per slot (a multiple of SLOT_ALIGN): a row's own tokens at most.
    chunk: rows per fused attention call (`chunk_rows`).
    lanes: the lanes one anchor's samples take (the protocol's samples): an anchor's rows fill
        `lanes` consecutive slots."""

    slots: int
    slot_size: int
    chunk: int
    lanes: int = 4

    @property
    def own_positions(self) -> int:
        """A buffer's positions past its prefix: the slots and the trash."""
        return self.slots * self.slot_size + TRASH

    def positions(self, prefix_room: int) -> int:
        """A buffer's length for a prefix of `prefix_room` positions."""
        return int(prefix_room) + self.own_positions


def slot_for(starts: tuple[int, ...], prefix_len: int, lane: int, shape: GroupShape) -> int:
    """The slot of a row whose prefix is the first `prefix_len` positions of a cell whose
    anchors start at `starts` (sorted): its anchor's ordinal (the last start at or before
    prefix_len + 1: a reasoning row's prompt ends at its anchor) times the lanes, plus its lane,
    modulo the slots. A function of the request alone (module doc)."""
    ordinal = max(0, bisect.bisect_right(starts, int(prefix_len) + 1) - 1)
    return (ordinal * shape.lanes + int(lane)) % shape.slots


class GroupLayer:
    """One plain attention layer of a cell: its group buffers ([1, kv heads, length, dim]) and
    where the prefix ends and the slots start."""

    __slots__ = ("keys", "values", "prefix_len", "prefix_room", "shape")

    def __init__(self, keys: Any, values: Any, prefix_len: int, shape: GroupShape) -> None:
        self.keys, self.values = keys, values
        self.prefix_len = int(prefix_len)
        self.prefix_room = int(keys.shape[2]) - shape.own_positions
        self.shape = shape

    @classmethod
    def from_prefix(cls, keys: Any, values: Any, prefix_len: int, shape: GroupShape) -> GroupLayer:
        """A group layer holding the first `prefix_len` positions of a prefix cache's buffers
        (copied once, into a buffer with room for the slots)."""
        room = -(-max(int(prefix_len), 1) // SLOT_ALIGN) * SLOT_ALIGN
        length = shape.positions(room)
        new_k = mx.zeros((1, keys.shape[1], length, keys.shape[3]), keys.dtype)
        new_v = mx.zeros((1, values.shape[1], length, values.shape[3]), values.dtype)
        if prefix_len:
            new_k[..., :prefix_len, :] = keys[..., :prefix_len, :]
            new_v[..., :prefix_len, :] = values[..., :prefix_len, :]
        mx.eval(new_k, new_v)
        return cls(new_k, new_v, prefix_len, shape)

    @property
    def length(self) -> int:
        return int(self.keys.shape[2])

    @property
    def trash(self) -> int:
        """The position rows of other cells write a step's keys to (never read)."""
        return self.length - 1

    def slot_start(self, slot: int) -> int:
        return self.prefix_room + int(slot) * self.shape.slot_size

    def write_run(self, start: int, keys: Any, values: Any) -> None:
        """Write [1, heads, n, dim] keys and values at positions start.. (a row's batch-1 prefill
        or its kept tokens written back)."""
        n = int(keys.shape[2])
        self.keys[..., start : start + n, :] = keys
        self.values[..., start : start + n, :] = values

    def scatter(self, positions: Any, keys: Any, values: Any) -> None:
        """One decode step's keys and values of the whole batch ([rows, heads, 1, dim]) at
        `positions` ([1, 1, rows, 1] int32: each row's slot's next position, or the trash): one
        `put_along_axis` each, the buffer donated to it (no index arrays built per layer)."""
        self.keys = mx.put_along_axis(self.keys, positions, keys.transpose(2, 1, 0, 3), axis=2)
        self.values = mx.put_along_axis(
            self.values, positions, values.transpose(2, 1, 0, 3), axis=2
        )

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)


class GroupCell:
    """A cell's group layers (one per layer: group buffers are for models whose layers are all
    plain attention), its prefix's anchor starts and which slots rows hold now."""

    def __init__(self, key: str, layers: list[GroupLayer], starts, shape: GroupShape):
        self.key = key
        self.layers = layers
        self.starts = tuple(sorted(int(s) for s in starts))
        self.shape = shape
        self.busy: dict[int, str] = {}  # slot -> key of the request holding it

    def slot_for(self, prefix_len: int, lane: int) -> int:
        """`slot_for` in this cell."""
        return slot_for(self.starts, prefix_len, lane, self.shape)

    def free(self, slot: int) -> bool:
        return slot not in self.busy

    def take(self, slot: int, key: str) -> None:
        if slot in self.busy:
            raise RuntimeError(f"group slot {slot} of {self.key} is held by {self.busy[slot]}")
        self.busy[slot] = key

    def release(self, slot: int, key: str) -> None:
        if self.busy.get(slot) == key:
            del self.busy[slot]

    @property
    def prefix_len(self) -> int:
        return self.layers[0].prefix_len if self.layers else 0

    @property
    def nbytes(self) -> int:
        return sum(g.nbytes for g in self.layers)


class GroupRowCache(SharedRowCache):
    """One row of one plain layer in its cell's group buffer: positions [0, prefix_len) of the
    buffer, then `suffix_len` own positions in its slot. `SharedBatchCache` writes a batch's
    step with one scatter per buffer (`group_step_write`) and `group_attention` attends; a
    batch-1 prefill (`update_and_fetch`) writes its run into the slot and returns the row's keys
    joined (a copy alive for that prefill only)."""

    in_group = True

    def __init__(self, layer: GroupLayer, cell: GroupCell, slot: int, prefix_len: int) -> None:
        super().__init__()
        self.layer, self.cell, self.slot = layer, cell, int(slot)
        self.prefix_len = int(prefix_len)
        self.offset = self.prefix_len
        self.lane = self.slot % cell.shape.chunk

    @property
    def own_start(self) -> int:
        return self.layer.slot_start(self.slot)

    def write(self, keys: Any, values: Any) -> None:
        n = int(keys.shape[2])
        if self.suffix_len + n > self.layer.shape.slot_size:
            raise RuntimeError(f"a row outgrew its group slot ({self.layer.shape.slot_size})")
        self.layer.write_run(self.own_start + self.suffix_len, keys, values)
        self.suffix_len += n
        self.offset += n

    def parts(self) -> tuple[list[Any], list[Any]]:
        ks, vs = [], []
        if self.prefix_len:
            ks.append(self.layer.keys[..., : self.prefix_len, :])
            vs.append(self.layer.values[..., : self.prefix_len, :])
        if self.suffix_len:
            a, b = self.own_start, self.own_start + self.suffix_len
            ks.append(self.layer.keys[..., a:b, :])
            vs.append(self.layer.values[..., a:b, :])
        return ks, vs

    def reserve(self, more: int) -> None:
        return None  # the slot is the row's room

    @property
    def state(self):
        return [self.layer.keys, self.layer.values], self.offset

    @state.setter
    def state(self, v):  # pragma: no cover - mlx-lm's cache files are not used by bt
        raise NotImplementedError("a GroupRowCache is not loaded from a state")

    @property
    def nbytes(self) -> int:
        return 0  # its slot is part of the cell's buffer (GroupCell.nbytes)

    @staticmethod
    def write_step(rows: list[Any], keys: Any, values: Any) -> None:
        """`group_step_write` (`SharedBatchCache` reaches it through a group row)."""
        group_step_write(rows, keys, values)

    def kept(self) -> GroupKept:
        """This row's state as a copy of its own keys and values (no view of the buffer)."""
        ks = vs = None
        if self.suffix_len:
            a, b = self.own_start, self.own_start + self.suffix_len
            ks, vs = _copied(self.layer.keys[..., a:b, :]), _copied(self.layer.values[..., a:b, :])
        return GroupKept(self.layer, self.cell, self.prefix_len, ks, vs)


class GroupKept:
    """A finished group row's state of one layer, kept for the request that follows it: its
    prefix length in its cell and a copy of its own keys and values."""

    __slots__ = ("layer", "cell", "prefix_len", "own_keys", "own_values", "offset")

    def __init__(self, layer: GroupLayer, cell: GroupCell, prefix_len: int, keys, values) -> None:
        self.layer, self.cell, self.prefix_len = layer, cell, int(prefix_len)
        self.own_keys, self.own_values = keys, values
        own = 0 if keys is None else int(keys.shape[2])
        self.offset = self.prefix_len + own

    def trim_to(self, n: int) -> GroupKept:
        """This state cut back to n positions (n >= prefix_len)."""
        own = int(n) - self.prefix_len
        if own < 0:
            raise ValueError("a kept group row cannot be cut into its prefix")
        keys = None if self.own_keys is None or own == 0 else self.own_keys[..., :own, :]
        values = None if self.own_values is None or own == 0 else self.own_values[..., :own, :]
        return GroupKept(self.layer, self.cell, self.prefix_len, keys, values)

    def is_trimmable(self) -> bool:
        return True

    @property
    def state(self):
        return [a for a in (self.own_keys, self.own_values) if a is not None], self.offset

    @property
    def nbytes(self) -> int:
        if self.own_keys is None or self.own_values is None:
            return 0
        return int(self.own_keys.nbytes + self.own_values.nbytes)


def is_group_cache(cache: list[Any]) -> bool:
    """Whether a row's or kept state's cache lives in a group buffer."""
    return any(isinstance(layer, (GroupRowCache, GroupKept)) for layer in cache)


def group_step_write(rows: list[Any], keys: Any, values: Any) -> None:
    """Write one decode step's keys and values ([rows, heads, 1, dim]) of a batch some of whose
    rows are `GroupRowCache`s: one scatter per group buffer, each row of that buffer at its slot's
    next position and every other row at the trash (module doc); then advance the group rows."""
    layers: dict[int, GroupLayer] = {}
    for row in rows:
        if isinstance(row, GroupRowCache):
            layers.setdefault(id(row.layer), row.layer)
    for layer in layers.values():
        positions = [
            row.own_start + row.suffix_len
            if isinstance(row, GroupRowCache) and row.layer is layer
            else layer.trash
            for row in rows
        ]
        layer.scatter(_positions(tuple(positions)), keys, values)
    for row in rows:
        if isinstance(row, GroupRowCache):
            if row.suffix_len + 1 > row.layer.shape.slot_size:
                raise RuntimeError(f"a row outgrew its group slot ({row.layer.shape.slot_size})")
            row.suffix_len += 1
            row.offset += 1


def _copied(view: Any) -> Any:
    """A new array with `view`'s values (x 1 is exact), so that no view of a group buffer
    outlives the step that made it (a contiguous slice would stay a view)."""
    return view * 1


_POSITIONS: dict[tuple[int, ...], Any] = {}


def _positions(positions: tuple[int, ...]) -> Any:
    """The int32 array of a step's write positions, made once per step and buffer (every layer
    of a step writes at the same positions)."""
    got = _POSITIONS.get(positions)
    if got is None:
        if len(_POSITIONS) > 64:
            _POSITIONS.clear()
        got = mx.array(positions, dtype=mx.int32).reshape(1, 1, len(positions), 1)
        _POSITIONS[positions] = got
    return got


__all__ = [
    "GroupCell",
    "GroupKept",
    "GroupLayer",
    "GroupRowCache",
    "GroupShape",
    "chunk_rows",
    "group_step_write",
    "is_group_cache",
    "slot_positions",
]
