"""The task-family interface: the user turn of each family, one family per run, the grader
factory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from breakthrough.errors import BtError
from breakthrough.tasks.family import family_of, make_grader, user_message
from breakthrough.tasks.optimum.grader import OptimumGrader
from breakthrough.tasks.optimum.prompts import EXPLICIT_PARAGRAPH

UOO29 = Path(__file__).resolve().parents[2] / "cohorts" / "uoo29.jsonl"


def test_math_user_message_is_protocol_1_3_prompt_v1():
    msg = user_message({"problem": "What is 2+3?"})
    assert (
        msg == "What is 2+3?\n\nSolve the problem carefully. "
        "Put only the final answer inside \\boxed{}."
    )
    assert user_message({"family": "math", "problem": "What is 2+3?"}) == msg


def test_optimum_user_message_variants():
    item = json.loads(UOO29.read_text().splitlines()[0])
    plain, explicit = user_message(item), user_message(item, "explicit")
    assert EXPLICIT_PARAGRAPH not in plain and EXPLICIT_PARAGRAPH in explicit
    with pytest.raises(BtError, match="--prompt-variant"):
        user_message(item, "loud")
    with pytest.raises(BtError, match="unknown family 'poetry'"):
        user_message({"id": "p1", "family": "poetry"})


def test_one_family_per_run():
    assert family_of([{"problem": "a"}, {"family": "math"}]) == "math"
    with pytest.raises(BtError, match="mixes"):
        family_of([{"family": "math"}, {"family": "optimum"}])


def test_make_grader_by_family():
    assert isinstance(make_grader("optimum"), OptimumGrader)
    with pytest.raises(BtError, match="unknown task family"):
        make_grader("poetry")


def test_registry_covers_every_cohort_family(tmp_path):
    """One registry entry per family a cohort row may name, each with its grader and user turn;
    an unknown family's message lists the registry's names."""
    from breakthrough.tasks.arith.grader import ArithGrader
    from breakthrough.tasks.cohorts import FAMILIES as COHORT_FAMILIES
    from breakthrough.tasks.family import FAMILIES
    from breakthrough.tasks.math.grader import MathGrader

    assert tuple(FAMILIES) == COHORT_FAMILIES == ("math", "optimum", "arith")
    assert isinstance(make_grader("math"), MathGrader)
    assert isinstance(make_grader("arith"), ArithGrader)
    assert isinstance(make_grader("math", tmp_path), MathGrader)
    with pytest.raises(BtError, match=r"\(known: math, optimum, arith\)$"):
        make_grader("poetry")
    from breakthrough.tasks.arith.prompts import INSTRUCTION

    row = {"family": "arith", "problem": "Compute 2 + 3.", "operands": [2, 3]}
    assert user_message(row) == user_message(row, "explicit") == f"Compute 2 + 3. {INSTRUCTION}"
