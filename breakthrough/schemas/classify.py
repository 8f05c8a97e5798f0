"""What `bt classify` writes (RUN/classify, or runs/classify for several runs): the label table,
the per-anchor curves, the probe and restart panels with their posteriors, label hardening and
top-up resolution, the second probe arms, the cells without a label, and the plan of next work.

The example values of each table make one row of a study-sized run (τ = 0.75, B = 1,024,
restarts at 1,024 … 8,192): Gemma-4 E4B on the problem the study found prefix-limited.
"""

from __future__ import annotations

from breakthrough.schemas.columns import Column, Family, Table
from breakthrough.schemas.common import (
    ADVANTAGE,
    CELL_ID,
    COUNT,
    LEVEL,
    MODEL,
    PROBLEM_ID,
    RATE,
    REASONING_TOKENS,
    RUN,
    STAGE,
    SUBJECT,
    TOKENS,
)


def _tv(template: str, pattern: str, which: str, examples: tuple[tuple[str, int], ...]) -> Family:
    return Family(
        template,
        pattern,
        "int64",
        f"Prefix-value time T_V(δ) at δ = {{δ}}/100{which}: the first probed anchor t with "
        "p(t; B) ≥ τ and adv(t) ≥ δ that also holds at the next probed anchor. One column per "
        "δ of the protocol (0.25, 0.5, 0.75) and the primary δ.",
        examples,
        unit=TOKENS,
        null_when="no anchor qualifies at that δ",
        section="5.2",
    )


