"""The `optimum` grader: Uniqueness-of-Optimum answers (uniqueness.md sections 8-9).

A completion is free text ending with one JSON line
`{"solution": [...], "objective": <int>, "unique": <bool>, "num_optima": <int>}`.
Grading: thinking removed -> top-level brace-balanced blocks -> the LAST block mentioning
"solution" or optima -> strict json.loads (no fallback to earlier drafts) -> strict field
validation -> the objective is recomputed from the instance (the model's `objective` is never
trusted) -> three checks (optimal, unique claim right, count exact); score 1 iff all three pass.
One primary label per answer, the first failing stage in this order:
truncated | malformed | infeasible | suboptimal | count_under | count_over | unique_flag_wrong |
pass.

Pure Python: no numpy, no enumeration."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from breakthrough.tasks.grade import Grade
from breakthrough.tasks.optimum.generator import SENSE, bin_of, evaluate

NAME = "optimum"
VERSION = "uoo-grader-1"
KEYS = ("solution", "objective", "unique", "num_optima")
ALIASES = {"number_of_optima": "num_optima"}

# (name, open marker, close marker) of the thinking blocks of the model families we run.
THINK_MARKERS: tuple[tuple[str, str, str], ...] = (
    ("think", "<think>", "</think>"),
    ("channel_thought", "<|channel>thought", "<channel|>"),
    ("mistral_think", "[THINK]", "[/THINK]"),
    ("harmony", "<|channel|>analysis", "<|channel|>final<|message|>"),
)

Job = tuple[str, dict[str, Any], "str | None"]


# ---------------------------------------------------------------------------------------------
# Extraction (spec 8.2)


def strip_thinking(text: str) -> tuple[str, str | None]:
    """(answer text, name of the marker family removed or None).

    For each marker family: when the close marker occurs, only the text after its last
    occurrence is kept; an open marker left without a close afterwards starts thinking that
    never ended, so only the text before it is kept (a completion cut inside its thinking has
    no answer text)."""
    removed = None
    for name, open_m, close_m in THINK_MARKERS:
        cut = text.rfind(close_m)
        if cut >= 0:
            text = text[cut + len(close_m) :]
            removed = removed or name
        at = text.find(open_m)
        if at >= 0:
            text = text[:at]
            removed = removed or name
    return text, removed


def json_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level brace-balanced block; braces inside JSON strings are
    ignored; an unclosed block (truncated output) is not a block."""
    out: list[tuple[int, int]] = []
    depth, in_str, esc, start = 0, False, False, 0
    for i, ch in enumerate(text):
        if depth and in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                out.append((start, i + 1))
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_loads(s: str) -> Any:
    """json.loads that also refuses NaN / Infinity."""
    return json.loads(s, parse_constant=_reject_constant)


_TAIL_OK = re.compile(r"(?:\s|`|json)*")


@dataclass
class Parsed:
    """Outcome of parsing one answer. `error` is None when the answer is well-formed."""

    error: str | None
    block: str | None = None
    obj: dict[str, Any] | None = None
    solution: list[int] | None = None  # normalised: 0/1 vector, or 0-based task list
    objective: float | int | None = None
    unique: bool | None = None
    num_optima: int | None = None
    json_at_end: bool | None = None
    strict_last_line_ok: bool = False
    zero_based: bool | None = None
    alias_used: bool = False


