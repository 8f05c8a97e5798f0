"""The UoO cohorts (spec 5.4): `uoo87` (reps 0-2 of each of the 29 kind x bin cells) and `uoo29`
(rep 0 of each cell: the leaderboard set). Written as canonical JSON lines; regenerating them
reproduces the committed files byte for byte.

Row fields (docs/interfaces.md, family "optimum"): id, family, stage, selection, standin, kind,
bin, instance, optimum, n_optima; plus bin_label, rep, fixed29, level, attempts, seed, sense,
n, variables ("binary" | "permutation"), example_optimum (answer format; never shown to a model),
generator_version, master_seed. `seed` is the attempt seed as 16 hex digits (a
64-bit value does not fit a signed int64 column)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def generate_all(master_seed: int = MASTER_SEED) -> list[dict[str, Any]]:
    """All 87 accepted instances as uoo87 cohort rows, in spec order (kind, bin, rep)."""
    from breakthrough.errors import BtError
    from breakthrough.tasks.optimum.enumerate import enumerate_instance

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
                    key = canonical_json([kind, inst])
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
    """File bytes in the repository's cohort format (breakthrough.tasks.cohorts.render_cohort)."""
    from breakthrough.tasks.cohorts import render_cohort

    return render_cohort(rows).encode("utf-8")


def build_uoo_cohorts(cohorts_dir: Path, master_seed: int = MASTER_SEED) -> list[Path]:
    """Write cohorts_dir/uoo87.jsonl and cohorts_dir/uoo29.jsonl; returns their paths."""
    cohorts_dir = Path(cohorts_dir)
    cohorts_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for name, rows in cohort_rows(master_seed).items():
        path = cohorts_dir / f"{name}.jsonl"
        path.write_bytes(render_jsonl(rows))
        out.append(path)
    return out


def build(out_dir: Path) -> list[Path]:
    """Alias of build_uoo_cohorts (what `bt cohorts build uoo` calls)."""
    return build_uoo_cohorts(out_dir)


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Read a UoO cohort file (no validation beyond JSON; see breakthrough.tasks.cohorts for that)."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def default_cohorts_dir() -> Path:
    """The repository's cohorts/ directory (next to the package)."""
    return Path(__file__).resolve().parents[3] / "cohorts"


if __name__ == "__main__":  # python -m breakthrough.tasks.optimum.cohort [DIR]
    import sys
    import time

    t0 = time.perf_counter()
    paths = build_uoo_cohorts(Path(sys.argv[1]) if len(sys.argv) > 1 else default_cohorts_dir())
    print(f"wrote {', '.join(map(str, paths))} in {time.perf_counter() - t0:.1f} s")
