"""Answer extraction and the cheap in-process comparisons of protocol section 7.

Everything here is pure string work (no sympy, no math-verify) so it runs in the caller's process;
only the symbolic step (math-verify) needs a killable worker (see `verify_pool.py`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\{")
# Each pattern starts with a greedy `.*` so a match is the LAST occurrence on its line.
_GSM_MARKER = re.compile(r".*####[ \t]*(.*)")
_FINAL_ANSWER = re.compile(r".*final answer\s*(?:is|:)[ \t]*:?[ \t]*(\S.*)", re.IGNORECASE)
_ANSWER = re.compile(r".*\banswer\s*(?:is|:)[ \t]*:?[ \t]*(\S.*)", re.IGNORECASE)
_UNWRAP = re.compile(r"\\(?:text|mathrm|mathbf)\{([^{}]*)\}")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SIMPLE = r"[+-]?(?:\d+\.?\d*|\.\d+)"
_FRACTION = re.compile(rf"({_SIMPLE})/({_SIMPLE})")


@dataclass(frozen=True)
class Extraction:
    """The answer string found in a completion and how it was found.

    `method` is one of `boxed`, `gsm_marker`, `text_marker`, `missing` (protocol 7, steps 1-4)."""

    answer: str | None
    method: str


def balanced_content(text: str, start: int) -> str | None:
    """The text from `start` up to the brace closing the `{` just before `start`, or None.

    Escaped braces (`\\{`, `\\}`) do not count, so `\\boxed{\\left\\{ x \\right.}` is balanced."""
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def boxed_contents(text: str) -> list[str]:
    """Every balanced `\\boxed{...}` / `\\fbox{...}` content, in order of the opening token.

    Unbalanced occurrences (e.g. a trace cut mid-box) are skipped; nested boxes are found too, so
    in `\\boxed{\\boxed{5}}` the inner `5` starts last and wins."""
    found = []
    for m in _BOX_OPEN.finditer(text):
        content = balanced_content(text, m.end())
        if content is not None:
            found.append(content)
    return found


def _last_line_match(pattern: re.Pattern[str], text: str) -> str | None:
    """The captured rest-of-line of the last match of `pattern`, stripped, or None."""
    last = None
    for line in text.splitlines():
        m = pattern.match(line)
        if m and m.group(1).strip():
            last = m.group(1).strip()
    return last


def extract_final_answer(text: str) -> Extraction:
    """Protocol 7 extraction: last balanced box, else last `####` remainder, else the last
    "final answer is/:" and then "answer is/:" (case-insensitive, rest of line), else missing."""
    boxes = boxed_contents(text)
    if boxes:
        return Extraction(boxes[-1].strip(), "boxed")
    gsm = _last_line_match(_GSM_MARKER, text)
    if gsm is not None:
        return Extraction(gsm, "gsm_marker")
    for pattern in (_FINAL_ANSWER, _ANSWER):
        found = _last_line_match(pattern, text)
        if found is not None:
            return Extraction(found, "text_marker")
    return Extraction(None, "missing")


def normalize_answer(answer: str, drop_commas: bool = False) -> str:
    """Protocol 7 normalisation, used by both the numeric and the string comparison.

    Strip spaces and `$`, unwrap `\\text{}`/`\\mathrm{}`/`\\mathbf{}` whose content has no braces,
    remove `\\,` and all whitespace, strip trailing `.,;`, optionally drop commas (numeric only,
    for thousands separators), and turn `\\%` into `%`."""
    s = answer.strip().strip("$").strip()
    s = _UNWRAP.sub(r"\1", s)
    s = s.replace("\\,", "")
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".,;")
    if drop_commas:
        s = s.replace(",", "")
    return s.replace("\\%", "%")


def parse_number(answer: str) -> float | None:
    """The value of a plain decimal or a simple `a/b` fraction (percent divides by 100), or None.

    Expects a string already normalised with `drop_commas=True`."""
    s = answer
    scale = Decimal(1)
    if s.endswith("%"):
        s, scale = s[:-1], Decimal(100)
    try:
        if _DECIMAL.fullmatch(s):
            value = Decimal(s)
        elif m := _FRACTION.fullmatch(s):
            num, den = Decimal(m.group(1)), Decimal(m.group(2))
            if den == 0:
                return None
            value = num / den
        else:
            return None
        return float(value / scale)
    except (InvalidOperation, OverflowError):
        return None


def numeric_verdict(prediction: str, reference: str) -> bool | None:
    """Protocol 7 step 1: True/False when BOTH sides parse as numbers (final), else None."""
    pred = parse_number(normalize_answer(prediction, drop_commas=True))
    ref = parse_number(normalize_answer(reference, drop_commas=True))
    if pred is None or ref is None:
        return None
    return math.isclose(pred, ref, rel_tol=1e-9, abs_tol=1e-9)


def string_match(prediction: str, reference: str) -> bool:
    """Protocol 7 step 2: equality after normalisation (commas kept)."""
    return normalize_answer(prediction) == normalize_answer(reference)
