"""Human names for the report: what a researcher reads instead of raw column and regime codes.

The tables (labels.csv, curves.csv, ...) keep their machine names; the HTML pages show these
names, with the raw name in the cell's tooltip so a reader can still find the column in the
CSV. `field_name` covers every label column `classify.regimes.label_panels` writes, including
the ones whose names depend on the protocol (R_C for each restart budget C, T_V for each δ).
"""

from __future__ import annotations

import re

# The fine labels of protocol 5.3 (`classify.regimes.REGIMES`), as a sentence would say them.
REGIME_NAMES = {
    "instant_scratch_solvable": "instant, solvable from scratch",
    "instant_prefix_advantaged": "instant, prefix-advantaged",
    "instant_ambiguous": "instant, ambiguous",
    "budget_limited": "budget-limited",
    "prefix_limited": "prefix-limited",
    "no_crossing_at_primary_delta": "no crossing at the primary δ",
    "terminal_A1": "terminal (A1 replication)",
    "unsolved_scratch_solvable": "unsolved, solvable from scratch",
    "unsolved_hard": "unsolved, hard",
}

# The study's display names of its models (protocol 10: "Gemma-4 E4B", "Ministral-3 3B"), by
# registry alias; figures and the study page show these, tables keep the alias.
MODEL_NAMES = {
    "gemma4-e4b": "Gemma-4 E4B",
    "ministral3-3b": "Ministral-3 3B",
    "qwen3-4b": "Qwen3 4B",
    "smollm2-135m": "SmolLM2 135M",
}

# How a sample ended (`finish_reason`: the engine's, and the branch phases').
FINISH_NAMES = {
    "eos": "ended (EOS)",
    "stop_sequence": "stop sequence",
    "length": "token limit",
    "answer_reserve": "answer window used up",
    "error": "error",
}

