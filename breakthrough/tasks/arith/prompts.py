"""The user turn of an `arith` row. A plain chat model answers "Compute 17 + 25." with a line
such as "17 + 25 = 42"; the instruction keeps it to a number instead of an essay (measured on
SmolLM2-135M: "What is 17 + 25?" draws a paragraph about arithmetic progressions)."""

from __future__ import annotations

from typing import Any

INSTRUCTION = "Give the answer as a number."


def problem_text(expression: str) -> str:
    """The row's `problem` field: "Compute 17 + 25."."""
    return f"Compute {expression}."


def user_message(item: dict[str, Any]) -> str:
    """The problem, a space, the instruction: "Compute 17 + 25. Give the answer as a number."."""
    return f"{item['problem']} {INSTRUCTION}"
