"""UoO prompts (spec section 7): one user message, the data rendered in full, in two variants.

`plain` is the base template; `explicit` inserts one generic paragraph asking the model to check
for alternative optima (it names no tie mechanism). Item numbers in the text are 1-based."""

from __future__ import annotations

from typing import Any

from breakthrough.errors import BtError

VARIANTS = ("plain", "explicit")
SECTOR_LETTERS = "ABCDEFGHIJ"

EXPLICIT_PARAGRAPH = (
    "Be careful about alternative optima. After you find one optimal solution, check "
    "systematically whether any other solution reaches exactly the same objective value, and "
    'count every such solution, including the one you found. Report "unique": true only if '
    "exactly one solution is optimal."
)

_HEAD = "Solve the following optimisation problem exactly."
_DISTINCT = "Two solutions count as different if they differ in at least one decision variable."
_GIVE = (
    "Give:\n"
    "1. one optimal solution,\n"
    "2. its objective value,\n"
    "3. whether the optimal solution is unique,\n"
    "4. the exact number of distinct optimal solutions."
)
_LAST = (
    "You may reason before answering. The last line of your answer must be a single JSON object "
    "and nothing else, in this form:\n"
    '{{"solution": {shape}, "objective": <integer>, "unique": <true or false>, '
    '"num_optima": <integer>}}\n'
    "{note}"
)


def _decision(n: int, noun: str) -> str:
    return f"Decision variables: x_1..x_{n}, x_i = 1 if {noun} i is chosen, else 0."


def _block_subset(inst: dict[str, Any]) -> str:
    n = inst["n"]
    lines = [f"Subset selection. There are {n} items, numbered 1 to {n}. Item values:"]
    lines += [f"item {i + 1}: {v}" for i, v in enumerate(inst["values"])]
    pairs = ", ".join(f"({a + 1},{b + 1})" for a, b in inst["conflicts"])
    lines.append(
        f"Choose exactly {inst['k']} items. The following pairs of items are incompatible "
        f"(at most one item of each pair may be chosen): {pairs}."
    )
    lines.append("Objective: maximize the total value of the chosen items. " + _decision(n, "item"))
    return "\n".join(lines)


def _term(coef: int, name: str, first: bool) -> str:
    mag = abs(coef)
    body = name if mag == 1 else f"{mag}*{name}"
    if first:
        return body if coef > 0 else f"-{body}"
    return f" + {body}" if coef > 0 else f" - {body}"


def qubo_expression(inst: dict[str, Any]) -> str:
    """E(x) as text: linear terms by index, then quadratic terms in (i, j) order; zeros omitted."""
    n, q = inst["n"], inst["Q"]
    terms = [(q[i][i], f"x{i + 1}") for i in range(n) if q[i][i]]
    terms += [(q[i][j], f"x{i + 1}*x{j + 1}") for i in range(n) for j in range(i + 1, n) if q[i][j]]
    if not terms:
        return "0"
    return "".join(_term(c, name, k == 0) for k, (c, name) in enumerate(terms))


def _block_qubo(inst: dict[str, Any]) -> str:
    n = inst["n"]
    return (
        f"QUBO. Binary variables x1..x{n} (each 0 or 1). Minimize E(x) = {qubo_expression(inst)}\n"
        f"(Every variable x1..x{n} is part of the solution, including any that do not appear in E.)"
    )


def _block_assignment(inst: dict[str, Any]) -> str:
    n, c = inst["n"], inst["C"]
    head = [""] + [f"T{j + 1}" for j in range(n)]
    rows = [[f"W{i + 1}"] + [str(v) for v in c[i]] for i in range(n)]
    width = max(len(cell) for row in [head] + rows for cell in row)
    table = [" ".join(cell.rjust(width) for cell in row) for row in [head] + rows]
    return "\n".join(
        [
            f"Assignment. {n} workers W1..W{n} and {n} tasks T1..T{n}. "
            "Cost of giving task Tj to worker Wi:",
            *table,
            "Each worker gets exactly one task and each task goes to exactly one worker. "
            "Minimize the total cost.",
        ]
    )


def _block_knapsack(inst: dict[str, Any]) -> str:
    n, cap = inst["n"], inst["capacity"]
    lines = [f"0/1 knapsack. {n} items, numbered 1 to {n} (value, weight):"]
    lines += [
        f"item {i + 1}: value {v}, weight {w}"
        for i, (v, w) in enumerate(zip(inst["values"], inst["weights"], strict=True))
    ]
    lines.append(
        f"Capacity: {cap}. Choose a set of items with total weight at most {cap} that maximizes "
        "total value. " + _decision(n, "item")
    )
    return "\n".join(lines)


def _block_portfolio(inst: dict[str, Any]) -> str:
    n, s_count = inst["n"], inst["S"]
    lines = [f"Toy portfolio selection. {n} assets, numbered 1 to {n}:"]
    lines += [
        f"asset {i + 1}: sector {SECTOR_LETTERS[s]}, expected return {m}, risk {r}"
        for i, (s, m, r) in enumerate(zip(inst["sectors"], inst["mu"], inst["risk"], strict=True))
    ]
    lines.append(
        "Pair penalty by sectors (symmetric; applies to every unordered pair of chosen assets):"
    )
    for s in range(s_count):
        cells = " ".join(f"{SECTOR_LETTERS[t]}={inst['P'][s][t]}" for t in range(s_count))
        lines.append(f"{SECTOR_LETTERS[s]}: {cells}")
    lines.append(
        f"Choose exactly {inst['K']} assets. Score = sum over chosen assets of (expected return - "
        "risk) minus the sum of pair penalties over all pairs of chosen assets. Maximize the "
        "score. " + _decision(n, "asset")
    )
    return "\n".join(lines)


_BLOCKS = {
    "subset": _block_subset,
    "qubo": _block_qubo,
    "assignment": _block_assignment,
    "knapsack": _block_knapsack,
    "portfolio": _block_portfolio,
}


def problem_block(kind: str, inst: dict[str, Any]) -> str:
    return _BLOCKS[kind](inst)


def render_prompt(item: dict[str, Any], variant: str = "plain") -> str:
    """The full user message for a UoO cohort row (`kind`, `instance`) in a prompt variant."""
    if variant not in VARIANTS:
        raise BtError(f"unknown UoO prompt variant {variant!r} (known: {', '.join(VARIANTS)})")
    kind, inst = item["kind"], item["instance"]
    n = inst["n"]
    if kind == "assignment":
        shape = f"[task for W1, ..., task for W{n}]"
        note = (
            f'"solution" lists, for workers W1..W{n} in order, the task number (1..{n}) '
            "each one gets."
        )
    else:
        shape = f"[x_1, x_2, ..., x_{n}]"
        note = f'"solution" lists all {n} decision variables in order, each 0 or 1.'
    parts = [_HEAD, problem_block(kind, inst), _DISTINCT, _GIVE]
    if variant == "explicit":
        parts.append(EXPLICIT_PARAGRAPH)
    parts.append(_LAST.format(shape=shape, note=note))
    return "\n\n".join(parts)
