"""The Uniqueness-of-Optimum graded frame: what `bt report uoo` regrades a run's optimum samples
into (`report.uoo.graded_frame`) and computes every table it prints from. It is held in memory,
not written; declared here so its meaning is written down beside the files' (sections of the
benchmark's spec, shared/reference/uniqueness.md).
"""

from __future__ import annotations

from breakthrough.schemas.columns import Column, Table

SPEC = "uniqueness.md "
NOT_PARSED = "the answer did not parse (parsed is false)"

GRADED = Table(
    "uoo_graded",
    "(in memory: bt report uoo)",
    "bt report uoo",
    "one row per base sample of an optimum item, over every run given",
    (
        Column(
            "run",
            "str",
            "The run's folder name (a ' added where two runs share one).",
            "uoo29-qwen3-4b",
        ),
        Column(
            "variant",
            "str",
            "The prompt variant: plain or explicit (the sample's, else the run's, else plain).",
            "plain",
            section=SPEC + "7",
        ),
        Column(
            "model",
            "str",
            "The model's alias.",
            "qwen3-4b",
            null_when="the sample frame names no model",
        ),
        Column("item_id", "str", "The cohort item's id.", "uoo/qubo/b1/r0", section=SPEC + "3.2"),
        Column(
            "kind",
            "str",
            "The item's family: subset, qubo, assignment, knapsack, portfolio.",
            "qubo",
            section=SPEC + "4",
        ),
        Column(
            "bin",
            "str",
            "The item's count bin (of its true number of optima).",
            "b1",
            section=SPEC + "3.1",
        ),
        Column(
            "fixed29",
            "bool",
            "Whether the item is in the fixed 29-item set (its rep 0).",
            True,
            section=SPEC + "3.2",
        ),
        Column("seed", "int64", "The sample's seed.", 11, null_when="the sample frame has none"),
        Column(
            "score",
            "int64",
            "1 iff all three checks pass (optimal, unique claim right, count exact), else 0.",
            1,
            section=SPEC + "9",
        ),
        Column(
            "optimal", "bool", "The solution is feasible and optimal.", True, section=SPEC + "9"
        ),
        Column("unique_ok", "bool", "The `unique` claim is right.", True, section=SPEC + "9"),
        Column("count_ok", "bool", "`num_optima` equals the true count.", True, section=SPEC + "9"),
        Column(
            "label",
            "str",
            "The first failing stage: truncated, malformed, infeasible, suboptimal, "
            "count_under, count_over, unique_flag_wrong, or pass.",
            "pass",
            section=SPEC + "9",
        ),
        Column(
            "parse_error",
            "str",
            "Why the answer did not parse (no_json, a field's problem).",
            None,
            null_when="the answer parsed",
            section=SPEC + "8.3",
        ),
        Column("parsed", "bool", "Whether the answer parsed.", True, section=SPEC + "8"),
        Column(
            "claimed_count",
            "float64",
            "The answer's num_optima (inf for an absurdly large claim).",
            1.0,
            unit="optima",
            null_when=NOT_PARSED,
            section=SPEC + "8.5",
        ),
        Column(
            "true_count",
            "int64",
            "The item's true number of optima.",
            1,
            unit="optima",
            section=SPEC + "3.3",
        ),
        Column(
            "within_x2",
            "bool",
            "Whether the claimed count is within a factor 2 of the true one (false unparsed).",
            True,
            section=SPEC + "8.5",
        ),
        Column(
            "count_direction",
            "str",
            "under, exact or over: the claimed count against the true one.",
            "exact",
            null_when=NOT_PARSED,
            section=SPEC + "8.5",
        ),
        Column(
            "size",
            "int64",
            "The problem size n: items, or workers of an assignment.",
            16,
            unit="items",
            section=SPEC + "4",
        ),
        Column(
            "thinking",
            "str",
            "The run's `bt base --thinking`: on, off, or empty when the run did not ask (the "
            "chat template's default, which is on where a template has the switch); `bt report "
            "uoo` compares off runs with their on runs of the same model and variant.",
            "off",
        ),
    ),
    section=SPEC + "9",
)

TABLES = (GRADED,)
