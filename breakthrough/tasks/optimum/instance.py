"""What a UoO cohort row's instance must be before anything reads it: the fields its kind's
prompt, grader and solvers read, with the right types and shapes, and, where the row carries its
example optimum, a point that is feasible and reaches the row's optimum.

Why at load time: a prompt renderer or a grader meeting a missing matrix or a short list fails
with a traceback half-way through a run; checked here, `tasks.cohorts.validate_row` names the
file and line in one line before any model loads or anything is written. The example optimum
is the cheap witness that the instance is feasible and the row's optimum is right (deciding
feasibility without it is a solver's job: `bt cohorts build uoo-large --check`). Pure Python."""

from __future__ import annotations

from typing import Any, TypeGuard

from breakthrough.tasks.optimum.generator import KINDS, evaluate


def _int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v: Any, n: int) -> TypeGuard[list[int]]:
    return isinstance(v, list) and len(v) == n and all(_int(x) for x in v)


def _matrix(v: Any, rows: int, cols: int) -> bool:
    return isinstance(v, list) and len(v) == rows and all(_ints(r, cols) for r in v)


def _shape_problems(kind: str, inst: dict[str, Any]) -> list[str]:
    n = inst.get("n")
    if not _int(n) or n < 1:
        return [f"instance field 'n' must be a positive integer, got {n!r}"]
    out: list[str] = []

    def need(field: str, ok: bool, want: str) -> None:
        if field not in inst:
            out.append(f"instance field {field!r} is missing (kind {kind})")
        elif not ok:
            out.append(f"instance field {field!r} must be {want}")

    vec = f"a list of {n} integers"
    square = f"a {n}x{n} matrix of integers"
    if kind == "subset":
        k, conflicts = inst.get("k"), inst.get("conflicts")
        need("k", _int(k) and 1 <= k <= n, f"an integer in 1..{n}")
        need("values", _ints(inst.get("values"), n), vec)
        pairs_ok = isinstance(conflicts, list) and all(
            isinstance(p, list) and len(p) == 2 and all(_int(i) and 0 <= i < n for i in p)
            and p[0] != p[1]
            for p in conflicts
        )  # fmt: skip
        need("conflicts", pairs_ok, f"a list of pairs of two distinct item indices 0..{n - 1}")
    elif kind == "qubo":
        need("Q", _matrix(inst.get("Q"), n, n), square)
    elif kind == "assignment":
        need("C", _matrix(inst.get("C"), n, n), square)
    elif kind == "knapsack":
        cap = inst.get("capacity")
        need("values", _ints(inst.get("values"), n), vec)
        weights = inst.get("weights")
        need("weights", _ints(weights, n) and min(weights) >= 0, f"{vec} >= 0")
        need("capacity", _int(cap) and cap >= 0, "an integer >= 0")
    elif kind == "portfolio":
        big_k, s = inst.get("K"), inst.get("S")
        need("K", _int(big_k) and 1 <= big_k <= n, f"an integer in 1..{n}")
        need("S", _int(s) and s >= 1, "a positive integer")
        sectors = inst.get("sectors")
        s_count = s if _int(s) and s >= 1 else None
        need(
            "sectors",
            _ints(sectors, n) and (s_count is None or all(0 <= x < s_count for x in sectors)),
            f"{vec}, each a sector index below S",
        )
        need("mu", _ints(inst.get("mu"), n), vec)
        need("risk", _ints(inst.get("risk"), n), vec)
        if s_count is not None:
            need(
                "P",
                _matrix(inst.get("P"), s_count, s_count),
                f"a {s_count}x{s_count} matrix of integers (S x S)",
            )
    return out


def _point(kind: str, n: int, example: Any) -> list[int] | None:
    """The example optimum in `evaluate`'s form (0-based tasks for assignment), None when it is
    not an answer of this size."""
    if not isinstance(example, list) or len(example) != n or not all(_int(x) for x in example):
        return None
    if kind == "assignment":
        return [x - 1 for x in example] if all(1 <= x <= n for x in example) else None
    return list(example) if all(x in (0, 1) for x in example) else None


def instance_problems(row: dict[str, Any]) -> list[str]:
    """What is wrong with an optimum row's kind, instance and example optimum (empty: nothing).
    The row's `optimum` is the one the example must reach (checked only when both are there)."""
    kind, inst = row.get("kind"), row.get("instance")
    if kind not in KINDS:
        return [f"field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}"]
    if not isinstance(inst, dict):
        return []  # the row's own field check names it
    out = _shape_problems(kind, inst)
    if out or "example_optimum" not in row:
        return out
    point = _point(kind, inst["n"], row["example_optimum"])
    if point is None:
        what = "task numbers 1..n, each once" if kind == "assignment" else "0/1 values"
        return [f"field 'example_optimum' must be {inst['n']} {what}"]
    feasible, value = evaluate(kind, inst, point)
    if not feasible:
        return ["field 'example_optimum' is not a feasible point of the instance"]
    optimum = row.get("optimum")
    if isinstance(optimum, (int, float)) and not isinstance(optimum, bool) and value != optimum:
        return [f"field 'example_optimum' reaches objective {value}, not the row's optimum "
                f"{optimum}"]  # fmt: skip
    return []
