"""Task families: what is asked (cohort row -> user message) and how it is judged (grader).

The separation follows Inspect AI's dataset / solver / scorer split: the engine never sees a
cohort row, only prompt token ids; a grader never sees the model, only the completion text."""

from __future__ import annotations

from collections.abc import Sequence
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


def task_family(item: dict[str, Any]) -> str:
    """The family of one cohort row (rows without the field are math)."""
    return str(item.get("family", "math"))


def user_message(item: dict[str, Any], variant: str = "plain") -> str:
    """The user turn for one cohort row. math: protocol 1.3 (problem, blank line, instruction);
    optimum: the UoO prompt in `variant` ("plain" or "explicit", uniqueness.md section 7)."""
    family = task_family(item)
    if family == "math":
        return f"{item['problem']}\n\n{TASK_INSTRUCTION}"
    if family == "optimum":
        if variant not in VARIANTS:
            raise BtError(f"--prompt-variant: expected one of {VARIANTS}, got {variant!r}")
        return render_prompt(item, variant)
    if family == "arith":  # the demonstration family (breakthrough.tasks.arith)
        return arith_user_message(item)
    raise BtError(f"cohort row {item.get('id')!r}: unknown family {family!r}")


def family_of(rows: Sequence[dict[str, Any]]) -> str:
    """The one task family of a run's rows (a run never mixes families)."""
    families = {task_family(r) for r in rows}
    if len(families) != 1:
        raise BtError(f"a run holds one task family; the cohort mixes {sorted(families)}")
    return families.pop()


def make_grader(family: str, cache_dir: Path | None = None) -> Grader:
    """The grader of a task family ("math", "optimum" or the demonstration family "arith").
    With `cache_dir`, math verdicts are cached in `cache_dir/grade_cache.sqlite` (math-verify
    is slow and deterministic)."""
    if family == "math":
        return MathGrader(cache_path=cache_dir / "grade_cache.sqlite" if cache_dir else None)
    if family == "optimum":
        return OptimumGrader()
    if family == "arith":
        return ArithGrader()
    raise BtError(f"unknown task family {family!r} (known: math, optimum, arith)")
