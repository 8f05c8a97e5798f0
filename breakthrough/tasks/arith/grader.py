"""The `arith` grader: exact integer answers for the demonstration family.

Which number in a completion is its answer? A plain chat model does not box its answer; it
restates the problem and states a result ("17 + 25 = 42", "To add 3 and 4 ... gives us 7").
So the answer is, in this order:
  1. the content of the first `\\boxed{...}`, when the completion has one;
  2. else the first number in the text that is not one of the problem's operands.
Correct iff that number equals the row's `answer` exactly (42.0 counts as 42; 42.5 does not).
The whole text is graded, as for math: a probe's text is its prefix plus its continuation, so an
answer already stated in the prefix is the answer of every continuation of that prefix.
Status: correct | wrong | missing (no candidate number) | truncated (no number and the
completion hit its token limit). Pure Python."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from breakthrough.tasks.grade import Grade

NAME = "arith"
VERSION = "arith-grader-1"

# A number not glued to a word or another number ("SmolLM2" holds no answer); commas between
# digit groups are allowed ("1,024").
NUMBER = re.compile(
    r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])"  # 1,024
    r"|(?<![\w.])\d+(?:\.\d+)?(?![\w])"  # 42, 42.0
)
BOXED = re.compile(r"\\(?:boxed|fbox)\{([^{}]*)\}")
TRUNCATED = frozenset({"length", "answer_reserve"})


def _value(text: str) -> Fraction | None:
    m = NUMBER.search(text)
    return Fraction(m.group(0).replace(",", "")) if m else None


def extract(text: str, operands: list[int]) -> tuple[str | None, Fraction | None, str]:
    """(answer string, its value, method "boxed" | "first_result" | "none")."""
    box = BOXED.search(text)
    if box:
        return box.group(1).strip(), _value(box.group(1)), "boxed"
    skip = {Fraction(int(x)) for x in operands}
    for m in NUMBER.finditer(text):
        value = Fraction(m.group(0).replace(",", ""))
        if value not in skip:
            return m.group(0), value, "first_result"
    return None, None, "none"


class ArithGrader:
    """Exact integer grading of `arith` rows (fields `answer`, `operands`)."""

    name = NAME
    version = VERSION

    def grade(self, text: str, item: dict[str, Any], finish_reason: str | None = None) -> Grade:
        extracted, value, method = extract(text or "", list(item["operands"]))
        if value is None:
            status = "truncated" if finish_reason in TRUNCATED else "missing"
            return Grade(False, status, method, NAME, VERSION, extracted)
        correct = value == Fraction(int(item["answer"]))
        return Grade(
            correct,
            "correct" if correct else "wrong",
            method,
            NAME,
            VERSION,
            extracted,
            {"expected": int(item["answer"])},
        )

    def grade_many(self, jobs: list[tuple[str, dict[str, Any], str | None]]) -> list[Grade]:
        return [self.grade(text, item, finish) for text, item, finish in jobs]