def _as_int(v: Any, allow_bool: bool) -> int | None:
    if isinstance(v, bool):
        return int(v) if allow_bool else None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def validate(obj: Any, kind: str, n: int) -> Parsed:
    """Spec 8.3: field presence, types and ranges. Any failure -> Parsed(error=...)."""
    if not isinstance(obj, dict):
        return Parsed("not_an_object")
    obj = dict(obj)
    alias_used = False
    for alias, key in ALIASES.items():
        if key not in obj and alias in obj:
            obj[key] = obj[alias]
            alias_used = True
    for key in KEYS:
        if key not in obj:
            return Parsed(f"missing_key:{key}", alias_used=alias_used)
    sol = obj["solution"]
    binary = kind != "assignment"
    if not isinstance(sol, list) or len(sol) != n:
        return Parsed("bad_solution_shape", alias_used=alias_used)
    maybe = [_as_int(v, allow_bool=binary) for v in sol]
    ints = [v for v in maybe if v is not None]
    if len(ints) != len(maybe):
        return Parsed("bad_solution_type", alias_used=alias_used)
    zero_based = None
    if binary:
        if any(v not in (0, 1) for v in ints):
            return Parsed("bad_solution_range", alias_used=alias_used)
        norm = ints
    else:
        if any(v < 0 or v > n for v in ints) or (0 in ints and n in ints):
            return Parsed("bad_solution_range", alias_used=alias_used)
        zero_based = 0 in ints
        norm = ints if zero_based else [v - 1 for v in ints]
    objective = obj["objective"]
    if isinstance(objective, bool) or not isinstance(objective, (int, float)):
        return Parsed("bad_type:objective", alias_used=alias_used)
    if not isinstance(obj["unique"], bool):
        return Parsed("bad_type:unique", alias_used=alias_used)
    raw_count = obj["num_optima"]
    if isinstance(raw_count, bool) or not isinstance(raw_count, (int, float)):
        return Parsed("bad_type:num_optima", alias_used=alias_used)
    count = _as_int(raw_count, allow_bool=False)
    if count is None or count < 0:
        return Parsed("bad_value:num_optima", alias_used=alias_used)
    return Parsed(
        None,
        obj=obj,
        solution=norm,
        objective=objective,
        unique=obj["unique"],
        num_optima=count,
        zero_based=zero_based,
        alias_used=alias_used,
    )


def parse_answer(text: str, kind: str, n: int) -> tuple[Parsed, str | None]:
    """Extract and validate the final JSON answer; returns (Parsed, thinking marker removed)."""
    answer, removed = strip_thinking(text)
    cands = [
        (s, e)
        for s, e in json_blocks(answer)
        if '"solution"' in answer[s:e] or "optima" in answer[s:e]
    ]
    if not cands:
        return Parsed("no_json"), removed
    s, e = cands[-1]
    block, tail = answer[s:e], answer[e:]
    at_end = _TAIL_OK.fullmatch(tail) is not None
    line_start = answer.rfind("\n", 0, s) + 1
    strict_line = tail.strip() == "" and answer[line_start:s].strip() == ""
    try:
        obj = strict_loads(block)
    except (ValueError, RecursionError):
        return Parsed("json_decode_error", block=block, json_at_end=at_end), removed
    p = validate(obj, kind, n)
    p.block, p.json_at_end, p.strict_last_line_ok = block, at_end, strict_line
    if p.obj is None and isinstance(obj, dict):
        p.obj = obj
    return p, removed


_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def lenient_parse_ok(block: str | None, kind: str, n: int) -> bool:
    """Diagnostic only (spec 8.5): would the block pass after format-only repairs?"""
    if block is None:
        return False
    fixed = re.sub(r"\b(True|False|None)\b", lambda m: _PY_LITERALS[m.group(1)], block)
    fixed = fixed.replace("'", '"')
    fixed = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", fixed)
    try:
        obj = strict_loads(fixed)
    except (ValueError, RecursionError):
        return False
    if isinstance(obj, dict) and kind != "assignment":
        sol = obj.get("solution")
        if (
            isinstance(sol, list)
            and sol
            and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= n for v in sol)
            and (len(sol) != n or any(v > 1 for v in sol))
        ):
            obj["solution"] = [1 if i + 1 in set(sol) else 0 for i in range(n)]
    return validate(obj, kind, n).error is None


# ---------------------------------------------------------------------------------------------
# Grading (spec 9)

