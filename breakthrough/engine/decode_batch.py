"""bt's decode loop: continuous batching over rows whose caches are bt's (`batch_cache`).

`MlxEngine` prefills each row at batch 1 up to its prompt's last id (from a shared prefix, a
kept state or afresh) and hands the row here with that one id to feed. `DecodeBatch` keeps the
rows in flight, joins new ones between steps, and runs each step as the model's public forward
(`model(inputs, cache=...)`) followed by one batched, seeded draw (`batch_step.StepSampler`).

The step is pipelined the way mlx-lm's generators are: step k builds the forward of the tokens
drawn at step k - 1, draws step k's tokens and starts evaluating them (`mx.async_eval`), and
only then reads step k - 1's tokens and statistics, so the host's bookkeeping overlaps the
device's work. A row therefore runs one step past its last token (the memory rule counts it).
A new row's first forward is its prompt's last id, in the same forward as the rows already in
flight; it yields its first token one step later.

Stops are matched on generated tokens only (`StopMatcher`): an EOS id or any of the request's
stop sequences ending at the new token; a row also stops at its `max_tokens`. A finished row
leaves the batch at once; a row that asked for it (`NewRow.keeps_cache`) takes its cache along
(`BatchLayerCache.extract`) for a state to keep. Only those: an extracted cache holds the row's
buffers, and a shared-prefix row's prefix buffer, for as long as the caller keeps the
`StepToken`, so a cache nobody keeps would hold a finished cell's memory through the next
admission (the peak that the memory plan does not count)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from breakthrough.engine.batch_cache import BatchLayerCache, join_rows
from breakthrough.engine.batch_step import RowSpec, StepSampler, StepStats

# Steps between returns of MLX's freed buffers to the system (as mlx-lm's generators do): the
# allocator keeps freed buffers for reuse (`allocator.keep_freed_memory`), and rows of changing
# lengths leave sizes no later step asks for.
CLEAR_CACHE_EVERY = 512


class StopMatcher:
    """Whether a row's generated tokens end with one of its stop sequences (EOS ids are
    one-token sequences). Only generated tokens are matched, never the prompt's."""

    __slots__ = ("sequences", "tail", "longest")

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.sequences = [tuple(int(t) for t in s) for s in sequences if len(s) > 0]
        self.longest = max((len(s) for s in self.sequences), default=0)
        self.tail: list[int] = []

    def advance(self, token: int) -> bool:
        """Add the row's next generated token; True when a stop sequence ends with it."""
        self.tail.append(int(token))
        if len(self.tail) > self.longest:
            del self.tail[0]
        return any(
            len(s) <= len(self.tail) and tuple(self.tail[len(self.tail) - len(s) :]) == s
            for s in self.sequences
        )


@dataclass
class NewRow:
    """A row to join the batch: its cache (one layer each, prefilled up to `last_id`), the id
    it feeds first, its `RowSpec`, its token cap, its stop matcher, and whether its cache
    comes back with its last token (`StepToken.cache`: a state the engine keeps)."""

    uid: int
    last_id: int
    spec: RowSpec
    cache: list[Any]
    max_tokens: int
    stop: StopMatcher
    keeps_cache: bool = False


@dataclass
class StepToken:
    """One row's token of one step: its statistics, and when the row finished with it, why
    ("length" or "stop") and, for a row that `keeps_cache`, the row's cache (else None)."""

    uid: int
    token: int
    stats: StepStats
    finish_reason: str | None
    cache: list[Any] | None


