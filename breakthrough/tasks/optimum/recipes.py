"""The UoO cohorts (spec 5.4): `uoo87` (reps 0-2 of each of the 29 kind x bin cells) and `uoo29`
(rep 0 of each cell: the leaderboard set), as cohort rows; `bt cohorts build uoo` writes them
and regenerating them reproduces the committed files byte for byte.

Row fields (docs/architecture.md, family "optimum"): id, family, stage, selection, standin, kind,
bin, instance, optimum, n_optima; plus bin_label, rep, fixed29, level, attempts, seed, sense,
n, variables ("binary" | "permutation"), example_optimum (answer format; never shown to a model),
generator_version, master_seed. `seed` is the attempt seed as 16 hex digits (a
64-bit value does not fit a signed int64 column)."""

from __future__ import annotations

from typing import Any

from breakthrough.errors import BtError
from breakthrough.tasks.canonical import canonical_json, render_cohort
from breakthrough.tasks.optimum.enumerator import enumerate_instance
from breakthrough.tasks.optimum.generator import (
    BIN_IDS,
    BIN_LABELS,
    GENERATOR_VERSION,
    KINDS,
    LADDERS,
    MASTER_SEED,
    SENSE,
    attempt_seed,
    bin_of,
    generate_instance,
)

MAX_ATTEMPTS = 10_000
REPS = 3
COHORT_NAMES = ("uoo87", "uoo29")
SELECTION = {
    "uoo87": "all 87 UoO instances: reps 0-2 of each kind x count-bin cell (spec full87)",
    "uoo29": "UoO leaderboard set: rep 0 of each kind x count-bin cell (spec fixed29)",
}


def generate_all(master_seed: int = MASTER_SEED) -> list[dict[str, Any]]:
    """All 87 accepted instances as uoo87 cohort rows, in spec order (kind, bin, rep)."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for kind in KINDS:
        for b, levels in enumerate(LADDERS[kind]):
            if levels is None:
                continue
            bid = BIN_IDS[b]
            for rep in range(REPS):
                for attempt in range(MAX_ATTEMPTS):
                    level = levels[(attempt + rep) % len(levels)]
                    seed = attempt_seed(kind, b, rep, attempt, master_seed)
                    inst = generate_instance(kind, seed, level)
                    opt, count, example = enumerate_instance(kind, inst)
                    if opt is None or bin_of(count) != bid:
                        continue
                    key = canonical_json([kind, inst])  # a repeated instance is drawn again
                    if key in seen:
                        continue
                    seen.add(key)
                    rows.append(
                        {
                            "id": f"uoo/{kind}/{bid}/r{rep}",
                            "family": "optimum",
                            "stage": "uoo87",
                            "selection": SELECTION["uoo87"],
                            "standin": False,
                            "kind": kind,
                            "bin": bid,
                            "bin_label": BIN_LABELS[bid],
                            "rep": rep,
                            "fixed29": rep == 0,
                            "level": level,
                            "attempts": attempt + 1,
                            "seed": f"{seed:016x}",
                            "sense": SENSE[kind],
                            "n": inst["n"],
                            "variables": "permutation" if kind == "assignment" else "binary",
                            "instance": inst,
                            "optimum": opt,
                            "n_optima": count,
                            "example_optimum": example,
                            "generator_version": GENERATOR_VERSION,
                            "master_seed": master_seed,
                        }
                    )
                    break
                else:
                    raise BtError(
                        f"uoo generator: no {kind} instance in bin {bid} (rep {rep}) "
                        f"after {MAX_ATTEMPTS} attempts"
                    )
    return rows


def cohort_rows(master_seed: int = MASTER_SEED) -> dict[str, list[dict[str, Any]]]:
    """{"uoo87": rows, "uoo29": rows}; the uoo29 rows are the rep-0 rows with stage uoo29."""
    full = generate_all(master_seed)
    fixed = [dict(r, stage="uoo29", selection=SELECTION["uoo29"]) for r in full if r["fixed29"]]
    return {"uoo87": full, "uoo29": fixed}


def render_jsonl(rows: list[dict[str, Any]]) -> bytes:
    """File bytes in the repository's cohort format (breakthrough.tasks.canonical.render_cohort)."""
    return render_cohort(rows).encode("utf-8")
