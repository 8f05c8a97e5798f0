"""CP-SAT (ortools) on a UoO linear model: the proven optimum, the optima counted by enumerating
every solution of the model restricted to the optimum (`LinearModel.reaching`), uniqueness by
one no-good cut and a re-solve, and the answer-format example optimum (the same point the
enumerator reports).

One search worker and a fixed seed: a count must not depend on thread timing, and the machine
that counts is shared. Every call takes a time limit; running out of it is `SolverTimeout`,
never a guess. Needs the `uoo` extra (ortools); `exact` imports this module lazily."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from breakthrough.tasks.optimum.linear import LinearModel
from breakthrough.tasks.optimum.solver_errors import SolverTimeout


@dataclass
class _Built:
    model: cp_model.CpModel
    x: list[cp_model.IntVar]
    objective: cp_model.LinearExpr


def _build(lm: LinearModel, optimum: int | None = None) -> _Built:
    """The model in CP-SAT; with `optimum`, restricted to the points that reach it."""
    m = cp_model.CpModel()
    x = [m.new_bool_var(f"v{i}") for i in range(lm.n_vars)]
    extra = () if optimum is None else (lm.reaching(optimum),)
    for c in lm.constraints + lm.product_constraints() + extra:
        expr = sum(coef * x[v] for v, coef in c.terms)
        if not c.terms:
            expr = cp_model.LinearExpr.constant(0)
        if c.lo is not None and c.hi is not None and c.lo == c.hi:
            m.add(expr == c.lo)
        else:
            if c.lo is not None:
                m.add(expr >= c.lo)
            if c.hi is not None:
                m.add(expr <= c.hi)
    obj = cp_model.LinearExpr.weighted_sum(
        [x[v] for v, _ in lm.objective], [c for _, c in lm.objective]
    )
    return _Built(m, x, obj)


def _solver(time_limit: float, enumerate_all: bool = False) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.random_seed = 0
    # Ctrl-C belongs to bt (130 and one line); CP-SAT would otherwise take SIGINT for itself.
    s.parameters.catch_sigint_signal = False
    s.parameters.max_time_in_seconds = time_limit
    if enumerate_all:
        s.parameters.enumerate_all_solutions = True
    return s


def solve_optimum(lm: LinearModel, time_limit: float) -> int | None:
    """The proven optimal objective value, or None when no point is feasible."""
    return _best(_build(lm), lm, time_limit)[0]


class _Collector(cp_model.CpSolverSolutionCallback):
    def __init__(self, x: list[cp_model.IntVar], n_decision: int, cap: int) -> None:
        super().__init__()
        self.x, self.nd, self.cap = x, n_decision, cap
        self.seen: set[tuple[int, ...]] = set()

    def on_solution_callback(self) -> None:
        self.seen.add(tuple(int(self.value(v)) for v in self.x[: self.nd]))
        if len(self.seen) > self.cap:
            self.stop_search()


def enumerate_optima(
    lm: LinearModel, optimum: int, cap: int, time_limit: float
) -> list[tuple[int, ...]] | None:
    """Every optimal decision vector when there are at most `cap` of them; None when there are
    more (the search stops at cap + 1). Distinct decision vectors are counted (products are
    functions of them, so a solution is never counted twice through them)."""
    b = _build(lm, optimum)
    col = _Collector(b.x, lm.n_decision, cap)
    s = _solver(time_limit, enumerate_all=True)
    status = s.solve(b.model, col)
    if len(col.seen) > cap:
        return None
    if status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):  # FEASIBLE: stopped by the clock
        raise SolverTimeout(f"CP-SAT enumeration did not finish within {time_limit:g} s")
    return sorted(col.seen)


def _best(b: _Built, lm: LinearModel, time_limit: float) -> tuple[int | None, list[int]]:
    """(optimal objective of the model as it stands, an optimal decision vector); None when
    it is infeasible. Optimising (with CP-SAT's LP bound) rather than asking for a point at
    a fixed objective value: a weighted-sum equality is a hard feasibility problem for CP-SAT
    (a 12x12 assignment took over 20 s), an optimisation a few milliseconds."""
    if lm.sense == "max":
        b.model.maximize(b.objective)
    else:
        b.model.minimize(b.objective)
    s = _solver(time_limit)
    status = s.solve(b.model)
    if status == cp_model.INFEASIBLE:
        return None, []
    if status != cp_model.OPTIMAL:
        raise SolverTimeout(f"CP-SAT did not prove an optimum within {time_limit:g} s")
    return int(round(s.objective_value)), [int(s.value(v)) for v in b.x[: lm.n_decision]]


def is_unique(lm: LinearModel, optimum: int, time_limit: float) -> bool:
    """Whether exactly one point reaches `optimum`: find one, cut it off with a no-good (the
    decision variables must differ somewhere) and re-optimise; unique iff the best point
    left is worse (or none is left)."""
    b = _build(lm)
    value, first = _best(b, lm, time_limit)
    if value != optimum:
        raise ValueError(f"CP-SAT optimum {value}, expected {optimum}")
    b.model.add_bool_or([b.x[i].Not() if first[i] else b.x[i] for i in range(lm.n_decision)])
    return _best(b, lm, time_limit)[0] != optimum


def example_optimum(lm: LinearModel, optimum: int, time_limit: float) -> list[int]:
    """The enumerator's example optimum in answer format: the optimal 0/1 vector with the
    smallest m = sum x_i 2^i (fix x_n, then x_{n-1}, ... to 0 while the optimum stays
    reachable), or the lexicographically smallest optimal permutation (worker by worker, the
    smallest task that still reaches the optimum). One small optimisation per try."""
    b = _build(lm)
    n = lm.n
    if lm.kind == "assignment":
        tasks: list[int] = []
        for i in range(n):
            for j in range(n):
                b.model.clear_assumptions()
                b.model.add_assumptions([b.x[i * n + j]])
                if _best(b, lm, time_limit)[0] == optimum:
                    b.model.add(b.x[i * n + j] == 1)
                    tasks.append(j + 1)
                    break
        b.model.clear_assumptions()
        if len(tasks) != n:
            raise ValueError("no optimal assignment reaches the given optimum")
        return tasks
    bits = [0] * n
    for i in reversed(range(n)):
        b.model.clear_assumptions()
        b.model.add_assumptions([b.x[i].Not()])
        if _best(b, lm, time_limit)[0] == optimum:
            b.model.add(b.x[i] == 0)
        else:
            b.model.add(b.x[i] == 1)
            bits[i] = 1
    b.model.clear_assumptions()
    return bits
