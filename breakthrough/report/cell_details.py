"""What a cell page shows besides its labels: the problem, the reference answer, the base trace
with each anchor's cut point, and every branch's extracted answer and verdict.

Pure: a run's samples frame (`RunStore.samples_frame(arrays=False)`) and its cohort rows
(`RunStore.items()`) in, one `CellDetail` per cell out.

Where is anchor t's cut in the base trace's *text*? `bt continue` stores it with each probe
(extra "prefix_chars": the length of the decoded prefix), and the page uses it (`stored_cut`).
For runs made before that, it is estimated without the tokenizer (a report must not need the
model): a continuation's
text is the decoded prefix followed by the decoded continuation, so the cut is where the
continuations of that anchor leave the base text: the shortest common prefix of the base text
and each branch's text. That is the cut itself once one branch's first new character differs
from the base trace's next one; it is never before the cut, and after it only by characters
that every branch repeats from the base trace (often one space): what the page says it marks,
where the continuations leave the base text (tests/report/test_classify_outputs.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from breakthrough.stats import missing

# Grade statuses (`tasks.grade.Grade.status`) as a reader says them.
VERDICTS = {
    "correct": "correct",
    "wrong": "wrong",
    "missing": "no answer",
    "timeout": "grader timed out",
    "malformed": "malformed answer",
    "truncated": "truncated",
    "error": "grader error",
}
BRANCH_COLUMNS = [
    "kind",
    "anchor",
    "budget",
    "branch",
    "extracted",
    "verdict",
    "correct",
    "finish_reason",
    "continuation",
]


@dataclass
class CellDetail:
    """One cell's problem, reference answer, base trace and branches."""

    problem: str | None = None
    answer: str | None = None
    base_text: str | None = None
    cuts: dict[int, int] = field(default_factory=dict)  # anchor → character offset in base_text
    branches: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BRANCH_COLUMNS))


# Special tokens a tokenizer decodes into a trace's text (ChatML <|im_end|>, <|endoftext|>,
# Llama-3 <|eot_id|>, Gemma <end_of_turn>, SentencePiece </s>, ...): kept in the store (the
# text is what was generated), hidden from what a reader sees. <think> and </think> are the
# reasoning markers, not noise: they stay.
SPECIAL_TOKENS = re.compile(
    r"<\|[^<>|\s]{1,64}\|>|<(?:eos|bos|pad|unk|end_of_turn|start_of_turn|/s|s)>"
)


def shown_text(text: str) -> str:
    """A stored text as a reader sees it: special tokens removed (`SPECIAL_TOKENS`)."""
    return SPECIAL_TOKENS.sub("", text)


# A cut-off answer, as every page says it: the budget ended the text before a complete
# answer (an unclosed \boxed{, or none), so the branch has no answer, whatever fragment the
# text ends with.
CUT_OFF = "cut off"
CUT_OFF_FINISH = ("length", "answer_reserve")


def balanced(text: str) -> bool:
    """Whether every { of text is closed (a fragment like `\\boxed{(5,` is not)."""
    depth = 0
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            return False
    return depth == 0


def is_cut_off(extracted: Any, finish_reason: Any, correct: Any = None) -> bool:
    """A branch whose answer the token budget cut off: its extracted answer is a fragment
    (unbalanced braces), or it ended at a token limit without a graded-correct answer and
    without an extracted one."""
    if not missing(extracted) and not balanced(str(extracted)):
        return True
    cut = str(finish_reason) in CUT_OFF_FINISH
    return cut and missing(extracted) and not (not missing(correct) and bool(correct))


_OPEN_MATH = re.compile(r"\\\(|\\\[|\$")


def problem_line(problem: str | None, limit: int = 90) -> str | None:
    """The start of a problem on one line (the run index's "problem" column). A cut never
    falls inside a math span: the line ends before a span it would leave unclosed, so the page
    never shows half a formula as raw LaTeX."""
    if not problem:
        return None
    line = " ".join(str(problem).split())
    if len(line) <= limit:
        return line
    from breakthrough.report.mathtext import _SPAN

    cut = limit - 1
    for m in _SPAN.finditer(line):
        if m.start() < cut < m.end():  # the cut would split this span: end before it
            cut = m.start()
            break
    head = line[:cut]
    opened = list(_OPEN_MATH.finditer(head))
    if head.count("$") % 2 and opened:  # an unpaired $ left in the head
        head = head[: opened[-1].start()]
    return head.rstrip() + "…"