class DecodeBatch:
    """The rows in flight and their batch cache; `step()` advances them all by one token."""

    def __init__(self, model) -> None:
        self.model = model
        self.sampler = StepSampler(model)
        self.uids: list[int] = []
        self.specs: list[RowSpec] = []
        self.max_tokens: list[int] = []
        self.counts: list[int] = []
        self.stops: list[StopMatcher] = []
        self.keeps_cache: list[bool] = []
        self.cache: list[BatchLayerCache] = []  # one batch layer per model layer
        self._next_tokens: mx.array | None = None  # [rows] drawn last step (or a prompt's id)
        self._next_stats: list = []  # per row: (bundle, index) of its drawn token, or None
        self._steps = 0
        self._old_wired = _wire_recommended()

    def __len__(self) -> int:
        return len(self.uids)

    def add(self, rows: list[NewRow]) -> None:
        """Join `rows` to the batch: their caches merged per layer and appended."""
        if not rows:
            return
        joined = join_rows([r.cache for r in rows])
        if self.cache:
            for layer, more in zip(self.cache, joined, strict=True):
                layer.extend(more)
        else:
            self.cache = joined
        ids = mx.array([int(r.last_id) for r in rows], dtype=mx.uint32)
        self._next_tokens = (
            ids if self._next_tokens is None else mx.concatenate([self._next_tokens, ids])
        )
        self._next_stats += [None] * len(rows)
        for r in rows:
            self.uids.append(r.uid)
            self.specs.append(r.spec)
            self.max_tokens.append(int(r.max_tokens))
            self.counts.append(0)
            self.stops.append(r.stop)
            self.keeps_cache.append(bool(r.keeps_cache))

    def remove(self, uids: Sequence[int]) -> None:
        """Drop rows before their end (their caches go with them)."""
        gone = set(uids)
        self._keep([i for i, uid in enumerate(self.uids) if uid not in gone])

    def _keep(self, keep: list[int]) -> None:
        if len(keep) == len(self.uids):
            return
        self.uids = [self.uids[i] for i in keep]
        self.specs = [self.specs[i] for i in keep]
        self.max_tokens = [self.max_tokens[i] for i in keep]
        self.counts = [self.counts[i] for i in keep]
        self.stops = [self.stops[i] for i in keep]
        self.keeps_cache = [self.keeps_cache[i] for i in keep]
        self._next_stats = [self._next_stats[i] for i in keep]
        if keep:
            for layer in self.cache:
                layer.filter(keep)
            assert self._next_tokens is not None
            self._next_tokens = self._next_tokens[mx.array(keep)]
        else:
            self.cache = []
            self._next_tokens = None

    def step(self) -> list[StepToken]:
        """One decode step: forward the tokens drawn last step, draw the next ones and start
        evaluating them, then read last step's tokens. Returns one `StepToken` per row that had
        a drawn token to read (not rows on their first step); finished rows leave the batch."""
        if not self.uids:
            return []
        inputs, bundles, specs = self._next_tokens, self._next_stats, self.specs
        logits, hidden = self.sampler.forward(self.cache, inputs, StepSampler.wants_hidden(specs))
        StepSampler.start_previous(bundles)
        tokens, bundle, kept = self.sampler.draw(logits, hidden, specs)
        self._next_tokens = tokens
        self._next_stats = [(bundle, i) for i in range(len(specs))]
        mx.async_eval(tokens, *[a for a in bundle if isinstance(a, mx.array)], *kept)
        stats = StepSampler.read(bundles, inputs)
        assert inputs is not None
        fed: list[int] = [int(t) for t in np.asarray(inputs)]
        out: list[StepToken] = []
        keep: list[int] = []
        for i, row_stats in enumerate(stats):
            if row_stats is None:  # the row's prompt id: its first token comes next step
                keep.append(i)
                continue
            self.counts[i] += 1
            reason = "length" if self.counts[i] >= self.max_tokens[i] else None
            if self.stops[i].advance(fed[i]):
                reason = "stop"
            cache = None
            if reason is None:
                keep.append(i)
            elif self.keeps_cache[i]:
                cache = [layer.extract(i) for layer in self.cache]
            out.append(StepToken(self.uids[i], fed[i], row_stats, reason, cache))
        self._keep(keep)
        self._steps += 1
        if self._steps % CLEAR_CACHE_EVERY == 0:
            mx.clear_cache()
        return out

    def close(self) -> None:
        """Give back the wired-memory limit this batch raised (Metal)."""
        if self._old_wired is not None:
            mx.synchronize()
            mx.set_wired_limit(self._old_wired)
            self._old_wired = None


def _wire_recommended() -> int | None:
    """Raise MLX's wired-memory limit to the device's recommended working set (Metal: keeps
    the weights and caches resident, as mlx-lm's generators do); the previous limit, or None
    where the device reports no recommended size (the CPU, CUDA)."""
    try:
        size = mx.device_info().get("max_recommended_working_set_size")
    except Exception:  # pragma: no cover - an MLX without device_info
        return None
    if not size:
        return None
    return int(mx.set_wired_limit(int(size)))
