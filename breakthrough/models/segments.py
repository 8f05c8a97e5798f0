"""Token segmentation (protocol 3.2) and anchor cut-offs.

Labels come from per-token decoded strings: markers are matched on the concatenation, because
markers such as `[/THINK]` or `\\boxed{` tokenize differently in context. Codes (docs/interfaces):
0 thinking, 1 special, 2 solution, 3 final_answer.

* thinking: tokens whose first character lies after the end of the first open marker (from
  position 0 when the text has no open marker, e.g. templates that put `<think>` in the prompt)
  and before the start of the first close marker after it;
* special: tokens overlapping that open or that close marker;
* final_answer: from the first token overlapping the first `\\boxed{` / `\\fbox{` after the close
  marker onward (for a family without thinking: after position 0; a thinking trace that never
  closes has no final answer);
* everything else: solution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from breakthrough.models.families import Family
from breakthrough.models.tokens import token_strings

THINKING, SPECIAL, SOLUTION, FINAL_ANSWER = 0, 1, 2, 3
NAMES = ("thinking", "special", "solution", "final_answer")  # NAMES[code]; samples store codes
BOX_MARKERS = ("\\boxed{", "\\fbox{")


def segment_tokens(
    token_texts: Sequence[str],
    open_marker: str | None,
    close_marker: str | None,
) -> np.ndarray:
    """Segment codes (np.uint8, one per token). `close_marker=None` means a family without a
    thinking block (everything is solution, then final_answer)."""
    n = len(token_texts)
    starts = np.zeros(n, dtype=np.int64)
    ends = np.zeros(n, dtype=np.int64)
    pos = 0
    for i, s in enumerate(token_texts):
        starts[i] = pos
        pos += len(s)
        ends[i] = pos
    text = "".join(token_texts)
    codes = np.full(n, SOLUTION, dtype=np.uint8)
    if n == 0:
        return codes

    def overlap(m0: int, m1: int) -> np.ndarray:
        return (starts < m1) & (ends > m0)

    answer_from = 0
    if close_marker is not None:
        think_start = 0
        open_span = None
        if open_marker:
            o = text.find(open_marker)
            if o >= 0:
                open_span = (o, o + len(open_marker))
                think_start = open_span[1]
        c = text.find(close_marker, think_start)
        think_end = c if c >= 0 else len(text)
        codes[(starts >= think_start) & (starts < think_end)] = THINKING
        if open_span is not None:
            codes[overlap(*open_span)] = SPECIAL
        if c >= 0:
            codes[overlap(c, c + len(close_marker))] = SPECIAL
            answer_from = c + len(close_marker)
        else:
            answer_from = -1
    if answer_from >= 0:
        hits = [h for h in (text.find(m, answer_from) for m in BOX_MARKERS) if h >= 0]
        if hits:
            b = min(hits)
            first = int(np.argmax(ends > b))  # first token overlapping the box marker
            codes[first:] = FINAL_ANSWER
    return codes


def segment_for_family(token_texts: Sequence[str], family: Family) -> np.ndarray:
    """`segment_tokens` with a family's thinking markers."""
    return segment_tokens(token_texts, family.open_marker, family.close_marker)


def segment_ids(tokenizer: Any, ids: Sequence[int], family: Family) -> np.ndarray:
    """Decode each id (special tokens kept) and segment."""
    return segment_for_family(token_strings(tokenizer, ids), family)


def reasoning_length(segments: np.ndarray) -> int:
    """Thinking tokens, or solution tokens when the trace has no thinking (the tokens anchors
    count)."""
    seg = np.asarray(segments)
    n = int((seg == THINKING).sum())
    return n if n > 0 else int((seg == SOLUTION).sum())


def anchor_cutoff(segments: np.ndarray, t: int) -> int:
    """Token index of the t-th (1-based) thinking token; solution tokens when there are no
    thinking tokens. The prefix for anchor t is tokens[0 : cutoff + 1]. ValueError when the
    trace has fewer than t such tokens."""
    seg = np.asarray(segments)
    if t < 1:
        raise ValueError(f"anchor must be >= 1, got {t}")
    idx = np.flatnonzero(seg == THINKING)
    if idx.size == 0:
        idx = np.flatnonzero(seg == SOLUTION)
    if t > idx.size:
        raise ValueError(f"anchor {t} is beyond the trace's {idx.size} reasoning tokens")
    return int(idx[t - 1])
