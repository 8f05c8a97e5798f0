"""Task families: what is asked (cohort row -> user message) and how it is judged (grader).

The separation follows Inspect AI's dataset / solver / scorer split: the engine never sees a
cohort row, only prompt token ids; a grader never sees the model, only the completion text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.protocol import TASK_INSTRUCTION
from breakthrough.tasks.arith.grader import ArithGrader
from breakthrough.tasks.arith.prompts import user_message as arith_user_message
from breakthrough.tasks.grade import Grader
from breakthrough.tasks.math.grader import MathGrader
from breakthrough.tasks.optimum.grader import OptimumGrader
from breakthrough.tasks.optimum.prompts import VARIANTS, render_prompt


@dataclass(frozen=True)
class TaskFamily:
    """One task family: how a cohort row becomes the user turn, and the grader that judges a
    completion. Adding a family is one entry in `FAMILIES` (and its row fields in
    `tasks.cohorts.FAMILY_FIELDS`)."""

    name: str
    user_message: Callable[[dict[str, Any], str], str]  # (row, prompt variant) -> user turn
    grader: Callable[[Path | None], Grader]  # cache folder (or None) -> grader
    summary: str  # what the family is, for docs and messages


def _math_message(item: dict[str, Any], variant: str) -> str:
    """Protocol 1.3: the problem, a blank line, the instruction."""
    return f"{item['problem']}\n\n{TASK_INSTRUCTION}"


def _optimum_message(item: dict[str, Any], variant: str) -> str:
    """The UoO prompt in `variant` ("plain" or "explicit", uniqueness.md section 7)."""
    if variant not in VARIANTS:
        raise BtError(f"--prompt-variant: expected one of {VARIANTS}, got {variant!r}")
    return render_prompt(item, variant)


def _math_grader(cache_dir: Path | None) -> Grader:
    """math-verify is slow and deterministic: with a cache folder, verdicts are cached in
    `cache_dir/grade_cache.sqlite`."""
    return MathGrader(cache_path=cache_dir / "grade_cache.sqlite" if cache_dir else None)


FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (
        TaskFamily("math", _math_message, _math_grader, "MATH problems, graded by math-verify"),
        TaskFamily(
            "optimum",
            _optimum_message,
            lambda cache_dir: OptimumGrader(),
            "Uniqueness-of-Optimum problems (the UoO study)",
        ),
        TaskFamily(
            "arith",
            lambda item, variant: arith_user_message(item),
            lambda cache_dir: ArithGrader(),
            "the demonstration family (not the study)",
        ),
    )
}


def task_family(item: dict[str, Any]) -> str:
    """The family of one cohort row (rows without the field are math)."""
    return str(item.get("family", "math"))


def user_message(item: dict[str, Any], variant: str = "plain") -> str:
    """The user turn for one cohort row, by its family's rule (`FAMILIES`); `variant` is the
    optimum family's prompt variant."""
    family = task_family(item)
    if family not in FAMILIES:
        raise BtError(f"cohort row {item.get('id')!r}: unknown family {family!r}")
    return FAMILIES[family].user_message(item, variant)


def family_of(rows: Sequence[dict[str, Any]]) -> str:
    """The one task family of a run's rows (a run never mixes families)."""
    families = {task_family(r) for r in rows}
    if len(families) != 1:
        raise BtError(f"a run holds one task family; the cohort mixes {sorted(families)}")
    return families.pop()


def make_grader(family: str, cache_dir: Path | None = None) -> Grader:
    """The grader of a task family (`FAMILIES`). With `cache_dir`, a family that caches its
    verdicts (math) keeps them under that folder."""
    if family not in FAMILIES:
        raise BtError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[family].grader(cache_dir)