LABELS = Table(
    "labels",
    "classify/labels.{parquet,csv}",
    "bt classify",
    "one row per cell that ran its protocol (the cells that have not are in `unfinished`), "
    "sorted by run and cell_id",
    (
        CELL_ID,
        MODEL,
        PROBLEM_ID,
        STAGE,
        LEVEL,
        SUBJECT,
        REASONING_TOKENS,
        Column(
            "n_anchors",
            "int64",
            "Probed anchors of the cell (the grid and the bisection midpoints).",
            10,
            unit=COUNT,
            section="3.1",
        ),
        Column(
            "final_anchor",
            "int64",
            "The last (largest) probed anchor.",
            8192,
            unit=TOKENS,
            null_when="the cell has no probe (n_anchors = 0)",
            section="3.1",
        ),
        Column(
            "final_rate",
            "float64",
            "p(t; B) at the last probed anchor, over the branches p counts there.",
            1.0,
            unit=RATE,
            null_when="the cell has no probe",
            section="3.4",
        ),
        Column(
            "event_observed",
            "bool",
            "Whether the budget-fit time T_F was observed: two consecutive probed anchors with "
            "p(t; B) ≥ τ. False: the trajectory is right-censored.",
            True,
            section="5.1",
        ),
        Column(
            "t_f",
            "int64",
            "Budget-fit time T_F(B): the first probed anchor with p(t; B) ≥ τ whose next probed "
            "anchor is also ≥ τ (the study's `t_f_1024` at B = 1,024).",
            896,
            unit=TOKENS,
            null_when="censored (event_observed is false)",
            section="5.1",
        ),
        Column(
            "interval_lower",
            "int64",
            "Lower end of T_F's censoring interval: the probed anchor before the crossing (0 when "
            "the crossing is the first anchor); the final anchor when censored.",
            768,
            unit=TOKENS,
            null_when="the cell has no probe",
            section="5.1",
        ),
        Column(
            "interval_upper",
            "int64",
            "Upper end of T_F's censoring interval: the crossing anchor (= t_f); the instant "
            "rule reads it (≤ 16 tokens).",
            896,
            unit=TOKENS,
            null_when="censored",
            section="5.1",
        ),
        Column(
            "stability_anchor",
            "int64",
            "The probed anchor after the crossing, whose p(t; B) ≥ τ confirms it.",
            1024,
            unit=TOKENS,
            null_when="censored",
            section="5.1",
        ),
        Column(
            "censoring_time",
            "int64",
            "The stability anchor for an event; the final probed anchor when censored.",
            1024,
            unit=TOKENS,
            null_when="the cell has no probe",
            section="5.1",
        ),
        Column(
            "instant",
            "bool",
            "Whether the regime is one of the instant ones: a T_F event whose interval ends "
            "within the first 16 tokens.",
            False,
            section="5.3",
        ),
        Column(
            "regime",
            "str",
            "The fine regime label, by protocol 5.3's precedence: instant_scratch_solvable, "
            "instant_prefix_advantaged, instant_ambiguous, budget_limited, prefix_limited, "
            "no_crossing_at_primary_delta, terminal_A1, unsolved_scratch_solvable, "
            "unsolved_hard.",
            "prefix_limited",
            section="5.3",
        ),
        Column(
            "regime_class",
            "str",
            "The regime's collapsed class as the figures show it: instant, budget-limited, "
            "prefix-limited, no-crossing, terminal, unsolved.",
            "prefix-limited",
            section="5.3",
        ),
        Family(
            "R_{C}",
            r"R_\d+",
            "float64",
            "Restart solve rate R(C): the share of graded restarts from scratch with reasoning "
            "budget C that are correct (every graded attempt of the restart cell). One column per "
            "restart budget C of the protocol.",
            (("R_1024", 0.0), ("R_2048", 0.0), ("R_4096", 0.25), ("R_8192", 0.25)),
            unit=RATE,
            null_when="the cell has no graded restart at C (an instant cell runs the scratch "
            "budget only)",
            section="4",
        ),
        Column(
            "max_advantage",
            "float64",
            "The largest advantage adv(t) = p(t; B) − R̂(t + B) over the probed anchors, rounded "
            "to 3 decimals.",
            0.75,
            unit=ADVANTAGE,
            null_when="no restart was measured (no R̂)",
            section="5.2",
        ),
        Column(
            "proxy_anchors",
            "int64",
            "Probed anchors whose matched budget t + B lies beyond the largest restart budget, "
            "so R̂(t + B) is R at the largest budget (a proxy).",
            1,
            unit=COUNT,
            section="4.1",
        ),
        _tv(
            "t_v_d{δ}",
            r"t_v_d\d{3}",
            "",
            (("t_v_d025", 896), ("t_v_d050", 896), ("t_v_d075", 896)),
        ),
        _tv(
            "t_v_cons_d{δ}",
            r"t_v_cons_d\d{3}",
            ", against the conservative R̂ (the larger of the two bracketing restart rates)",
            (("t_v_cons_d025", 896), ("t_v_cons_d050", 896), ("t_v_cons_d075", 896)),
        ),
        Column(
            "t_v",
            "int64",
            "Prefix-value time T_V at the primary δ (0.5): the column the regime reads.",
            896,
            unit=TOKENS,
            null_when="no anchor qualifies",
            section="5.2",
        ),
        Column(
            "t_v_cons",
            "int64",
            "T_V at the primary δ against the conservative R̂.",
            896,
            unit=TOKENS,
            null_when="no anchor qualifies",
            section="5.2",
        ),
        Column(
            "conservative_agrees",
            "bool",
            "Whether the conservative R̂ agrees on whether T_V exists at the primary δ.",
            True,
            section="5.2",
        ),
        Column(
            "terminal_a1_anchor",
            "int64",
            "Terminal A1 event: the final anchor, replicated to 8 branches, whose pooled rate "
            "reached τ (no T_F event).",
            None,
            unit=TOKENS,
            null_when="the cell has no A1 terminal event",
            section="3.5",
        ),
        Column(
            "terminal_a1_rate",
            "float64",
            "Terminal A1 event: the pooled rate at the replicated final anchor.",
            None,
            unit=RATE,
            null_when="the cell has no A1 terminal event",
            section="3.5",
        ),
        Column(
            "terminal_a1_matched_restart",
            "float64",
            "Terminal A1 event: the matched restart rate R̂(t + B) at the final anchor t.",
            None,
            unit=RATE,
            null_when="no A1 terminal event, or no restart measured",
            section="9.3",
        ),
        Column(
            "terminal_a1_advantage",
            "float64",
            "Terminal A1 event: pooled rate − R̂(t + B), rounded to 3 decimals (9.3's matched "
            "compute reads it).",
            None,
            unit=ADVANTAGE,
            null_when="no A1 terminal event, or no restart measured",
            section="9.3",
        ),
        Column(
            "terminal_a1_proxy",
            "bool",
            "Terminal A1 event: whether t + B lies beyond the largest restart budget (a boundary "
            "proxy comparison).",
            None,
            null_when="the cell has no A1 terminal event",
            section="4.1",
        ),
        Column(
            "terminal_candidate",
            "bool",
            "Whether the cell is an A1 candidate: no T_F event on the canonical (first 4) "
            "branches and a canonical final-anchor rate ≥ τ; a top-up never changes it.",
            False,
            section="3.5",
        ),
        Column(
            "final_n",
            "int64",
            "Graded branches at the final probed anchor (8 once topped up).",
            4,
            unit=COUNT,
            section="3.4",
        ),
        Column(
            "regime_survival",
            "float64",
            "The share of posterior redraws of the cell's rates (Beta posteriors, `--draws`, "
            "seeded) under which the regime stays the same: how robust the label is.",
            0.93,
            unit=RATE,
            null_when="--draws 0",
        ),
        RUN,
    ),
    section="5",
)

