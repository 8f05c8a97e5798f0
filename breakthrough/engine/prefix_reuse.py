"""Prefix reuse, `MlxEngine`'s part (`PrefixReuse`, a mixin): the shared prefixes' caches it
keeps (one prefill per cell's trace, `prefix_cache.PrefixCache`), the states of finished rows
kept for the request that follows them, and the longest reusable state for a new row's prompt.
With `reuse_prefixes=False` (backend "mlx-fresh") nothing is reused."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from breakthrough.engine.contract import GenRequest, SharedPrefix
from breakthrough.engine.memory import Booking
from breakthrough.engine.prefix_cache import PrefixCache, cache_length, trim_to
from breakthrough.engine.token_ids import common_prefix_length

if TYPE_CHECKING:
    from collections.abc import Sequence

    from breakthrough.engine.group_rows import GroupRows


class PrefixReuse:
    """`MlxEngine`'s methods for reusing prefixes and kept states; the engine holds the state
    they read."""

    # the engine's state these methods read (set by MlxEngine.__init__)
    model: Any
    kv_bits: int | None
    reuse_prefixes: bool
    groups: GroupRows | None
    book: Any
    prefill_tokens: int
    _prefixes: dict[str, tuple[SharedPrefix, PrefixCache]]
    _prefix_slots: int
    _kept: dict[str, tuple[list[int], list]]
    _max_kept: int

    if TYPE_CHECKING:  # the engine's own method these call

        @staticmethod
        def _kept_shared_len(cache: list) -> int: ...

    def _prefix_cache(self, shared: SharedPrefix) -> PrefixCache:
        have = self._prefixes.get(shared.key)
        if have is not None and (have[0] is shared or have[0].ids == shared.ids):
            return have[1]
        cache = PrefixCache(
            self.model, shared.ids, snapshot_at=[s - 1 for s in shared.starts], kv_bits=self.kv_bits
        )
        self._prefixes.pop(shared.key, None)
        self._prefixes[shared.key] = (shared, cache)
        while len(self._prefixes) > self._prefix_slots:
            self._prefixes.pop(next(iter(self._prefixes)))
        return cache

    def release_prefix(self, key: str) -> None:
        """Drop the shared-prefix cache kept under `key` (a cell whose probes are all done:
        its restarts start from the chat prompt alone), so that the next cell's prefix does
        not evict one that queued probes still need. A later request naming it rebuilds it.
        Its memory goes when the last row or kept state pointing into it does."""
        held = self._prefixes.pop(key, None)
        if held is not None and held[1].full is not None:
            self.book.prefix_bytes[key] = float(held[1].nbytes)

    @staticmethod
    def _restart_skips_prefix(shared: SharedPrefix, prompt: Sequence[int]) -> bool:
        """A request that uses only the prefix's first start (a restart: the chat prompt
        alone) does not build the whole prefix's cache (a base trace of up to 16K tokens) when
        it is much longer: a fresh prefill of its own prompt is far cheaper (the scheduler runs
        restarts after the cell's probes, by when that cache may have made room for other
        cells'). Only when the prefix is not held already (the caller checks)."""
        return (
            bool(shared.starts)
            and len(prompt) <= shared.starts[0]
            and len(shared.ids) > 4 * len(prompt)
        )

    def _reused(
        self, req: GenRequest, prompt: list[int]
    ) -> tuple[list | None, list[int], str | None]:
        """(cache, ids still to feed, prefix key) from a kept state `req` follows or its
        shared prefix; (None, prompt, None) when nothing is reused."""
        from breakthrough.engine.group_kv import is_group_cache

        if not self.reuse_prefixes:
            return None, prompt, None
        if req.follows is not None and req.follows in self._kept:
            seq, cache = self._kept.pop(req.follows)
            booking = self.book.kept.pop(req.follows, None)
            key = booking.prefix if booking is not None else None
            keep = min(cache_length(cache), common_prefix_length(seq, prompt), len(prompt) - 1)
            if keep > 0 and not is_group_cache(cache):  # (a group row's: `_start_group` only)
                try:
                    return trim_to(cache, keep), prompt[keep:], key
                except ValueError:  # a recurrent state (Qwen3.5) cannot be cut back: rebuild below
                    pass
        shared = req.shared_prefix
        if shared is not None and self.groups is None:  # (group prefixes: `_start_group` only)
            n = min(common_prefix_length(shared.ids, prompt), len(prompt) - 1)
            if (
                n > 0
                and shared.key not in self._prefixes
                and self._restart_skips_prefix(shared, prompt)
            ):
                return None, prompt, None
            if n > 0:
                pc = self._prefix_cache(shared)
                before = pc.prefill_tokens
                state = pc.state(n)
                self.prefill_tokens += pc.prefill_tokens - before
                self.book.prefix_bytes[shared.key] = float(pc.nbytes)
                return state, prompt[n:], shared.key
        return None, prompt, None

    def _keep(self, key: str, seq: list[int], cache, prefix: str | None) -> None:
        self._drop_kept(key)
        self._kept[key] = (seq, cache)
        own = sum(getattr(layer, "nbytes", 0) for layer in cache if hasattr(layer, "prefix_len"))
        self.book.kept[key] = Booking(float(own), prefix=prefix)
        while len(self._kept) > self._max_kept:
            self._drop_kept(next(iter(self._kept)))

    def _drop_kept(self, key: str) -> None:
        self._kept.pop(key, None)
        self.book.kept.pop(key, None)
