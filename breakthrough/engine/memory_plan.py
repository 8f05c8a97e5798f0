"""Admission by bytes, `MlxEngine`'s part (`MemoryPlan`, a mixin): the plan of a run within
`--memory-gb` (rows, prefix slots, which attention path), and whether a request can join the
rows in flight now (`_fits`) or what must go first (`_make_room`). The rule's arithmetic is
`memory.admission` and `memory.MemoryBook`; this part only asks it about the engine's state.

The device rule for CPU sharing lives here too (`_sharing_pays`): whether rows pointing into
their cell's one prefix copy beat a copy each, measured in `bench/continue_throughput.py
--attention shared|copies`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from breakthrough.engine.contract import NO_MEMORY_CAP, EnginePlan, GenRequest, RowShape
from breakthrough.engine.memory import Admission, admission
from breakthrough.engine.prefix_cache import CacheBytes, cache_bytes
from breakthrough.engine.token_ids import common_prefix_length
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from breakthrough.engine.contract import SharedPrefix
    from breakthrough.engine.group_kv import GroupCell, GroupShape
    from breakthrough.engine.group_rows import GroupRows, GroupTarget

# Query heads x shared prefix positions of a row from which shared-prefix attention beats
# per-row copies (`MemoryPlan._sharing_pays`): between the two workloads bench/RESULTS.md gives,
# where copies won (a few heads over short prefixes) and where sharing did (Qwen3-4B's attention).
SHARED_ATTENTION_SCORES = 16_384


class MemoryPlan:
    """`MlxEngine`'s methods for planning and admitting rows by bytes; the engine holds the
    state they read."""

    # the engine's state these methods read (set by MlxEngine.__init__)
    model: Any
    kv_bits: int | None
    reuse_prefixes: bool
    row_attention: bool
    share_prefixes: bool
    batch_size: int
    memory_budget_bytes: int
    memory_auto_line: str | None
    groups: GroupRows | None
    book: Any
    _share_fixed: bool
    _group_planned: bool
    _prefix_slots: int
    _max_prefixes: int
    _unshared_tokens: int
    _kv_bytes: CacheBytes | None
    _prefixes: dict
    _kept: dict

    if TYPE_CHECKING:  # the engine's own methods these call

        def _planned_group(self, shape: RowShape, shared: int) -> tuple[Any, int] | None: ...

        def _group_shape(self, shape: RowShape) -> GroupShape: ...

        def _group_target(self, req: GenRequest) -> GroupTarget | None: ...

        def _group_cell(self, key: str) -> GroupCell | None: ...

        def _cell_bytes(self, shape: GroupShape, prefix_tokens: int) -> float: ...

        def _drop_kept(self, key: str) -> None: ...

        @staticmethod
        def _restart_skips_prefix(shared: SharedPrefix, prompt: Sequence[int]) -> bool: ...

    def layout(self) -> CacheBytes:
        """The model's cache layout (`prefix_cache.CacheBytes`), measured once."""
        if self._kv_bytes is None:
            self._kv_bytes = cache_bytes(self.model, self.kv_bits)
        return self._kv_bytes

    def plan(self, shape: RowShape) -> EnginePlan:
        """How rows of `shape` run within `--memory-gb`, without changing the engine (`configure`
        applies it). The rule (`engine.memory.admission`, `CacheBytes`): prefixes once, each
        row its own tokens allocated once, plus one decode step's transient.
        - Rows: at most `batch_size`; BtError when not even one row and its prefix fit.
        - Prefix slots: cells' prefixes kept at once, up to `shared_prefixes` while they take at
          most PREFIX_SHARE of the budget; fewer, down to one, before fewer rows.
        - Sharing: rows point into their cell's one prefix copy when that is faster
          (`_sharing_pays`), or when a copy per row (counted twice, at the longest row) would
          not fit the budget; once an engine shares it keeps sharing (rows in flight point into
          prefixes), and `--kv-bits` always shares.
        - Group buffers (`_group_pays`: on a GPU, or `attention="group"`): a cell's prefix and
          GROUP_SLOTS slots of B + answer positions in one buffer per layer, counted whole per
          cell; as many cells as fit (at most `shared_prefixes`), else the rules above."""
        probe = max(int(shape.probe_tokens), 1)
        restart = max(int(shape.restart_tokens), self._unshared_tokens)
        shared = int(shape.shared_tokens) if self.reuse_prefixes else 0
        group = self._planned_group(shape, shared)
        share = (
            group is not None
            or self.share_prefixes
            or (bool(shared) and not self._share_fixed and self._sharing_pays(shared))
        )
        slots = self._prefix_slots if self.reuse_prefixes else None
        budget = float(self.memory_budget_bytes)
        probe_rows = restart_rows = self.batch_size
        if group is not None:
            slots = group[1]
        if budget:
            rule = dict(
                batch_size=self.batch_size,
                max_prefixes=self._max_prefixes,
                snapshots=self._snapshots(),
            )
            if shape.restart_tokens:
                rows = admission(self.layout(), budget, restart, 0, **rule)
                restart_rows = self._admitted(rows, restart)
        if budget and group is None:
            held = admission(self.layout(), budget, probe, shared, **rule)
            if self.reuse_prefixes:
                slots = held.slots
            copies_fit = False
            if shared and not share and not self._share_fixed:
                # a copy per row, counted twice, at the longest row asked for
                copies = self.layout().row(max(probe, restart)) * 2 * self.batch_size
                reserve = held.slots * self.layout().prefix_cache(shared, self._snapshots())
                share = reserve + copies > budget
                copies_fit = not share
            if not copies_fit:
                probe_rows = self._admitted(held, probe, shared)
        auto = self.memory_auto_line
        words = auto or (f"--memory-gb {budget / 2**30:g}" if budget else NO_MEMORY_CAP)
        return EnginePlan(
            shape,
            probe_rows,
            restart_rows,
            self.batch_size,
            prefix_slots=slots,
            share_prefixes=share,
            admits_by_memory=bool(budget) and share,
            groups_by_prefix=share and self.row_attention and self.kv_bits is None,
            budget=words,
            attention="group" if group is not None else ("shared" if share else "copies"),
        )

    def _admitted(self, rule: Admission, tokens: int, shared: int = 0) -> int:
        """`rule.rows`, or BtError when the budget holds not one row of `tokens` (and its
        prefix)."""
        if rule.rows < 1:
            raise BtError(
                f"--memory-gb {self.memory_budget_bytes / 2**30:.3g} cannot hold one row of "
                f"{tokens} tokens"
                + (f" ({shared} of them a shared prefix held once)" if shared else "")
                + f": {rule.need_bytes / 2**30:.3g} GB needed; raise --memory-gb (or "
                "use auto)"
            )
        return int(rule.rows)

    def configure(self, plan: EnginePlan) -> None:
        """Apply `plan` (made by `plan`): the prefix slots kept and whether rows share their
        prefix (once sharing, always: rows in flight point into the prefixes), in group buffers
        or not (once in group buffers, always: cells hold them)."""
        from breakthrough.engine.group_rows import GroupRows

        self._group_planned = True
        if plan.attention == "group" and self.groups is None:
            self.groups = GroupRows(self._group_shape(plan.shape))
        self.share_prefixes = self.share_prefixes or plan.share_prefixes
        if self.reuse_prefixes and plan.prefix_slots is not None:
            self._prefix_slots = plan.prefix_slots
        self._unshared_tokens = max(self._unshared_tokens, plan.shape.restart_tokens)

    def _sharing_pays(self, shared_tokens: int) -> bool:
        """Whether rows whose shared prefix is `shared_tokens` long run faster pointing into
        their cell's one copy (`prefix_attention`) than with a copy each in mlx-lm's batch
        cache: when a row's attention over its prefix (query heads x positions: the scores
        each row and layer computes) is at least SHARED_ATTENTION_SCORES, and the model's
        attention is routed (`row_attention.install`). Measured in `bench/continue_throughput.py
        --attention shared|copies` (README, "Memory and speed at the study's scale")."""
        from breakthrough.engine.prefix_cache import query_heads

        heads = query_heads(self.model)
        return self.row_attention and heads * int(shared_tokens) >= SHARED_ATTENTION_SCORES

    def _snapshots(self) -> int:
        return max(
            [len(pc.snapshot_at) for _, pc in self._prefixes.values()] + [len(DEFAULT.anchors) + 1]
        )

    def _held_prefixes(self) -> dict[str, float | None]:
        """The prefixes kept now and their bytes (None: not built yet), for `MemoryBook`."""
        return {
            key: (pc.nbytes if pc.full is not None else None)
            for key, (_, pc) in self._prefixes.items()
        }

    def _cost(self, req: GenRequest) -> tuple[int, float]:
        """(final length, bytes it adds) of admitting `req` now, without building anything:
        its own tokens (prompt beyond what it reuses + max_tokens + the step ahead), and its
        shared prefix when that is not held yet (a group row: its cell's buffers when they are
        not built yet, and nothing of its own)."""
        b = self.layout()
        prompt_len, extra = len(req.prompt), int(req.max_tokens) + 1
        target = self._group_target(req)
        if target is not None and self.groups is not None:
            if target.from_kept or self._group_cell(target.cell_key) is not None:
                return prompt_len + extra, 0.0
            held = target.cell_key in self._prefixes
            ids = len(req.shared_prefix.ids) if req.shared_prefix is not None else 0
            return prompt_len + extra, self._cell_bytes(self.groups.shape, 0 if held else ids)
        if not self.reuse_prefixes:
            return prompt_len + extra, b.own_row(prompt_len + extra)
        if req.follows is not None and req.follows in self._kept:
            seq, cache = self._kept[req.follows]
            own = prompt_len - self._kept_shared_len(cache) + extra
            kept = self.book.kept.get(req.follows)
            return prompt_len + extra, b.own_row(own) - (kept.nbytes if kept else 0.0)
        shared = req.shared_prefix
        if shared is not None:
            n = min(common_prefix_length(shared.ids, req.prompt), prompt_len - 1)
            if n > 0 and not self._restart_skips_prefix(shared, req.prompt):
                add = 0.0
                if shared.key not in self._prefixes:
                    add = b.prefix_cache(len(shared.ids), len(shared.starts))
                return prompt_len + extra, add + b.own_row(prompt_len - n + extra)
        return prompt_len + extra, b.own_row(prompt_len + extra)

    @staticmethod
    def _kept_shared_len(cache: list) -> int:
        """Positions of a kept state that point into a shared prefix (not the row's own)."""
        for layer in cache:
            if hasattr(layer, "prefix_len"):
                return int(layer.prefix_len)
        return 0

    def _fits(self, req: GenRequest, in_flight: int) -> bool:
        """Whether `req` can join the `in_flight` rows within `--memory-gb` (always, without a
        budget): what the caches hold now, plus the bytes it adds, plus one decode step's
        transient at the longest row."""
        if not self.memory_budget_bytes or not self.share_prefixes:
            return True  # without sharing, `plan` admitted batch_size full rows up front
        length, add = self._cost(req)
        return self.book.fits(
            self._held_prefixes(), add, length, in_flight, self.layout(), self.memory_budget_bytes
        )

    def _make_room(self, req: GenRequest) -> None:
        """Nothing is in flight and `req` does not fit: drop kept states other than the one it
        follows, then prefixes other than its own, oldest first, until it fits (a dropped
        prefix costs only a prefill when a later request names it). It is admitted even when
        nothing more can go: `plan` refused, before the run, any budget that cannot hold
        one row and its prefix."""
        own = req.shared_prefix.key if req.shared_prefix is not None else None
        for key in [k for k in self._kept if k != req.follows]:
            if self._fits(req, 0):
                return
            self._drop_kept(key)
        for key in [k for k in self._prefixes if k != own]:
            if self._fits(req, 0):
                return
            self._prefixes.pop(key, None)
