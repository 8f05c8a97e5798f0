"""Task families: what is asked (cohort row -> user message) and how it is judged (grader).

The separation follows Inspect AI's dataset / solver / scorer split: the engine never sees a
cohort row, only prompt token ids; a grader never sees the model, only the completion text."""

from __future__ import annotations

from typing import Any

from breakthrough.errors import BtError
from breakthrough.models import TASK_INSTRUCTION as MATH_INSTRUCTION  # protocol 1.3, prompt v1

PROMPT_VARIANTS = ("plain", "explicit")  # optimum family only (uniqueness.md)


def task_family(item: dict[str, Any]) -> str:
    return str(item.get("family", "math"))


def user_message(item: dict[str, Any], variant: str = "plain") -> str:
    """The user turn for one cohort row (protocol 1.3: problem, blank line, instruction)."""
    family = task_family(item)
    if family == "math":
        return f"{item['problem']}\n\n{MATH_INSTRUCTION}"
    if family == "optimum":
        from breakthrough.optimum.prompts import render_prompt

        if variant not in PROMPT_VARIANTS:
            raise BtError(f"--prompt-variant: expected one of {PROMPT_VARIANTS}, got {variant!r}")
        return render_prompt(item, variant)
    raise BtError(f"cohort row {item.get('id')!r}: unknown family {family!r}")
