"""The GPU path's part of `MlxEngine` (`GroupPath`, a mixin): whether rows run in their cell's
group buffers (the device rule, the memory rule), the buffers' shape, and how a group row starts
(`group_kv`, `group_rows`, `group_attention`). Kept apart from the engine's batching, prefix
reuse and admission by bytes, which it only calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from breakthrough.engine.contract import GenRequest, RowShape, SharedPrefix
from breakthrough.engine.token_ids import common_prefix_length
from breakthrough.protocol import DEFAULT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from breakthrough.engine.group_kv import GroupCell, GroupShape
    from breakthrough.engine.group_rows import GroupRows, GroupTarget
    from breakthrough.engine.prefix_cache import CacheBytes, PrefixCache

# On a GPU, "auto" runs rows in group buffers once a run's shared prefix reaches this many tokens
# (below it mlx-lm's copies are few bytes and one fused call). Provisional: set from
# `bench/gpu_check.sh`'s step bench on the first GPU it runs on (bench/RESULTS.md).
GPU_GROUP_SHARED_TOKENS = 1024
GROUP_SLOTS = 16  # slots per cell at most (`group_kv.GroupShape`): rows of a cell at once
# Own positions a probe row may need beyond B + the answer window: the forced close's tokens and
# the step ahead (`group_kv.slot_positions` rounds the slot up from there).
SLOT_SLACK = 64


class GroupPath:
    """`MlxEngine`'s methods for rows in group buffers; the engine holds the state they read."""

    # the engine's state these methods read (set by MlxEngine.__init__)
    model: Any
    row_attention: bool
    kv_bits: int | None
    reuse_prefixes: bool
    attention: str
    group_slots: int
    memory_budget_bytes: int
    share_prefixes: bool
    groups: GroupRows | None
    _share_fixed: bool
    _group_planned: bool
    _eligible: bool | None
    _chunk: int | None
    _targets: dict[str, tuple[tuple, Any]]
    _prefix_slots: int
    _max_prefixes: int
    _prefixes: dict
    _kept: dict
    book: Any
    prefill_tokens: int

    if TYPE_CHECKING:  # the engine's own methods these call

        def layout(self) -> CacheBytes: ...

        def _prefix_cache(self, shared: SharedPrefix) -> PrefixCache: ...

        @staticmethod
        def _restart_skips_prefix(shared: SharedPrefix, prompt: Sequence[int]) -> bool: ...

    def group_eligible(self) -> bool:
        """Whether rows of this engine can live in group buffers: the model's attention is
        routed (`row_attention`), every layer is plain attention (a `KVCache`: group buffers
        hold no window or recurrent state), keys and values are full precision (`--kv-bits`
        attends row by row) and prefixes are reused."""
        if self._eligible is None:
            from breakthrough.engine.mlx_compat import KVCache, make_prompt_cache

            self._eligible = (
                bool(self.row_attention)
                and self.kv_bits is None
                and self.reuse_prefixes
                and all(type(c) is KVCache for c in make_prompt_cache(self.model))
            )
        return self._eligible

    def _group_pays(self, shared_tokens: int) -> bool:
        """The device rule for group buffers: always when asked (`attention="group"`); under
        "auto" on a GPU once the shared prefix reaches GPU_GROUP_SHARED_TOKENS (a decode step's
        cost there is its kernel launches: bench/RESULTS.md); never on the CPU, where shared
        prefixes attend in numpy (`prefix_attention`, measured faster there)."""
        if self.attention == "group":
            return True
        if self.attention != "auto" or self._share_fixed or not self.group_eligible():
            return False
        import mlx.core as mx

        return mx.default_device() == mx.gpu and int(shared_tokens) >= GPU_GROUP_SHARED_TOKENS

    def _group_shape(self, shape: RowShape | None) -> GroupShape:
        """The cells' group buffers for rows of `shape` (None: the default protocol's):
        GROUP_SLOTS slots (a multiple of the chunk) of B + answer + SLOT_SLACK positions. None of
        it depends on the batch size or the cells in the run, so a row's keys sit at the same
        positions whatever else runs."""
        from breakthrough.engine.group_kv import GroupShape, chunk_rows, slot_positions
        from breakthrough.engine.prefix_cache import kv_heads, query_heads

        if shape is not None and shape.shared_tokens:
            own = int(shape.probe_tokens) - int(shape.shared_tokens)
        else:
            own = DEFAULT.budget + DEFAULT.answer_budget
        if self._chunk is None:  # (a forward pass reads the KV heads: once per engine)
            self._chunk = chunk_rows(query_heads(self.model), kv_heads(self.model))
        slots = -(-self.group_slots // self._chunk) * self._chunk
        return GroupShape(slots, slot_positions(own + SLOT_SLACK), self._chunk, DEFAULT.samples)

    def _planned_group(self, shape: RowShape, shared: int) -> tuple[GroupShape, int] | None:
        """(group shape, cells kept at once) when rows of `shape` run in group buffers
        (`_group_pays`, and at least one cell's buffers fit the budget), else None."""
        if not shared or not self.reuse_prefixes or not self._group_pays(shared):
            return None
        group = self._group_shape(shape)
        if not self.memory_budget_bytes:
            return group, self._prefix_slots
        per_cell = self._cell_bytes(group, shared)
        cells = min(self._max_prefixes, int(self.memory_budget_bytes // max(per_cell, 1.0)))
        return (group, cells) if cells >= 1 else None

    def _cell_bytes(self, group: GroupShape, prefix_tokens: int) -> float:
        """Bytes of one cell's group buffers: its prefix (0 tokens: a prefix already held, whose
        bytes are counted) and its slots and trash."""
        b = self.layout()
        prefix = b.prefix_cache(prefix_tokens, 0) if prefix_tokens else 0.0
        return prefix + b.plain_per_token * group.own_positions

    def _start_groups(self) -> None:
        """At the start of `generate`: the target memo emptied, and an engine used without a plan
        (`bt serve`, a bench) takes the group path by the same device rule, for rows of the
        default protocol's length."""
        from breakthrough.engine.group_rows import GroupRows

        self._targets.clear()  # another `generate`: its requests are new
        if self.groups is not None or self._group_planned:
            return
        if self._group_pays(GPU_GROUP_SHARED_TOKENS):
            self.groups = GroupRows(self._group_shape(None))
            self.share_prefixes = True

    def _group_target(self, req: GenRequest) -> GroupTarget | None:
        """Where `req` runs in a group buffer (`GroupRows.target`), or None; remembered until
        `req` is admitted while what it depends on stands (the state it follows is kept, its
        prefix held): comparing its ids with a 16K prefix is not redone at every step it waits."""
        if self.groups is None:
            return None
        held = req.shared_prefix is not None and req.shared_prefix.key in self._prefixes
        depends = (id(req), req.follows is not None and req.follows in self._kept, held)
        memo = self._targets.get(req.key)
        if memo is not None and memo[0] == depends:
            return memo[1]
        target = self.groups.target(
            req, self._kept, common_prefix_length, self._restart_skips_prefix, held
        )
        self._targets[req.key] = (depends, target)
        return target

    def _group_cell(self, key: str) -> GroupCell | None:
        have = self._prefixes.get(key)
        return None if have is None else have[1].group

    def _slot_ready(self, req: GenRequest) -> bool:
        """False when `req` runs in a group buffer whose slot for it a row in flight holds."""
        target = self._group_target(req)
        if target is None or self.groups is None:
            return True
        if target.from_kept and req.follows is not None:
            cell = self._kept[req.follows][1][0].cell
        else:
            cell = self._group_cell(target.cell_key)
        return self.groups.ready(target, cell)

    def _start_group(
        self, req: GenRequest, target: GroupTarget
    ) -> tuple[list, list[int], str, int]:
        """`_start` for a group row: its cell's buffers (built from the cell's prefix on first
        use) or the kept state it follows, its slot taken, its own ids prefilled at batch 1 into
        the slot up to the prompt's last id."""
        from breakthrough.engine.group_rows import group_cell
        from breakthrough.engine.prefix_cache import prefill

        assert self.groups is not None
        kept_cache = None
        if target.from_kept and req.follows is not None:
            _, kept_cache = self._kept.pop(req.follows)
            booking = self.book.kept.pop(req.follows, None)
            cell = kept_cache[0].cell
            key = booking.prefix if booking is not None and booking.prefix else cell.key
        else:
            shared = req.shared_prefix
            assert shared is not None
            pc = self._prefix_cache(shared)
            before = pc.prefill_tokens
            shape = self.groups.shape
            cell = pc.hand_over(lambda layers: group_cell(shared.key, shared.starts, shape, layers))
            self.prefill_tokens += pc.prefill_tokens - before
            self.book.prefix_bytes[shared.key] = float(pc.nbytes)
            key = shared.key
        rows = self.groups.rows(req, target, cell, kept_cache)
        feed = [int(t) for t in req.prompt[target.held :]]
        if len(feed) > 1:
            prefill(self.model, rows, feed[:-1])
        return rows, feed[-1:], key, len(feed)

    def _path(self, cache: list) -> str:
        """The attention path a row of `cache` takes (`EngineStats.rows_by_attention`)."""
        if any(getattr(layer, "in_group", False) for layer in cache):
            return "group"
        if not self.share_prefixes:
            return "copies"
        if not self.row_attention:
            return "padded"
        sharing = any(getattr(layer, "base", None) is not None for layer in cache)
        return "shared" if sharing and self.kv_bits is None else "row by row"
