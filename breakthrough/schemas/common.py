"""Columns and units several declarations share: a cell's identity and its cohort row's
metadata, named and meant the same in every table that holds them."""

from __future__ import annotations

from breakthrough.schemas.columns import Column

TOKENS = "tokens"
RATE = "rate (0-1)"
COUNT = "count"
ADVANTAGE = "rate difference (-1-1)"

CELL_ID = Column(
    "cell_id",
    "str",
    "The cell: one problem × one model, named `{model}:{problem_id}`.",
    "gemma4-e4b:math_03159_7e3faf8d9130",
)
MODEL = Column(
    "model",
    "str",
    "The model's alias (`bt models list`; a local folder's name for a folder model).",
    "gemma4-e4b",
)
PROBLEM_ID = Column(
    "problem_id",
    "str",
    "The problem's id in its cohort (`cohorts/*.jsonl`, field `id`).",
    "math_03159_7e3faf8d9130",
    section="6.5",
)
RUN = Column(
    "run",
    "str",
    "The run the row comes from: its folder's name (made unique by its parent's name where "
    "two runs share one).",
    "math89-gemma4-e4b",
)
STAGE = Column(
    "stage",
    "str",
    "The cohort stage of the problem (e.g. dev, supplement, wave3, demo).",
    "dev",
    null_when="the cohort row has no stage",
    section="6.2",
)
LEVEL = Column(
    "level",
    "int64",
    "The problem's difficulty level (MATH: 1-5; arith's dial: 1-5).",
    4,
    null_when="the cohort row has no level (the optimum family)",
    section="6.1",
)
SUBJECT = Column(
    "subject",
    "str",
    "The problem's subject (MATH's category).",
    "Algebra",
    null_when="the cohort row has no subject (the optimum family)",
    section="6.1",
)
REASONING_TOKENS = Column(
    "reasoning_tokens",
    "int64",
    "Reasoning tokens of the cell's base trace (its thinking block; the whole solution for a "
    "model without one): the longest prefix an anchor can cut.",
    9876,
    unit=TOKENS,
    null_when="the cell's base trace is not stored",
    section="2.2",
)
