"""A UoO instance as a 0/1 integer linear model, the one form both exact solvers read (CP-SAT in
`cpsat`, the projected model counter in `modelcount`), so they count the same thing.

Why a solver-neutral model: the two counting methods must be independent in their search, not in
what they are told; writing each family's constraints once here keeps a modelling slip from
showing up as an agreement. Variables 0..n_decision-1 are the decision variables (x_i for the
binary families; y_ij = 1 iff worker i gets task j, index i*n + j, for assignment); after them
come product variables z = x_i * x_j (QUBO and portfolio objectives), each tied to its factors
by the three linearisation constraints, so it is a function of the decision variables and never
changes a count. All data are integers, so every objective value is an exact integer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from breakthrough.tasks.optimum.generator import SENSE

Terms = tuple[tuple[int, int], ...]  # (variable index, integer coefficient), coefficients != 0


@dataclass(frozen=True)
class Linear:
    """lo <= sum(coef * var) <= hi (either bound None: unbounded on that side)."""

    terms: Terms
    lo: int | None
    hi: int | None


@dataclass(frozen=True)
class LinearModel:
    """The instance's feasible set and objective over 0/1 variables."""

    kind: str
    n: int  # the instance's n (items, or workers = tasks)
    n_decision: int
    products: tuple[tuple[int, int], ...]  # variable n_decision + k is products[k][0] * [1]
    constraints: tuple[Linear, ...]  # the problem's own (the products' are product_constraints)
    objective: Terms
    sense: str  # "max" | "min"

    @property
    def n_vars(self) -> int:
        return self.n_decision + len(self.products)

    def product_constraints(self) -> tuple[Linear, ...]:
        """The linearisation of every z = x_i x_j: z <= x_i, z <= x_j, z >= x_i + x_j - 1 (the
        CNF encoding writes the same three as clauses)."""
        out: list[Linear] = []
        for k, (i, j) in enumerate(self.products):
            z = self.n_decision + k
            out += [
                Linear(((i, -1), (z, 1)), None, 0),
                Linear(((j, -1), (z, 1)), None, 0),
                Linear(((i, 1), (j, 1), (z, -1)), None, 1),
            ]
        return tuple(out)

    def reaching(self, optimum: int) -> Linear:
        """objective >= optimum (max) or <= optimum (min): given that `optimum` is the proven
        optimum, exactly the optimal points satisfy it, as they satisfy objective == optimum.
        Both counters are handed this one-sided bound: a weighted-sum equality is the harder
        form for both (CP-SAT enumerated a 9x9 assignment's 701 optima in 1.2 s this way and
        had not finished in 30 s with the equality; Ganak's CNF is about a third the size)."""
        if self.sense == "max":
            return Linear(self.objective, optimum, None)
        return Linear(self.objective, None, optimum)

    def decode(self, decision: list[int]) -> list[int]:
        """The answer format of a 0/1 decision vector: x_1..x_n, or the 1-based task of each
        worker for assignment."""
        if self.kind != "assignment":
            return [int(v) for v in decision]
        n = self.n
        return [1 + next(j for j in range(n) if decision[i * n + j]) for i in range(n)]


def _clean(terms: dict[int, int]) -> Terms:
    return tuple((v, c) for v, c in sorted(terms.items()) if c)


class _Builder:
    def __init__(self, n_decision: int) -> None:
        self.n_decision = n_decision
        self.products: list[tuple[int, int]] = []
        self.index: dict[tuple[int, int], int] = {}
        self.constraints: list[Linear] = []

    def product(self, i: int, j: int) -> int:
        key = (min(i, j), max(i, j))
        if key not in self.index:
            self.index[key] = self.n_decision + len(self.products)
            self.products.append(key)
        return self.index[key]

    def add(self, terms: dict[int, int], lo: int | None, hi: int | None) -> None:
        self.constraints.append(Linear(_clean(terms), lo, hi))


def build_model(kind: str, inst: dict[str, Any]) -> LinearModel:
    """The linear model of one instance (spec section 4): same feasible set and objective as
    `generator.evaluate`, which the tests check point by point."""
    n = inst["n"]
    obj: dict[int, int] = {}
    if kind == "assignment":
        b = _Builder(n * n)
        for i in range(n):
            b.add({i * n + j: 1 for j in range(n)}, 1, 1)  # each worker one task
            b.add({t * n + i: 1 for t in range(n)}, 1, 1)  # each task one worker
        obj = {i * n + j: inst["C"][i][j] for i in range(n) for j in range(n)}
    else:
        b = _Builder(n)
        if kind == "subset":
            b.add(dict.fromkeys(range(n), 1), inst["k"], inst["k"])
            for a, c in inst["conflicts"]:
                b.add({a: 1, c: 1}, None, 1)
            obj = dict(enumerate(inst["values"]))
        elif kind == "knapsack":
            b.add(dict(enumerate(inst["weights"])), None, inst["capacity"])
            obj = dict(enumerate(inst["values"]))
        elif kind == "qubo":
            q = inst["Q"]
            obj = {i: q[i][i] for i in range(n)}
            for i in range(n):
                for j in range(i + 1, n):
                    if q[i][j]:
                        obj[b.product(i, j)] = q[i][j]
        elif kind == "portfolio":
            s, pen = inst["sectors"], inst["P"]
            b.add(dict.fromkeys(range(n), 1), inst["K"], inst["K"])
            obj = {i: inst["mu"][i] - inst["risk"][i] for i in range(n)}
            for i in range(n):
                for j in range(i + 1, n):
                    if pen[s[i]][s[j]]:
                        obj[b.product(i, j)] = -pen[s[i]][s[j]]
        else:
            raise ValueError(f"unknown UoO kind {kind!r}")
    return LinearModel(
        kind=kind,
        n=n,
        n_decision=b.n_decision,
        products=tuple(b.products),
        constraints=tuple(b.constraints),
        objective=_clean(obj),
        sense=SENSE[kind],
    )


def evaluate_model(model: LinearModel, values: list[int]) -> tuple[bool, int]:
    """(feasible, objective) of a full 0/1 assignment of the model's variables; the products
    are taken from `values` as given, so a wrong product value makes the point infeasible."""
    ok = True
    for c in model.constraints + model.product_constraints():
        s = sum(coef * values[v] for v, coef in c.terms)
        ok = ok and (c.lo is None or s >= c.lo) and (c.hi is None or s <= c.hi)
    return ok, sum(coef * values[v] for v, coef in model.objective)
