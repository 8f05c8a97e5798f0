"""The `math` grader: protocol section 7 (extraction, numeric, normalised string, math-verify).

Extraction and the two cheap comparisons run in-process; only math-verify runs in killable
worker processes with a hard deadline (`verify_pool.py`), because a pathological answer can hang
sympy beyond math-verify's own `signal.alarm` timeouts. A timeout counts as incorrect, with status
`timeout` (design decision 6)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.tasks.grade import Grade
from breakthrough.tasks.math.extract import extract_final_answer, numeric_verdict, string_match
from breakthrough.tasks.math.grade_cache import GradeCache
from breakthrough.tasks.math.verify_pool import DEFAULT_TIMEOUT_S, VerifyPool, VerifyResult

NAME = "math"
VERSION = "math-1"

Job = tuple[str, dict[str, Any], str | None]  # (completion text, cohort row, finish_reason)


def quick_verdict(prediction: str, reference: str) -> tuple[bool, str] | None:
    """Protocol 7 steps 1-2 as (correct, method); None means "ask math-verify".

    A numeric verdict is final even when False (e.g. `12` vs `21`); a string match only ever
    says correct."""
    numeric = numeric_verdict(prediction, reference)
    if numeric is not None:
        return numeric, "numeric"
    if string_match(prediction, reference):
        return True, "normalized_string"
    return None


def _verdict_grade(correct: bool, method: str, **detail: Any) -> Grade:
    return Grade(
        correct=correct,
        status="correct" if correct else "wrong",
        method=method,
        grader=NAME,
        version=VERSION,
        detail=detail,
    )


def grade_from_verify(result: VerifyResult) -> Grade:
    """Protocol 7 steps 3-4 from a worker result. A False or raising math-verify ends in step 4
    (incorrect, method `normalized_string`); a timeout or dead worker keeps its own status."""
    if result.status == "ok" and result.verdict:
        return _verdict_grade(True, "math_verify")
    if result.status == "ok":
        return _verdict_grade(False, "normalized_string", math_verify=False)
    if result.status == "exception":
        return _verdict_grade(False, "normalized_string", math_verify_error=result.error)
    return Grade(
        correct=False,
        status=result.status,  # timeout | error
        method="math_verify",
        grader=NAME,
        version=VERSION,
        detail={"elapsed_s": round(result.elapsed_s, 3), "error": result.error},
    )


def reference_of(item: dict[str, Any]) -> str:
    """The reference answer of a cohort row (`answer`, see docs/architecture.md)."""
    answer = item.get("answer")
    if not isinstance(answer, str):
        raise BtError(f"cohort row {item.get('id', '?')!r}: field 'answer' missing or not a string")
    return answer


class MathGrader:
    """Grades MATH-style completions. `cache_path` (e.g. `RUN_DIR/grade_cache.sqlite`) persists
    verdicts; `timeout_s` is the hard wall-clock deadline of one math-verify call."""

    name = NAME
    version = VERSION

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: int | None = None,
        cache_path: str | Path | None = None,
        hook: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.workers = workers or min(2, os.cpu_count() or 1)
        self.hook = hook
        self.cache = GradeCache(cache_path)
        self._pool: VerifyPool | None = None

    @property
    def pool(self) -> VerifyPool:
        """Started on first need: grading that never reaches math-verify costs no processes."""
        if self._pool is None:
            self._pool = VerifyPool(self.workers, self.timeout_s, self.hook)
        return self._pool

    def grade(self, text: str, item: dict[str, Any], finish_reason: str | None = None) -> Grade:
        return self.grade_many([(text, item, finish_reason)])[0]

    def grade_many(self, jobs: list[Job]) -> list[Grade]:
        """Extract every answer, then compare the (prediction, reference) pairs in one batch."""
        references = [reference_of(item) for _, item, _ in jobs]  # bad rows fail before work
        extractions = [extract_final_answer(text) for text, _, _ in jobs]
        pairs = [
            (ex.answer, ref)
            for ex, ref in zip(extractions, references, strict=True)
            if ex.answer is not None
        ]
        verdicts = iter(self.compare_many(pairs))
        grades = []
        for ex, (_, _, finish_reason) in zip(extractions, jobs, strict=True):
            detail: dict[str, Any] = {"extraction": ex.method, "finish_reason": finish_reason}
            if ex.answer is None:
                grades.append(
                    Grade(False, "missing", "missing_answer", NAME, VERSION, None, detail)
                )
                continue
            verdict = next(verdicts)
            detail = {**verdict.detail, **detail}
            grades.append(replace(verdict, extracted=ex.answer, detail=detail))
        return grades

    def compare_many(self, pairs: list[tuple[str, str]]) -> list[Grade]:
        """Protocol 7 comparison of (prediction, reference) pairs, through the cache; each
        distinct pair reaches math-verify at most once.

        The cache key is the extracted answer (outer whitespace stripped), not its protocol
        normalisation: math-verify sees the raw string, and normalising can change its meaning
        (removing spaces turns `\\pi r` into `\\pir`)."""
        keys = [(VERSION, pred.strip(), ref) for pred, ref in pairs]
        known: dict[tuple[str, str, str], Grade] = {}
        fresh: list[tuple[tuple[str, str, str], Grade]] = []
        ask: list[tuple[str, str, str]] = []
        for key in dict.fromkeys(keys):
            cached = self.cache.get(key)
            if cached is not None:
                known[key] = cached
                continue
            quick = quick_verdict(key[1], key[2])
            if quick is not None:
                known[key] = _verdict_grade(*quick)
                fresh.append((key, known[key]))
            else:
                ask.append(key)
        if ask:
            results = self.pool.map([(ref, pred) for _, pred, ref in ask])  # gold first
            for key, result in zip(ask, results, strict=True):
                known[key] = grade_from_verify(result)
                fresh.append((key, known[key]))
        self.cache.put_many(fresh)
        return [known[key] for key in keys]

    def close(self) -> None:
        """Kill the worker processes and close the cache file."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.cache.close()

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
