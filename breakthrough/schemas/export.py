"""What `bt export RUN` writes (RUN/export, or -o): the run's samples joined with their cells
and grades, and its cells, as flat tables for pandas users who never open the store. The same
columns as `RunStore.samples_frame()` / `cells_frame()` (docs/architecture.md, "Run store"),
with the per-token arrays as lists (parquet) or JSON arrays (CSV).
"""

from __future__ import annotations

from breakthrough.schemas.columns import Column, Table
from breakthrough.schemas.common import CELL_ID, LEVEL, MODEL, PROBLEM_ID, STAGE, SUBJECT

TOKENS = "tokens"
NO_ARRAYS = "--no-arrays"

SAMPLES = Table(
    "samples",
    "export/samples.{parquet,csv}",
    "bt export",
    "one row per stored sample (base trace, probe branch, restart, `bt sample` attempt), by "
    "sample_id, joined with its cell and its grade",
    (
        Column(
            "sample_id",
            "int64",
            "The sample's id in the store (increasing in the order samples were written).",
            1042,
        ),
        CELL_ID,
        PROBLEM_ID,
        MODEL,
        STAGE,
        LEVEL,
        SUBJECT,
        Column(
            "kind",
            "str",
            "base (the cell's long trace), probe (a continuation from an anchor), restart (from "
            "scratch at budget C) or attempt (`bt sample`: an independent whole solution).",
            "probe",
        ),
        Column(
            "anchor",
            "int64",
            "A probe's anchor t; -1 for every other kind.",
            896,
            unit=TOKENS,
            section="3.1",
        ),
        Column(
            "budget",
            "int64",
            "B for a probe, C for a restart, 0 for a base trace (an attempt: its max tokens).",
            1024,
            unit=TOKENS,
        ),
        Column(
            "branch",
            "int64",
            "The branch index within its (cell, kind, anchor, budget): 0-3 canonical, 4-7 top-ups.",
            2,
            section="3.4",
        ),
        Column(
            "seed",
            "int64",
            "The sample's own seed (derived from its cell, kind, anchor, budget and branch).",
            1739021,
            section="1.4",
        ),
        Column(
            "prefix_len",
            "int64",
            "Generated tokens taken from the base trace (the probe's prefix; 0 otherwise).",
            900,
            unit=TOKENS,
            section="3.2",
        ),
        Column(
            "n_tokens",
            "int64",
            "Generated tokens of the sample, prefix included for a probe.",
            1432,
            unit=TOKENS,
        ),
        Column(
            "finish_reason",
            "str",
            "How it ended: eos, length, stop_sequence, answer_reserve (the answer window used "
            "up) or error (a remote backend gave up).",
            "eos",
            section="3.3",
        ),
        Column("text", "str", "The decoded text of every token of the sample.", "…\\boxed{14}"),
        Column(
            "extra",
            "str",
            "A JSON object of what the pipeline recorded beside the sample (e.g. a forced close).",
            "{}",
        ),
        Column(
            "elapsed_s",
            "float64",
            "Wall time the engine spent on the sample.",
            3.2,
            unit="seconds",
            null_when="not recorded (a store made before it was)",
        ),
        Column(
            "peak_mem_mb",
            "float64",
            "Peak accelerator memory while it ran.",
            5321.0,
            unit="MB",
            null_when="not recorded (HTTP backends, older stores)",
        ),
        Column(
            "correct",
            "bool",
            "The grader's verdict on the sample's final answer.",
            True,
            null_when="not graded yet (`bt grade`)",
            section="7",
        ),
        Column(
            "grade_status",
            "str",
            "The grade's status (correct, wrong, no_answer, …).",
            "correct",
            null_when="not graded",
            section="7",
        ),
        Column(
            "grade_method",
            "str",
            "How the verdict was reached (e.g. math-verify, exact).",
            "math-verify",
            null_when="not graded",
            section="7",
        ),
        Column(
            "grade_extracted",
            "str",
            "The answer the grader extracted from the text.",
            "14",
            null_when="not graded, or no answer found",
            section="7",
        ),
        Column(
            "grade_detail",
            "str",
            "The grader's details as JSON (the optimum grader's checks, for one).",
            '{"checks": {}}',
            null_when="not graded, or the grader keeps none",
        ),
        Column(
            "grader_version",
            "str",
            "The grader's version: a verdict is tied to it.",
            "math-verify 0.9.0",
            null_when="not graded",
        ),
        Column(
            "token_ids",
            "list<int64>",
            "Every generated token id (the probe's prefix included).",
            [13, 220, 16],
            absent_when=NO_ARRAYS,
        ),
        Column(
            "segments",
            "list<int64>",
            "Per token its segment: 0 thinking, 1 special, 2 solution, 3 final_answer.",
            [0, 0, 1],
            absent_when=NO_ARRAYS,
            section="3.2",
        ),
        Column(
            "logprobs",
            "list<float64>",
            "Per newly generated token, its log-probability under the model's raw distribution "
            "(empty where not stored).",
            [-0.12, -1.3, -0.01],
            unit="nats",
            absent_when=NO_ARRAYS,
            section="2.2",
        ),
        Column(
            "entropies",
            "list<float64>",
            "Per newly generated token, the entropy of the model's full next-token distribution "
            "(empty where not stored; NaN entries from an HTTP backend, which sees a top-20).",
            [0.8, 2.1, 0.05],
            unit="nats",
            absent_when=NO_ARRAYS,
            section="2.2",
        ),
        Column(
            "sampling_entropies",
            "list<float64>",
            "Per newly generated token, the entropy of the distribution it was drawn from "
            "(after temperature, top-p, top-k; 0 when greedy; empty where not stored).",
            [0.5, 1.4, 0.0],
            unit="nats",
            absent_when=NO_ARRAYS,
            section="1.4",
        ),
    ),
    section="8",
)

CELLS = Table(
    "cells",
    "export/cells.{parquet,csv}",
    "bt export",
    "one row per cell of the run, by cell_id",
    (
        CELL_ID,
        PROBLEM_ID,
        MODEL,
        STAGE,
        LEVEL,
        SUBJECT,
        Column(
            "answer",
            "str",
            "The cohort row's reference answer, as text.",
            "14",
            null_when="the cohort row has none (an optimum row: its optimum is in the row)",
            section="7",
        ),
        Column(
            "reasoning_tokens",
            "int64",
            "Reasoning tokens of the base trace (its thinking block; the whole solution for a "
            "model without one).",
            9876,
            unit=TOKENS,
            null_when="no base trace stored yet (or it failed)",
            section="2.2",
        ),
    ),
    section="8",
)

TABLES = (SAMPLES, CELLS)