CURVES = Table(
    "curves",
    "classify/curves.{parquet,csv}",
    "bt classify",
    "one row per (run, cell, probed anchor) of the labelled cells, sorted by cell and anchor",
    (
        CELL_ID,
        Column(
            "anchor",
            "int64",
            "The anchor t: the prefix length in reasoning tokens of the base trace.",
            896,
            unit=TOKENS,
            section="3.1",
        ),
        Column(
            "n",
            "int64",
            "Graded branches at the anchor that p counts (pooled where the --topup rules pool).",
            4,
            unit=COUNT,
            section="3.4",
        ),
        Column("k", "int64", "Of those, the correct ones.", 4, unit=COUNT, section="3.4"),
        Column(
            "p",
            "float64",
            "The continuation solve rate p(t; B) = k / n.",
            1.0,
            unit=RATE,
            section="3",
        ),
        Column(
            "x",
            "int64",
            "The matched total budget t + B at which the restart rate is read.",
            1920,
            unit=TOKENS,
            section="4.1",
        ),
        Column(
            "r_hat",
            "float64",
            "R̂(t + B): the restart rate at x, linear in log2 between the measured budgets, "
            "clamped at both ends.",
            0.0,
            unit=RATE,
            null_when="the cell has no graded restart",
            section="4.1",
        ),
        Column(
            "r_hat_cons",
            "float64",
            "The conservative R̂(t + B): the larger of the two bracketing restart rates.",
            0.0,
            unit=RATE,
            null_when="the cell has no graded restart",
            section="4.1",
        ),
        Column(
            "adv",
            "float64",
            "The advantage adv(t) = p(t; B) − R̂(t + B).",
            1.0,
            unit=ADVANTAGE,
            null_when="the cell has no graded restart",
            section="5.2",
        ),
        Column(
            "adv_cons",
            "float64",
            "The advantage against the conservative R̂.",
            1.0,
            unit=ADVANTAGE,
            null_when="the cell has no graded restart",
            section="5.2",
        ),
        Column(
            "position",
            "str",
            "Where x lies among the measured restart budgets: below (clamped to the smallest), "
            "inside, above (clamped to the largest: a proxy), none (no restart).",
            "inside",
            section="4.1",
        ),
        Column(
            "proxy",
            "bool",
            "Whether R̂ is a proxy: x beyond the largest measured restart budget.",
            False,
            section="4.1",
        ),
        RUN,
    ),
    section="5.2",
)

