"""The task-family grading interface: a grader turns one model completion into a Grade record.

Grades are stored beside samples (never inside them) with the grader name and version, so a
run can be regraded without regenerating (design decision 6)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Grade:
    correct: bool
    status: str  # correct | wrong | missing | timeout | malformed | truncated | error
    method: str  # how the verdict was reached (numeric, normalized_string, math_verify, ...)
    grader: str  # grader name, e.g. "math" or "optimum"
    version: str  # grader version; part of the stored grade
    extracted: str | None = None  # the extracted answer string, if any
    detail: dict[str, Any] = field(default_factory=dict)  # grader-specific fields (checks, labels)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Grader(Protocol):
    """One grader per task family. `item` is the cohort row (its reference fields)."""

    name: str
    version: str

    def grade(self, text: str, item: dict[str, Any], finish_reason: str | None = None) -> Grade: ...

    def grade_many(self, jobs: list[tuple[str, dict[str, Any], str | None]]) -> list[Grade]: ...
