"""What `bt report study` writes beside its page: the tables its headlines come from
(study/tables/*.{csv,parquet}) and headlines.json. Models are named here as the page names them
(`report.names.model_name`: "Gemma-4 E4B"), regimes in words (`regime_name`).
"""

from __future__ import annotations

from dataclasses import replace

from breakthrough.schemas import classify as C
from breakthrough.schemas import signals as S
from breakthrough.schemas.columns import Column, Document, Family, Field, Table
from breakthrough.schemas.common import ADVANTAGE, COUNT, LEVEL, PROBLEM_ID, RATE, STAGE, TOKENS

MODEL_NAME = Column(
    "model",
    "str",
    "The model's display name (Gemma-4 E4B; an alias the study does not name is kept).",
    "Gemma-4 E4B",
)


def _study(name: str, rows: str, columns: tuple, section: str, notes: str = "") -> Table:
    return Table(
        f"study/{name}", f"study/tables/{name}.{{csv,parquet}}", "bt report study", rows,
        columns, section=section, notes=notes,
    )  # fmt: skip


def _display(table: Table, name: str) -> Table:
    """A classify table as the study page shows it: the model's display name."""
    cols = tuple(MODEL_NAME if c.name == "model" else c for c in table.columns)
    return _study(name, table.rows, cols, table.section, table.notes)


REGIME_COUNTS = _study(
    "regime_counts",
    "one row per fine regime label (in words, in 5.3's order), then `total`",
    (
        Column("regime", "str", "The regime in words, or `total`.", "prefix-limited"),
        Family(
            "{model}",
            r".+",
            "int64",
            "Cells of that regime for the model (one column per model, by display name).",
            (("Gemma-4 E4B", 1), ("Ministral-3 3B", 0)),
            unit=COUNT,
        ),
    ),
    "9.1",
)

TV_EVENTS = _study(
    "tv_events",
    "one row per non-instant cell with a T_V event at the primary δ",
    (
        MODEL_NAME,
        PROBLEM_ID,
        STAGE,
        LEVEL,
        replace(C.LABELS.column("t_f"), null_when=""),  # an event has T_F
        replace(C.LABELS.column("t_v"), null_when=""),  # the row is a T_V event
        C.LABELS.column("max_advantage"),
        Column("regime", "str", "The regime in words.", "prefix-limited", section="5.3"),
    ),
    "9.1",
)

DELTA_SENSITIVITY = _study(
    "delta_sensitivity",
    "one row per model × δ",
    (
        MODEL_NAME,
        Column("delta", "float64", "The advantage threshold δ.", 0.5, section="5.2"),
        Column("t_v", "int64", "Non-instant cells with a T_V(δ) event.", 3, unit=COUNT),
        Column(
            "t_v_conservative",
            "int64",
            "The same against the conservative R̂.",
            3,
            unit=COUNT,
        ),
        Column("non_instant_cells", "int64", "Non-instant cells of the model.", 64, unit=COUNT),
    ),
    "9.1",
)

CONSERVATIVE_AGREEMENT = _study(
    "conservative_agreement",
    "one row per model",
    (
        MODEL_NAME,
        Column("cells", "int64", "Labelled cells.", 89, unit=COUNT),
        Column(
            "agree",
            "int64",
            "Cells where the conservative R̂ agrees on whether T_V exists (primary δ).",
            89,
            unit=COUNT,
        ),
        Column("disagree", "int64", "Cells where it does not.", 0, unit=COUNT),
    ),
    "9.1",
)

CROSS_MODEL_AGREEMENT = _study(
    "cross_model_agreement",
    "one row per problem every model of the runs has a cell of",
    (
        PROBLEM_ID,
        Family(
            "{model}",
            r".+",
            "str",
            "The model's collapsed agreement class of the cell (instant, budget-limited, "
            "prefix-limited, other, unsolved), one column per model by display name.",
            (("Gemma-4 E4B", "unsolved"), ("Ministral-3 3B", "budget-limited")),
        ),
        Column("agree", "bool", "Whether every model's class is the same.", False),
    ),
    "9.1",
)

DOSE_RESPONSE = _study(
    "dose_response",
    "one row per model × restart budget, over the model's non-instant cells measured at every "
    "budget",
    (
        MODEL_NAME,
        Column("budget", "int64", "The restart budget C.", 4096, unit=TOKENS, section="4"),
        Column("cells", "int64", "Non-instant cells measured at every budget.", 42, unit=COUNT),
        Column(
            "solved_from_scratch",
            "int64",
            "Of those, cells with R(C) ≥ τ.",
            19,
            unit=COUNT,
        ),
        Column(
            "share",
            "float64",
            "solved_from_scratch / cells, rounded to 4 decimals.",
            0.4524,
            unit=RATE,
        ),
    ),
    "9.2",
)