_PANEL_COUNTS = (
    Column(
        "n",
        "int64",
        "Graded branches of the cell (every one, canonical and top-up).",
        8,
        unit=COUNT,
    ),
    Column("k", "int64", "Of those, the correct ones.", 6, unit=COUNT),
    Column(
        "n_canon",
        "int64",
        "Graded canonical branches (indices below the protocol's samples, 4).",
        4,
        unit=COUNT,
        section="3.4",
    ),
    Column("k_canon", "int64", "Of those, the correct ones.", 3, unit=COUNT, section="3.4"),
    Column("rate", "float64", "The pooled solve rate k / n.", 0.75, unit=RATE),
    Column(
        "post_mean",
        "float64",
        "Posterior mean of the solve rate under the run's prior (Jeffreys Beta(0.5, 0.5) by "
        "default): (a + k) / (a + b + n).",
        0.722,
        unit=RATE,
    ),
    Column(
        "p_ge_tau",
        "float64",
        "Posterior probability that the solve rate is at least τ.",
        0.46,
        unit=RATE,
    ),
)

PROBE_CELLS = Table(
    "probe_cells",
    "classify/probe_cells.{parquet,csv}",
    "bt classify",
    "one row per (run, cell, probed anchor) at the run's B, every cell (labelled or not), "
    "with its graded counts and their posterior",
    (
        CELL_ID,
        MODEL,
        Column("anchor", "int64", "The probed anchor t.", 896, unit=TOKENS, section="3.1"),
        *_PANEL_COUNTS,
        RUN,
    ),
    section="3.4",
)

RESTART_CELLS = Table(
    "restart_cells",
    "classify/restart_cells.{parquet,csv}",
    "bt classify",
    "one row per (run, cell, restart budget C), every cell, with its graded counts and their "
    "posterior",
    (
        CELL_ID,
        MODEL,
        Column(
            "budget",
            "int64",
            "The restart's reasoning budget C.",
            4096,
            unit=TOKENS,
            section="4",
        ),
        *_PANEL_COUNTS,
        RUN,
    ),
    section="4",
)

_CATEGORY = "Trajectories in the category {} (label hardening's four categories)."
LABEL_HARDENING = Table(
    "label_hardening",
    "classify/label_hardening.{parquet,csv}",
    "bt classify",
    "two rows per model (before and after the top-ups), summed over the runs",
    (
        MODEL,
        Column(
            "when",
            "str",
            "before top-ups (canonical 4-branch rates, A1 annotated: `--topup terminal`) or "
            "after top-ups (the labels under the chosen --topup rules).",
            "after top-ups",
            section="3.5",
        ),
        Column(
            "instant",
            "int64",
            _CATEGORY.format("instant: a T_F event within the instant bound"),
            7,
            unit=COUNT,
        ),
        Column(
            "interior",
            "int64",
            _CATEGORY.format("interior: any other T_F event"),
            4,
            unit=COUNT,
        ),
        Column(
            "A1 event",
            "int64",
            _CATEGORY.format("A1 event: no T_F event, the replicated final anchor reached τ"),
            12,
            unit=COUNT,
        ),
        Column(
            "censored",
            "int64",
            _CATEGORY.format("censored: everything else"),
            26,
            unit=COUNT,
        ),
        Column("total", "int64", "Trajectories counted.", 49, unit=COUNT),
        Column(
            "changed",
            "float64",
            "Trajectories whose category the top-ups changed.",
            7.0,
            unit=COUNT,
            null_when="on the `before top-ups` row",
        ),
        Column(
            "events_removed",
            "float64",
            "T_F events (instant or interior) the top-ups removed.",
            6.0,
            unit=COUNT,
            null_when="on the `before top-ups` row",
        ),
        Column(
            "events_added",
            "float64",
            "T_F events the top-ups added.",
            1.0,
            unit=COUNT,
            null_when="on the `before top-ups` row",
        ),
    ),
    section="3.5",
    notes="Counts are float64 where the `before` row has none (NaN); read them as integers.",
)