# Short names (table headers) and long ones (cell page, tooltips) of the fixed columns.
FIELDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run"),
    "cell_id": ("cell", "cell (model:problem)"),
    "model": ("model", "model"),
    "problem_id": ("problem", "problem id"),
    "problem_text": ("problem", "the problem (its start; the cell page holds all of it)"),
    "stage": ("stage", "cohort stage"),
    "level": ("level", "MATH difficulty level"),
    "subject": ("subject", "subject"),
    "answer": ("reference", "reference answer"),
    "reasoning_tokens": ("trace length", "reasoning tokens in the base trace"),
    "n_anchors": ("anchors", "probed anchors"),
    "final_anchor": ("last anchor", "last probed anchor"),
    "final_rate": ("p at last", "p(t; B) at the last probed anchor"),
    "final_n": ("n at last", "branches at the last probed anchor"),
    "event_observed": ("T_F seen", "budget-fit time observed (p ≥ τ at two anchors in a row)"),
    "t_f": ("T_F", "budget-fit time T_F (first anchor with p ≥ τ, stable at the next)"),
    "interval_lower": ("T_F from", "T_F interval: lower end (previous probed anchor)"),
    "interval_upper": ("T_F to", "T_F interval: upper end (the crossing anchor)"),
    "stability_anchor": ("stable at", "anchor after the crossing that confirms it"),
    "censoring_time": ("censored at", "censoring time (last anchor when no T_F event)"),
    "instant": ("instant", "instant (T_F interval ends within the first anchors)"),
    "regime": ("regime", "regime (protocol 5.3)"),
    "regime_class": ("class", "regime class (figures)"),
    "max_advantage": ("max adv", "largest advantage adv(t) = p(t; B) − R̂(t + B)"),
    "proxy_anchors": (
        "proxy anchors",
        "anchors whose t + B lies beyond the largest restart budget",
    ),
    "t_v": ("T_V", "prefix-value time T_V at the primary δ"),
    "t_v_cons": ("T_V cons", "prefix-value time T_V at the primary δ, conservative R̂"),
    "conservative_agrees": ("cons agrees", "conservative R̂ agrees on whether T_V exists"),
    "terminal_candidate": ("A1 candidate", "terminal A1 candidate (no T_F event, last anchor ≥ τ)"),
    "terminal_a1_anchor": ("A1 anchor", "terminal A1: replicated anchor"),
    "terminal_a1_rate": ("A1 rate", "terminal A1: pooled rate at the replicated anchor"),
    "terminal_a1_matched_restart": ("A1 R̂", "terminal A1: matched restart R̂(t + B)"),
    "terminal_a1_advantage": ("A1 adv", "terminal A1: pooled rate − matched restart"),
    "terminal_a1_proxy": ("A1 proxy", "terminal A1: t + B beyond the largest restart budget"),
    "regime_survival": ("survival", "share of posterior redraws keeping this regime"),
    # curves (one row per probed anchor)
    "anchor": ("anchor t", "anchor t (reasoning tokens of the base trace)"),
    "n": ("n", "branches"),
    "k": ("solved", "branches solved"),
    "p": ("p(t; B)", "continuation solve rate p(t; B)"),
    "x": ("t + B", "matched restart budget t + B"),
    "r_hat": ("R̂(t + B)", "restart solve rate R̂(t + B), interpolated in log2"),
    "r_hat_cons": ("R̂ cons", "conservative R̂(t + B): the larger bracketing restart rate"),
    "adv": ("adv(t)", "advantage adv(t) = p(t; B) − R̂(t + B)"),
    "adv_cons": ("adv cons", "advantage against the conservative R̂"),
    "position": ("t + B vs budgets", "where t + B lies among the restart budgets"),
    "proxy": ("proxy", "R̂ is a proxy: t + B beyond the largest restart budget"),
    # restart and probe panels
    "budget": ("budget C", "restart reasoning budget C"),
    "n_canon": ("n canon", "canonical branches (the first 4)"),
    "k_canon": ("solved canon", "canonical branches solved"),
    "rate": ("rate", "solve rate k / n"),
    "post_mean": ("posterior mean", "posterior mean of the solve rate"),
    "p_ge_tau": ("P(rate ≥ τ)", "posterior probability that the rate is at least τ"),
    # plan of next work
    "kind": ("kind", "sample kind"),
    "branches": ("branches", "branches to run"),
    "reason": ("reason", "why"),
    "rule": ("--topup rule", "the --topup rules of the plan"),
    "items": ("items", "planned items"),
    "probe": ("probe", "planned probe items"),
    "restart": ("restart", "planned restart items"),
    "samples": ("samples", "samples the plan would generate"),
    "by_reason": ("by reason", "planned items per reason"),
}


def _delta_text(key: str) -> str:
    """'d025' → '0.25'."""
    return f"{int(key[1:]) / 100:g}"


def _pattern_name(col: str) -> tuple[str, str] | None:
    """Names of the columns whose names hold a protocol value (R_C, T_V at each δ)."""
    if m := re.fullmatch(r"R_(\d+)", col):
        c = f"{int(m.group(1)):,}"
        return f"R({c})", f"restart solve rate R(C) at C = {c} reasoning tokens"
    if m := re.fullmatch(r"t_v_cons_(d\d{3})", col):
        d = _delta_text(m.group(1))
        return f"T_V cons δ={d}", f"prefix-value time T_V at δ = {d}, conservative R̂"
    if m := re.fullmatch(r"t_v_(d\d{3})", col):
        d = _delta_text(m.group(1))
        return f"T_V δ={d}", f"prefix-value time T_V at δ = {d}"
    return None


def field_name(col: str, long: bool = False) -> str:
    """The human name of a column (short for headers, long for the cell page); an unknown
    column keeps its own name."""
    names = FIELDS.get(col) or _pattern_name(col)
    if names is None:
        return col
    return names[1] if long else names[0]


def finish_name(reason: object) -> str:
    """How a sample ended, in words (an unknown reason is returned as is)."""
    return FINISH_NAMES.get(str(reason), str(reason))


def regime_name(regime: object) -> str:
    """The human name of a fine regime label (an unknown one is returned as is)."""
    return REGIME_NAMES.get(str(regime), str(regime))


