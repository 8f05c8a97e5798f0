"""The cross-check at scale: the solvers' optimum, count and example optimum against the
exact enumerator on random instances of every kind at enumerable sizes (binary n 8-20,
assignment n 5-9), levels cycling over the kind's ladder so every count bin is drawn, counts in
the thousands included. Prints one line per kind (instances, mismatches, bins reached, largest
count, the counting methods used, seconds) for bench/RESULTS.md.

    .venv/bin/python bench/uoo_crosscheck.py --per-kind 2000   # the issue's number
    .venv/bin/python bench/uoo_crosscheck.py --per-kind 40     # a quick look
    .venv/bin/python bench/uoo_crosscheck.py --kinds qubo --first 1000 --per-kind 1000

(the last continues a cut run: instance i is the same draw in every run).

Needs the uoo extra (pip install 'breakthrough[uoo]')."""

from __future__ import annotations

import argparse
import collections
import sys
import time

from breakthrough.tasks.optimum.enumerator import enumerate_instance
from breakthrough.tasks.optimum.exact import solve_exact
from breakthrough.tasks.optimum.generator import KINDS, derive_seed, generate_instance, large_bin_of
from breakthrough.tasks.optimum.solver_errors import CountDisagreement, SolverTimeout

LEVELS = {"knapsack": 7}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=2000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument(
        "--first", type=int, default=0, help="index of the first instance (continue a run)"
    )
    ap.add_argument(
        "--progress", type=int, default=100, help="a running-total line every N instances"
    )
    args = ap.parse_args()
    if args.per_kind < 1:
        ap.error("--per-kind: expected a positive integer")
    if args.first < 0 or args.progress < 1:
        ap.error("--first: expected an integer >= 0; --progress: a positive integer")
    bad_total = 0
    for kind in args.kinds.split(","):
        if kind not in KINDS:
            ap.error(f"--kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        start = time.perf_counter()
        bins: collections.Counter[str] = collections.Counter()
        methods: collections.Counter[str] = collections.Counter()
        bad, largest, slowest = 0, 0, 0.0
        for done, i in enumerate(range(args.first, args.first + args.per_kind), start=1):
            level = i % LEVELS.get(kind, 6)
            lo, hi = (5, 9) if kind == "assignment" else (8, 20)
            size = lo + (i // LEVELS.get(kind, 6)) % (hi - lo + 1)
            seed = derive_seed("uoo-crosscheck", kind, i)
            inst = generate_instance(kind, seed, level, size)
            want = enumerate_instance(kind, inst)
            try:
                res = solve_exact(kind, inst)
            except (CountDisagreement, SolverTimeout) as exc:  # a failure to count is one too
                bad += 1
                print(f"FAILED {kind} seed {seed:016x} level {level} n {size}: {exc}", flush=True)
                continue
            if (res.optimum, res.n_optima, res.example) != want:
                bad += 1
                print(
                    f"MISMATCH {kind} seed {seed:016x} level {level} n {size}: "
                    f"solver {res.optimum, res.n_optima}, enumerator {want[:2]}",
                    flush=True,
                )
            bins[large_bin_of(want[1]) or "infeasible"] += 1
            methods[res.method] += 1
            largest = max(largest, want[1])
            slowest = max(slowest, res.seconds)
            if done % args.progress == 0 and done < args.per_kind:  # exact if the run is cut
                print(
                    f"  {kind}: instances {args.first}..{i} checked, {bad} mismatches, "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )
        took = time.perf_counter() - start
        print(
            f"{kind}: {args.per_kind} instances ({args.first}..{args.first + args.per_kind - 1}), "
            f"{bad} mismatches, "
            f"bins {dict(sorted(bins.items()))}, largest count {largest}, "
            f"methods {dict(methods)}, {took:.0f} s (slowest {slowest:.1f} s)",
            flush=True,
        )
        bad_total += bad
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