TOPUP_RESOLUTION = Table(
    "topup_resolution",
    "classify/topup_resolution.{parquet,csv}",
    "bt classify",
    "one row per model with probe cells holding the top-up target (8) of graded branches",
    (
        MODEL,
        Column(
            "cells",
            "int64",
            "Probe cells holding the top-up target of graded branches.",
            148,
            unit=COUNT,
        ),
        Column(
            "low",
            "int64",
            "Of those, resolved low: at most a quarter correct (≤ 2/8).",
            55,
            unit=COUNT,
        ),
        Column("intermediate", "int64", "Resolved in between (3-5/8).", 55, unit=COUNT),
        Column("high", "int64", "Resolved high: a rate ≥ τ (≥ 6/8).", 38, unit=COUNT),
        Family(
            "added_{j}",
            r"added_\d+",
            "int64",
            "Cells whose added (top-up) branches alone gave j correct, for j = 0 … target − "
            "canonical (0-4).",
            (("added_0", 37), ("added_1", 37), ("added_2", 28), ("added_3", 21), ("added_4", 25)),
            unit=COUNT,
        ),
    ),
    section="9.4",
)

_ARM_BUDGET = Column(
    "budget",
    "int64",
    "The arm's continuation budget B (the run's B, or a second arm's B2).",
    4096,
    unit=TOKENS,
    section="3.6",
)
ARMS = Table(
    "arms",
    "classify/arms.{parquet,csv}",
    "bt classify",
    "one row per (run, cell, probe arm budget B) when a run holds a second probe arm "
    "(`bt continue --add-budget B2`); not written otherwise",
    (
        CELL_ID,
        MODEL,
        PROBLEM_ID,
        _ARM_BUDGET,
        Column(
            "n_anchors",
            "int64",
            "Anchors probed in this arm.",
            6,
            unit=COUNT,
            section="3.6",
        ),
        Column(
            "first_crossing",
            "int64",
            "The first probed anchor with canonical p(t; B) ≥ τ (no stability required).",
            16,
            unit=TOKENS,
            null_when="no anchor reaches τ at this B",
            section="3.6",
        ),
        Column(
            "event_observed",
            "bool",
            "Whether T_F was observed at this B (canonical rates).",
            True,
            section="5.1",
        ),
        Column(
            "t_f",
            "int64",
            "T_F at this B.",
            16,
            unit=TOKENS,
            null_when="censored at this B",
            section="5.1",
        ),
        Column(
            "interval_lower",
            "int64",
            "Lower end of T_F's interval at this B.",
            0,
            unit=TOKENS,
            null_when="the arm has no probe",
            section="5.1",
        ),
        Column(
            "interval_upper",
            "int64",
            "Upper end of T_F's interval at this B.",
            16,
            unit=TOKENS,
            null_when="censored at this B",
            section="5.1",
        ),
        Column(
            "censoring_time",
            "int64",
            "Stability anchor of the event, or the final anchor when censored, at this B.",
            32,
            unit=TOKENS,
            null_when="the arm has no probe",
            section="5.1",
        ),
        RUN,
    ),
    section="3.6",
)