MATCHED_COMPUTE = _study(
    "matched_compute",
    "one row per model with a cell holding an A1 terminal event",
    (
        MODEL_NAME,
        Column("cells", "int64", "Cells with an A1 terminal event.", 13, unit=COUNT),
        Column(
            "in_grid",
            "int64",
            "Of those, cells whose t + B lies within the restart budgets.",
            9,
            unit=COUNT,
        ),
        Column(
            "in_grid_wins",
            "int64",
            "In-grid cells where the prefix beats the matched restart.",
            9,
            unit=COUNT,
        ),
        Column(
            "in_grid_median_advantage",
            "float64",
            "Median terminal_a1_advantage of the in-grid cells (3 decimals).",
            0.31,
            unit=ADVANTAGE,
            null_when="no in-grid cell",
        ),
        Column("proxies", "int64", "Boundary proxies: t + B beyond C_max.", 4, unit=COUNT),
        Column("proxy_wins", "int64", "Proxies where the prefix wins.", 2, unit=COUNT),
        Column("proxy_ties", "int64", "Proxies tied.", 2, unit=COUNT),
        Column(
            "reach_tau_at_c_max",
            "int64",
            "Cells with R(C_max) ≥ τ.",
            11,
            unit=COUNT,
        ),
        Column(
            "match_prefix_at_c_max",
            "int64",
            "Cells with R(C_max) ≥ the prefix's pooled rate.",
            9,
            unit=COUNT,
        ),
        Column("c_max", "int64", "The largest restart budget C_max.", 8192, unit=TOKENS),
    ),
    "9.3",
)

TOPUP_RESOLUTION = _display(C.TOPUP_RESOLUTION, "topup_resolution")
LABEL_HARDENING = _display(C.LABEL_HARDENING, "label_hardening")
A2 = _display(C.A2, "a2")

CONFIRMATORY = _study(
    "confirmatory",
    "one row per endpoint × variant of `bt confirm`'s result at its forecast point",
    (
        S.CONFIRM.column("endpoint"),
        S.CONFIRM.column("variant"),
        S.CONFIRM.column("status"),
        replace(S.CONFIRM.column("reason"), null_when="fit"),
        S.CONFIRM.column("test_rows"),
        S.CONFIRM.column("test_problems"),
        S.CONFIRM.column("baseline_auroc"),
        S.CONFIRM.column("early_auroc"),
        S.CONFIRM.column("delta_auroc"),
        S.CONFIRM.column("ci_low"),
        S.CONFIRM.column("ci_high"),
        replace(
            S.CONFIRM.column("success"),
            meaning="The registered verdict: ci_low > 0.",
            null_when="not fit (no test, no verdict)",
        ),
    ),
    "9.5",
)


def _no_verdict(c: Column | Family) -> Column | Family:
    if c.name.endswith("_success"):
        return replace(c, null_when="not fit at t (no test, no verdict)")
    return c


FORECAST_SWEEP = _study(
    "forecast_sweep",
    S.SWEEP.rows,
    tuple(_no_verdict(c) for c in S.SWEEP.columns),
    "9.5",
)

PROBE_DISSECTION = _study(
    "probe_dissection",
    "one row per `bt probe` output × arm × anchor",
    (
        Column(
            "source",
            "str",
            "The `bt probe` output folder, as PARENT/NAME.",
            "math500-qwen3-4b/probe",
        ),
        *(
            S.PROBE_TABLE.column(n)
            for n in (
                "arm",
                "t",
                "pooled",
                "pooled_lo",
                "pooled_hi",
                "within_failure_weighted",
                "within_pair_weighted",
                "rows",
            )
        ),
    ),
    "9.8",
)

TABLES = (
    REGIME_COUNTS,
    TV_EVENTS,
    DELTA_SENSITIVITY,
    CONSERVATIVE_AGREEMENT,
    CROSS_MODEL_AGREEMENT,
    DOSE_RESPONSE,
    MATCHED_COMPUTE,
    TOPUP_RESOLUTION,
    LABEL_HARDENING,
    A2,
    CONFIRMATORY,
    FORECAST_SWEEP,
    PROBE_DISSECTION,
)
BY_KEY = {t.name.removeprefix("study/"): t for t in TABLES}

HEADLINES = Document(
    "headlines",
    "study/headlines.json",
    "bt report study",
    "every headline the study page states, as its sentences and the numbers they hold, and "
    "what the runs hold no data for yet",
    (
        Field(
            "runs", "list", "The run folders the page was made from.", ["runs/math89-gemma4-e4b"]
        ),
        Field(
            "protocol",
            "object",
            "The first run's protocol (every constant, as the run's manifest records it).",
            {"tau": 0.75, "budget": 1024},
        ),
        Field(
            "headlines",
            "list",
            "One object per headline the runs hold data for, in the page's order.",
            fields=(
                Field(
                    "key",
                    "str",
                    "Which headline: regimes, tv_events, delta_sensitivity, cross_model, "
                    "dose_response, matched_compute, topup_resolution, label_hardening, a2, "
                    "confirmatory, probe_dissection.",
                    "regimes",
                ),
                Field("title", "str", "Its title, with the protocol section.", "Regime map (9.1)"),
                Field(
                    "sentences",
                    "list",
                    "The sentences the page states, numbers filled in from the runs.",
                    ["1 of 178 cells is prefix-limited."],
                ),
                Field(
                    "numbers",
                    "object",
                    "The numbers those sentences hold, by name (its keys depend on the "
                    "headline; a table's rows are under `rows`).",
                    {"cells": 178, "problems": 89, "prefix_limited": 1},
                ),
                Field(
                    "figures",
                    "list",
                    "The figures (study/figures/NAME.png) that show it.",
                    ["regime_map", "swimmer"],
                ),
            ),
        ),
        Field(
            "missing",
            "list",
            "One object per number or figure the runs hold no data for yet.",
            fields=(
                Field("what", "str", "The number or figure.", "probe dissection (9.8)"),
                Field("why", "str", "Why there is no data.", "no bt probe output (RUN/probe)"),
                Field("command", "str", "The command that would produce it.", "bt probe RUN"),
            ),
        ),
    ),
    section="9",
)
