"""Which requests of an MLX engine run in their cell's group buffer, and their slots' life.

`MlxEngine` runs a request as a group row (`group_kv`, attended by `group_attention`) when it
points into a cell's shared prefix and its own tokens (the rest of its prompt, its max tokens and
the step ahead) fit one slot; or when it follows a group row's kept state (an answer phase). Any
other request of a group engine is prefilled afresh: no row outside a group buffer may hold a
view of one (`group_kv` module doc), and the requests this leaves (restarts: a chat prompt) are
short.

A group row takes the slot its request names (`GroupCell.slot_for`); a request whose slot is
held waits (`ready`, the engine parks it) until that row finishes, so its tokens never depend on
which slots happened to be free."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.group_kv import (
    GroupCell,
    GroupKept,
    GroupLayer,
    GroupRowCache,
    GroupShape,
    is_group_cache,
    slot_for,
)


@dataclass(frozen=True)
class GroupTarget:
    """Where a request runs as a group row: its cell's key, the prefix length it reads from
    the cell, its slot, how many positions of its prompt are already held (prefix + kept own
    tokens) and whether they come from a kept state."""

    cell_key: str
    prefix_len: int
    slot: int
    held: int
    from_kept: bool


def group_cell(key: str, starts: Sequence[int], shape: GroupShape, layers: list[Any]) -> GroupCell:
    """A cell's `GroupCell` from its prefix cache's plain `KVCache` layers (their arrays moved,
    layer by layer, into group buffers and dropped from the layers: `PrefixCache.hand_over`)."""
    group_layers = []
    for layer in layers:
        n = int(layer.offset)
        group_layers.append(GroupLayer.from_prefix(layer.keys, layer.values, n, shape))
        layer.keys = layer.values = None
    return GroupCell(key, group_layers, starts, shape)


class GroupRows:
    """The group rows of one engine: the cells' group buffers (held by their `PrefixCache`s)
    and the slot each row in flight holds."""

    def __init__(self, shape: GroupShape) -> None:
        self.shape = shape
        self.held: dict[str, tuple[GroupCell, int]] = {}  # request key -> (cell, slot)

    def target(
        self,
        req: GenRequest,
        kept: dict[str, tuple[list[int], list]],
        common: Any,
        skips_prefix: Any,
        prefix_held: bool,
    ) -> GroupTarget | None:
        """Where `req` runs as a group row, or None (module doc). `common(a, b)` is the number
        of leading ids two sequences share; `skips_prefix(shared, prompt)` says a restart-like
        request would not build its cell's prefix (`MlxEngine._restart_skips_prefix`)."""
        prompt = req.prompt
        room = self.shape.slot_size
        if req.follows is not None and req.follows in kept:
            seq, cache = kept[req.follows]
            if not is_group_cache(cache):
                return None
            first: GroupKept = cache[0]
            keep = min(first.offset, common(seq, prompt), len(prompt) - 1)
            if keep < first.prefix_len:
                return None
            if len(prompt) - first.prefix_len + int(req.max_tokens) + 1 > room:
                return None
            slot = first.cell.slot_for(first.prefix_len, req.lane)
            return GroupTarget(first.cell.key, first.prefix_len, slot, keep, True)
        shared = req.shared_prefix
        if shared is None:
            return None
        n = min(common(shared.ids, prompt), len(prompt) - 1)
        if n <= 0 or (not prefix_held and skips_prefix(shared, prompt)):
            return None
        if len(prompt) - n + int(req.max_tokens) + 1 > room:
            return None
        slot = slot_for(tuple(sorted(shared.starts)), n, req.lane, self.shape)
        return GroupTarget(shared.key, n, slot, n, False)

    @staticmethod
    def ready(target: GroupTarget, cell: GroupCell | None) -> bool:
        """Whether the target's slot is free now (a cell not built yet has every slot free)."""
        return cell is None or cell.free(target.slot)

    def rows(
        self, req: GenRequest, target: GroupTarget, cell: GroupCell, kept_cache: list | None
    ) -> list[GroupRowCache]:
        """The row's layers in its slot (taken for `req`), with a kept state's own tokens written
        back (cut to the positions the request reuses)."""
        cell.take(target.slot, req.key)
        self.held[req.key] = (cell, target.slot)
        rows = [GroupRowCache(layer, cell, target.slot, target.prefix_len) for layer in cell.layers]
        if kept_cache is not None:
            for row, state in zip(rows, kept_cache, strict=True):
                state = state.trim_to(target.held)
                if state.own_keys is not None:
                    row.write(state.own_keys, state.own_values)
        return rows

    def release(self, key: str) -> None:
        """The row of `key` left the batch: its slot is free."""
        got = self.held.pop(key, None)
        if got is not None:
            got[0].release(got[1], key)

    def release_all(self) -> None:
        for key in list(self.held):
            self.release(key)

    @staticmethod
    def kept(cache: list) -> list[GroupKept]:
        """A finished group row's state as copies (evaluated now, before its slot is reused)."""
        import mlx.core as mx

        states = [layer.kept() for layer in cache]
        mx.eval([s.state[0] for s in states])
        return states