def model_name(model: object) -> str:
    """The display name of a model alias (an unknown alias is returned as is)."""
    return MODEL_NAMES.get(str(model), str(model))


# The words every page defines where a reader sees them (not only in tooltips): term → what it
# means, in the protocol's terms (reference protocol 5.1-5.3 and section 11's summary).
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("τ", "the solve-rate threshold (0.75): a rate at or above τ counts as solved."),
    ("B", "the continuation budget: reasoning tokens a continuation may add after the cut."),
    (
        "p(t; B)",
        "the share of continuations, cut from the base trace at anchor t (its t-th "
        "reasoning token) and given B more tokens, that end with a correct answer.",
    ),
    (
        "T_F",
        "budget-fit time: the first probed anchor t with p(t; B) ≥ τ that also holds at "
        "the next probed anchor; from there, B more tokens usually suffice.",
    ),
    (
        "R(C), R̂",
        "R(C): the share of restarts from scratch (no prefix) with reasoning budget C "
        "that are correct; R̂(t + B): R at the same total tokens t + B, interpolated "
        "in log2 C between the measured budgets.",
    ),
    (
        "adv",
        "advantage adv(t) = p(t; B) − R̂(t + B): what the prefix is worth over a restart "
        "given the same number of tokens.",
    ),
    ("δ", "the advantage threshold (0.5 primary; 0.25 and 0.75 as sensitivity checks)."),
    (
        "T_V",
        "prefix-value time T_V(δ): the first probed anchor with p(t; B) ≥ τ and "
        "adv(t) ≥ δ that also holds at the next probed anchor.",
    ),
    (
        "regimes",
        "instant: T_F is reached within the first 16 tokens; budget-limited: a restart "
        "from scratch reaches τ; prefix-limited: T_V exists (the prefix is worth more "
        "than restarts); no crossing: T_F exists but adv never reaches δ; terminal: "
        "only the last anchor reaches τ, confirmed with 8 branches (A1); unsolved: "
        "none of these.",
    ),
)

# The columns each glossary term is (tables' names and columns as docs/outputs.md declares
# them), linked from the term to the column's declaration on the same page; τ, B and δ are the
# run's settings (summary.json's `protocol`) and link to the columns they decide.
GLOSSARY_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "τ": (("probe_cells", "p_ge_tau"),),
    "B": (("curves", "x"),),
    "p(t; B)": (("curves", "p"), ("labels", "final_rate")),
    "T_F": (("labels", "t_f"), ("labels", "interval_upper")),
    "R(C), R̂": (("labels", "R_{C}"), ("curves", "r_hat")),
    "adv": (("curves", "adv"), ("labels", "max_advantage")),
    "δ": (("labels", "t_v_d{δ}"),),
    "T_V": (("labels", "t_v"), ("labels", "t_v_d{δ}")),
    "regimes": (("labels", "regime"), ("labels", "regime_class")),
}


def column_anchor(table: str, column: str) -> str:
    """The id of a column's declaration on a page: "col-labels-t_f" ("col-labels-R_C" for the
    family R_{C}: what an id may hold of the name)."""
    return "col-" + re.sub(r"[^A-Za-z0-9_-]", "", f"{table}-{column}")


def glossary_columns() -> list[dict[str, str]]:
    """Each column a glossary term links to, once, as the page lists it: its anchor, name,
    type, unit, when it is empty and its meaning, from its declaration (breakthrough/schemas)."""
    from breakthrough.schemas.registry import lookup

    out: dict[str, dict[str, str]] = {}
    for refs in GLOSSARY_COLUMNS.values():
        for table, column in refs:
            decl = lookup(table)
            entry = next(c for c in getattr(decl, "columns", ()) if c.name == column)
            out.setdefault(
                column_anchor(table, column),
                {
                    "id": column_anchor(table, column),
                    "name": f"{table}.{column}",
                    "type": entry.type + (f", {entry.unit}" if entry.unit else ""),
                    "empty": entry.null_when or "never",
                    "meaning": entry.meaning,
                },
            )
    return list(out.values())
