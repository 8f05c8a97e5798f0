"""The fixed facts of one cell's base trace: where its prefixes are cut (protocol 3.1, 3.2).

An anchor t is "the first t reasoning tokens": the prefix is the base trace's generated tokens
through the t-th thinking token (`models.segments.anchor_cutoff`), never decoded and
re-tokenised. Anchors beyond the trace's reasoning length, or whose prefix leaves no room for
B + the answer reserve (protocol 3.3 step 1), are not on the cell's grid."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from breakthrough.engine.contract import SharedPrefix
from breakthrough.models.segments import anchor_cutoff, reasoning_length
from breakthrough.pipeline.branches import Branch, check_budget
from breakthrough.protocol import Protocol


@dataclass
class CellPlan:
    """One cell: its cohort row, chat prompt, base trace, segmentation and anchor grid."""

    cell_id: str
    item: dict
    prompt: list[int]
    trace: list[int]
    segments: np.ndarray
    reasoning_tokens: int
    grid: list[int]

    def cut(self, anchor: int) -> int:
        """Prefix length (generated tokens) for anchor t: through the t-th reasoning token."""
        return anchor_cutoff(self.segments, anchor) + 1

    def max_cut(self) -> int:
        return self.cut(self.grid[-1]) if self.grid else 0

    def shared_prefix(self) -> SharedPrefix:
        """Prompt + trace up to the last cut, declared once to the engine for every request of
        the cell (starts: the prompt lengths its requests will have)."""
        np_ = len(self.prompt)
        return SharedPrefix(
            key=self.cell_id,
            ids=tuple(self.prompt + self.trace[: self.max_cut()]),
            starts=(np_, *(np_ + self.cut(a) for a in self.grid)),
        )

    def probe_row(self, protocol: Protocol) -> tuple[int, int]:
        """(tokens, shared tokens) of this cell's longest probe row: prompt + prefix at the
        deepest anchor + B + answer, of which prompt + base trace (as far as the deepest cut)
        is the shared prefix the engine holds once for every branch."""
        shared = len(self.prompt) + self.max_cut()
        return shared + protocol.budget + protocol.answer_budget, shared

    def restart_row(self, protocol: Protocol) -> int:
        """Tokens of this cell's longest restart row (prompt + the largest C + answer): all
        its own, nothing shared."""
        return len(self.prompt) + max(protocol.restart_budgets, default=0) + protocol.answer_budget

    def longest_row(self, protocol: Protocol) -> int:
        """Tokens of the longest row this cell can put in flight (prompt + prefix + B or C +
        answer): what bounds rows per batch under a memory budget."""
        return (
            len(self.prompt)
            + self.max_cut()
            + max(protocol.budget, *protocol.restart_budgets)
            + protocol.answer_budget
        )


def plan_cell(
    cell_id: str, item: dict, prompt: Iterable[int], base: Any, protocol: Protocol, forced: int = 0
) -> CellPlan:
    """The cell's grid: the protocol's anchors up to the first one beyond the trace's reasoning
    or without room for B + `forced` close tokens + the answer reserve."""
    segs = np.asarray(base["segments"])
    trace = [int(t) for t in base["token_ids"]]
    r = reasoning_length(segs)
    grid = []
    for a in protocol.anchors:
        if a > r or not check_budget(anchor_cutoff(segs, a) + 1, protocol.budget, protocol, forced):
            break
        grid.append(a)
    return CellPlan(cell_id, item, [int(t) for t in prompt], trace, segs, r, grid)


def similar_length_chunks(
    branches: Sequence[Branch], rows: int, spread: float = 1.5
) -> list[list[Branch]]:
    """Batches of at most `rows` branches whose prefix lengths are close (the longest at most
    `spread` x the shortest, plus 64): a batch is padded to its longest row, so mixing a
    64-token prefix with a 4,096-token one would waste most of the batch's attention work.
    (For callers that run branches batch by batch, e.g. the small bench workload.)"""
    chunks: list[list[Branch]] = []
    for b in sorted(branches, key=lambda b: (b.cut, b.key)):
        if chunks and len(chunks[-1]) < rows and b.cut <= spread * chunks[-1][0].cut + 64:
            chunks[-1].append(b)
        else:
            chunks.append([b])
    return chunks