LABEL_STATUS = {
    "pass": "correct",
    "infeasible": "wrong",
    "suboptimal": "wrong",
    "count_under": "wrong",
    "count_over": "wrong",
    "unique_flag_wrong": "wrong",
    "truncated": "truncated",
    "malformed": "malformed",
}


def grade_record(
    text: str, item: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    """The per-answer record: parsed, parse_error, checks, score, label, diag."""
    kind, inst = item["kind"], item["instance"]
    n, true_opt, true_n = inst["n"], item["optimum"], item["n_optima"]
    sense = item.get("sense") or SENSE[kind]
    p, removed = parse_answer(text or "", kind, n)
    diag: dict[str, Any] = {
        "json_at_end": p.json_at_end,
        "strict_last_line_ok": p.strict_last_line_ok,
        "zero_based": p.zero_based,
        "alias_used": p.alias_used,
        "thinking_removed": removed,
        "true_count": true_n,
    }
    base = {
        "kind": kind,
        "bin": item.get("bin"),
        "finish_reason": finish_reason,
        "block": p.block,
    }
    if p.error is not None:
        diag["lenient_parse_ok"] = lenient_parse_ok(p.block, kind, n)
        label = "truncated" if finish_reason == "length" else "malformed"
        return {
            **base,
            "parsed": p.obj,
            "parse_error": p.error,
            "checks": {"optimal": False, "unique": False, "count": False},
            "score": 0,
            "label": label,
            "diag": diag,
        }
    assert p.solution is not None and p.num_optima is not None
    feasible, obj_val = evaluate(kind, inst, p.solution)
    optimal = feasible and obj_val == true_opt
    unique_ok = p.unique == (true_n == 1)
    count_ok = p.num_optima == true_n
    claimed = p.num_optima
    if not feasible:
        label = "infeasible"
    elif not optimal:
        label = "suboptimal"
    elif claimed < true_n:
        label = "count_under"
    elif claimed > true_n:
        label = "count_over"
    elif not unique_ok:
        label = "unique_flag_wrong"
    else:
        label = "pass"
    gap = None
    if feasible:
        gap = (true_opt - obj_val) if sense == "max" else (obj_val - true_opt)
    diag.update(
        {
            "feasible": feasible,
            "recomputed_objective": obj_val,
            "objective_gap": gap,
            "claimed_objective": p.objective,
            "claimed_objective_is_optimum": p.objective == true_opt,
            "objective_claim_consistent": p.objective == obj_val,
            "claimed_count": claimed,
            "count_direction": "under"
            if claimed < true_n
            else "over"
            if claimed > true_n
            else "exact",
            "count_log2_ratio": math.log2(claimed) - math.log2(true_n) if claimed >= 1 else None,
            "within_x2": claimed >= 1 and true_n / 2 <= claimed <= 2 * true_n,
            "same_bin": bin_of(claimed) == bin_of(true_n),
            "self_consistent": p.unique == (claimed == 1),
            "lenient_parse_ok": True,
        }
    )
    score = int(optimal and unique_ok and count_ok)
    return {
        **base,
        "parsed": p.obj,
        "parse_error": None,
        "checks": {"optimal": optimal, "unique": unique_ok, "count": count_ok},
        "score": score,
        "label": label,
        "diag": diag,
    }


class OptimumGrader:
    """Grader for the "optimum" task family (UoO)."""

    name = NAME
    version = VERSION

    def grade(self, text: str, item: dict[str, Any], finish_reason: str | None = None) -> Grade:
        rec = grade_record(text, item, finish_reason)
        label = rec["label"]
        status = LABEL_STATUS[label]
        if label == "malformed" and rec["parse_error"] == "no_json":
            status = "missing"
        method = "recompute" if rec["parse_error"] is None else rec["parse_error"].split(":")[0]
        block = rec.pop("block")
        return Grade(rec["score"] == 1, status, method, NAME, VERSION, block, rec)

    def grade_many(self, jobs: list[Job]) -> list[Grade]:
        return [self.grade(text, item, fr) for text, item, fr in jobs]