A2 = Table(
    "a2",
    "classify/a2.{parquet,csv}",
    "bt classify",
    "one row per (run, trajectory) re-probed in a second arm: its first τ-crossings at B and "
    "B2; written only when a run holds a second arm",
    (
        CELL_ID,
        MODEL,
        PROBLEM_ID,
        LEVEL,
        Column("budget_1", "int64", "The run's B.", 1024, unit=TOKENS, section="3.6"),
        Column("budget_2", "int64", "The second arm's B2.", 4096, unit=TOKENS, section="3.6"),
        Column("anchors_2", "int64", "Anchors probed at B2.", 6, unit=COUNT, section="3.6"),
        Column(
            "last_anchor_2",
            "int64",
            "The largest anchor probed at B2.",
            768,
            unit=TOKENS,
            section="3.6",
        ),
        Column(
            "first_crossing_1",
            "int64",
            "First τ-crossing anchor at B (canonical rates, no stability).",
            768,
            unit=TOKENS,
            null_when="no crossing at B",
            section="3.6",
        ),
        Column(
            "first_crossing_2",
            "int64",
            "First τ-crossing anchor at B2.",
            16,
            unit=TOKENS,
            null_when="no crossing at B2",
            section="3.6",
        ),
        Column(
            "shift_tokens",
            "int64",
            "first_crossing_2 − first_crossing_1 (negative: B2 crosses earlier).",
            -752,
            unit=TOKENS,
            null_when="either arm has no crossing",
            section="3.6",
        ),
        Column(
            "shift_steps",
            "float64",
            "The shift in anchor steps of the B2 grid (the frozen rule's 'one anchor step').",
            -5.0,
            unit="anchor steps",
            null_when="either arm has no crossing",
            section="3.6",
        ),
        Column(
            "earlier_by_2b",
            "bool",
            "Whether the crossing moved earlier by at least 2B tokens (the 'mechanical "
            "confound' count of the frozen rule).",
            False,
            section="3.6",
        ),
        RUN,
    ),
    section="3.6",
)

UNFINISHED = Table(
    "unfinished",
    "classify/unfinished.{parquet,csv}",
    "bt classify",
    "one row per cell that has not run its protocol (no regime: not labelled); written only "
    "when there is one",
    (
        CELL_ID,
        MODEL,
        PROBLEM_ID,
        Column(
            "status",
            "str",
            "`not continued` (no probe, no restart stored) or `incomplete` (a lost base trace "
            "or probe, owed restarts, a top-up started and not finished).",
            "incomplete",
        ),
        Column(
            "missing",
            "str",
            "What the cell lacks, in words (`bt status` says the same).",
            "restarts at 8192: 2 of 4",
        ),
        RUN,
    ),
)

PLAN = Table(
    "plan",
    "classify/plan.csv",
    "bt classify",
    "one row per work item the chosen --topup rules plan next (what `bt continue` would run); "
    "plan.json holds the same items and those of the compared rules",
    (
        Column(
            "run",
            "str",
            RUN.meaning,
            RUN.example,
        ),
        CELL_ID,
        Column(
            "kind",
            "str",
            "`probe` (continue the base trace from `anchor` with budget B) or `restart` (a fresh "
            "attempt with reasoning budget C).",
            "probe",
        ),
        Column(
            "anchor",
            "int64",
            "The probe's anchor t; -1 for a restart.",
            896,
            unit=TOKENS,
            section="3.1",
        ),
        Column(
            "budget",
            "int64",
            "B for a probe, C for a restart.",
            1024,
            unit=TOKENS,
        ),
        Column(
            "branches",
            "str",
            "The branch indices to run, first-last (e.g. 4-7: a top-up to 8).",
            "4-7",
            section="3.5",
        ),
        Column(
            "reason",
            "str",
            "The rule that asks for it: bisection, terminal_a1, ambiguity (A5.1), posterior, "
            "joined by + when two ask for the same cell.",
            "ambiguity",
            section="3.5",
        ),
    ),
    section="3.5",
)

TABLES = (
    LABELS,
    CURVES,
    PROBE_CELLS,
    RESTART_CELLS,
    LABEL_HARDENING,
    TOPUP_RESOLUTION,
    ARMS,
    A2,
    UNFINISHED,
    PLAN,
)