def verdict(correct: Any, status: Any) -> str:
    """A branch's verdict in words: the grade status, or "not graded"."""
    if missing(status):
        return "not graded" if missing(correct) else ("correct" if correct else "wrong")
    return VERDICTS.get(str(status), str(status))


def problem_text(item: Mapping[str, Any]) -> str | None:
    """The problem as the cohort row states it (an optimum row without text shows its kind
    and instance, from which the prompt is rendered at run time)."""
    if item.get("problem"):
        return str(item["problem"])
    if item.get("instance") is not None:
        return f"{item.get('kind', 'instance')}: {item['instance']}"
    return None


def cut_offset(base_text: str, branch_texts: list[str]) -> int:
    """Character offset of a cut in the base text: the shortest common prefix of the base text
    and the texts of the branches continued from it."""
    if not branch_texts:
        return 0
    return min(len(os.path.commonprefix([base_text, t])) for t in branch_texts)


def stored_cut(base_text: str, probes: pd.DataFrame) -> int | None:
    """The exact cut, when `bt continue` stored it with the probes (extra "prefix_chars": the
    length of the decoded prefix) and the base text and every probe's text agree up to it;
    None for runs made before it was stored (then `cut_offset` estimates it)."""
    if "extra" not in probes:
        return None
    values = set()
    for e in probes["extra"].dropna():
        try:
            values.add((json.loads(e) if isinstance(e, str) else dict(e)).get("prefix_chars"))
        except (TypeError, ValueError):
            return None
    if len(values) != 1 or not isinstance(n := values.pop(), int):
        return None
    head = base_text[:n]
    if len(head) != n or not all(str(t).startswith(head) for t in probes["text"].dropna()):
        return None
    return n


def _branch_rows(g: pd.DataFrame, cuts: Mapping[int, int]) -> pd.DataFrame:
    """One row per probe and restart branch: what the grader extracted, its verdict, and the
    text the branch added (after its cut; a restart's whole text)."""
    rows = []
    for r in g.sort_values(["kind", "anchor", "budget", "branch"]).to_dict(orient="records"):
        if r["kind"] not in ("probe", "restart"):
            continue
        text = "" if missing(r.get("text")) else str(r["text"])
        start = cuts.get(int(r["anchor"]), 0) if r["kind"] == "probe" else 0
        extracted = r.get("grade_extracted")
        rows.append(
            {
                "kind": r["kind"],
                "anchor": int(r["anchor"]) if r["kind"] == "probe" else None,
                "budget": int(r["budget"]),
                "branch": int(r["branch"]),
                "extracted": None if missing(extracted) else str(extracted),
                "verdict": verdict(r.get("correct"), r.get("grade_status")),
                "correct": None if missing(r.get("correct")) else bool(r["correct"]),
                "finish_reason": r.get("finish_reason"),
                "continuation": text[start:],
            }
        )
    return pd.DataFrame(rows, columns=BRANCH_COLUMNS)


def cell_details(
    samples: pd.DataFrame,
    items: Mapping[str, Mapping[str, Any]] | None = None,
    answers: Mapping[str, Any] | None = None,
) -> dict[str, CellDetail]:
    """cell_id → CellDetail for every cell in `samples` or `items`. `answers` (cell_id →
    reference answer, e.g. from `RunStore.cells_frame()`) fills in answers the items lack."""
    items = items or {}
    answers = answers or {}
    out: dict[str, CellDetail] = {}
    groups = dict(tuple(samples.groupby("cell_id"))) if len(samples) else {}
    for cid in sorted(set(groups) | set(items)):
        item = items.get(cid, {})
        answer = item.get("answer", answers.get(cid))
        detail = CellDetail(
            problem=problem_text(item), answer=None if missing(answer) else str(answer)
        )
        g = groups.get(cid)
        if g is not None:
            base = g[g["kind"] == "base"]
            if len(base) and not missing(base.iloc[0]["text"]):
                detail.base_text = str(base.iloc[0]["text"])
                probes = g[g["kind"] == "probe"]
                detail.cuts = {
                    int(a): cut
                    if (cut := stored_cut(detail.base_text, p)) is not None
                    else cut_offset(detail.base_text, [str(t) for t in p["text"].dropna()])
                    for a, p in probes.groupby("anchor")
                }
            detail.branches = _branch_rows(g, detail.cuts)
        out[cid] = detail
    return out
