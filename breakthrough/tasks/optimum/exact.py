"""Exact optimum and number of optima at any size, by solvers: the ground truth of instances
too large for `enumerator` (which stays the reference at small sizes; the tests check these
against it), so the benchmark can ask its question at the sizes where it matters.

Two independent counts: the primary one always, and CP-SAT's enumeration of the model
restricted to the optimum (`cpsat`) whenever the count is at most `enum_cap`; they must agree
or `CountDisagreement` is raised (a bug, never a result). The primary count is Ganak's
projected model count (`modelcount`) for the binary kinds; for assignment, the permanent of
the optimal-edge matrix (`permanent`; Ganak needs over a minute on a 9x9 matrix with 3,466
optima, the permanent a millisecond); for knapsack, the dynamic-programming table of subsets by
weight and value (`knapsack_dp`; Ganak ran past 20 s on every 60-item draw, the table takes a
second), with Ganak as a further count wherever it finishes within ENUM_TIME_LIMIT. The
permanent's and the table's optimum must also equal CP-SAT's. The uniqueness claim is checked
a third way, by a no-good cut and a re-solve. The solvers are the optional
`uoo` extra: `require_solvers` turns their absence into one line naming it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from breakthrough.errors import BtError
from breakthrough.tasks.optimum.linear import LinearModel, build_model
from breakthrough.tasks.optimum.solver_errors import CountDisagreement, SolverTimeout

EXTRA_HINT = "pip install 'breakthrough[uoo]'"
ENUM_CAP = 2_000  # CP-SAT enumerates up to this many optima (~1-50 s at 2,000 here)
TIME_LIMIT = 60.0  # seconds per CP-SAT call that the count needs; past it: not counted
ENUM_TIME_LIMIT = 20.0  # the second count's; past it the primary count stands alone


@dataclass(frozen=True)
class ExactResult:
    optimum: int | None  # None: no feasible point
    n_optima: int
    example: list[int] | None  # answer format, the enumerator's choice of optimum
    method: str  # how n_optima was established: "ganak", "permanent" or "dp" (knapsack), then
    # "+ganak" (knapsack) and "+cpsat-enum" for each further count that finished and agreed
    seconds: float  # wall time of the whole count on the machine that ran it


def require_solvers() -> None:
    """Import the solver packages once, or say in one line which extra installs them."""
    try:
        import ortools.sat.python.cp_model  # noqa: F401
        import pyganak  # noqa: F401
        import pysat.pb  # noqa: F401
    except (ImportError, AssertionError) as exc:  # pysat.pb asserts pindakaas is present
        raise BtError(
            f"counting optima past enumeration needs the solver extra ({EXTRA_HINT}): {exc}"
        ) from None


def _smallest(lm: LinearModel, points: list[tuple[int, ...]]) -> list[int]:
    """The enumerator's example among optimal decision vectors: smallest m for binary kinds
    (x_n most significant), lexicographically smallest task list for assignment."""
    if lm.kind == "assignment":
        return min(lm.decode(list(p)) for p in points)
    best = min(points, key=lambda p: sum(b << i for i, b in enumerate(p)))
    return lm.decode(list(best))


def solve_exact(
    kind: str, inst: dict[str, Any], enum_cap: int = ENUM_CAP, time_limit: float = TIME_LIMIT
) -> ExactResult:
    """(optimum, number of optima, example optimum, method, seconds) of one instance.

    Raises `SolverTimeout` when a solver call the count needs runs past `time_limit`
    (the enumeration only stops comparing at ENUM_TIME_LIMIT) and
    `CountDisagreement` when the methods disagree."""
    require_solvers()
    from breakthrough.tasks.optimum import cpsat, knapsack_dp, modelcount, permanent

    start = time.perf_counter()
    lm = build_model(kind, inst)
    opt = cpsat.solve_optimum(lm, time_limit)
    if opt is None:
        return ExactResult(None, 0, None, "cpsat-infeasible", time.perf_counter() - start)
    if kind == "assignment":
        perm_opt, count = permanent.count_assignment_optima(inst["C"])
        if perm_opt != opt:
            raise CountDisagreement(f"assignment: CP-SAT optimum {opt}, Hungarian {perm_opt}")
        method = "permanent"
    elif kind == "knapsack" and knapsack_dp.applies(inst):
        dp_opt, count = knapsack_dp.count_knapsack_optima(inst)
        if dp_opt != opt:
            raise CountDisagreement(f"knapsack: CP-SAT optimum {opt}, the table's {dp_opt}")
        method = "dp"
        try:  # Ganak as the second count wherever it finishes
            ganak = modelcount.count_optima(lm, opt, min(time_limit, ENUM_TIME_LIMIT))
        except SolverTimeout:
            ganak = None
        if ganak is not None:
            if ganak != count:
                raise CountDisagreement(f"knapsack: the table counts {count} optima, Ganak {ganak}")
            method += "+ganak"
    else:
        count = modelcount.count_optima(lm, opt, time_limit)
        method = "ganak"
    points = None
    if count <= enum_cap:
        try:
            points = cpsat.enumerate_optima(lm, opt, enum_cap, min(time_limit, ENUM_TIME_LIMIT))
        except SolverTimeout:  # the second method did not finish: nothing to compare
            points = None
    if points is not None:
        if len(points) != count:
            raise CountDisagreement(
                f"{kind}: {method} counts {count} optima, CP-SAT enumerates {len(points)}"
            )
        method += "+cpsat-enum"
    if cpsat.is_unique(lm, opt, time_limit) != (count == 1):
        raise CountDisagreement(
            f"{kind}: {method} counts {count} optima, the no-good cut disagrees"
        )
    example = _smallest(lm, points) if points else cpsat.example_optimum(lm, opt, time_limit)
    return ExactResult(opt, count, example, method, time.perf_counter() - start)
