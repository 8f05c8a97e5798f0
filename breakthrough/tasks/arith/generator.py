"""Seeded arithmetic problems with a difficulty dial (the demonstration family `arith`).

A problem is one operation on two positive integers; the level sets the operation and the
operand sizes:

    level 1  a + b, one digit each, no carry  (2 + 3)
    level 2  a + b, one digit each, carry     (6 + 7)
    level 3  a * b, one digit each            (8 * 7)
    level 4  a + b, two digits each, carry    (17 + 25)
    level 5  a * b, two digits by one digit   (12 * 3)

Problem `rep` of a level is drawn from `random.Random(f"{MASTER_SEED}:level:{L}:rep:{rep}")`
(a string seed is hashed with SHA-512, the same on every platform and Python 3 version), with
rejection until the level's constraint holds, so the list of problems is fixed by the seed.
Reps are drawn independently, so a problem can recur (level 1 has only 21 distinct problems).
Every answer differs from both operands (the grader relies on it: a model restates the
operands before it states a result)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

GENERATOR_VERSION = "arith-v1"
MASTER_SEED = "breakthrough-arith-v1"
MAX_DRAWS = 1000


@dataclass(frozen=True)
class Level:
    """One step of the difficulty dial: the operation, each operand's range (inclusive) and a
    constraint on the pair."""

    op: str
    a: tuple[int, int]
    b: tuple[int, int]
    accept: Callable[[int, int], bool]
    label: str


LEVELS: dict[int, Level] = {
    1: Level("+", (2, 9), (2, 9), lambda a, b: a + b <= 9, "one-digit addition, no carry"),
    2: Level("+", (2, 9), (2, 9), lambda a, b: a + b >= 10, "one-digit addition with carry"),
    3: Level("*", (2, 9), (2, 9), lambda a, b: True, "one-digit multiplication"),
    4: Level(
        "+", (11, 99), (11, 99), lambda a, b: a % 10 + b % 10 >= 10, "two-digit addition with carry"
    ),
    5: Level("*", (11, 99), (2, 9), lambda a, b: True, "two-digit by one-digit multiplication"),
}
SUBJECT = {"+": "addition", "*": "multiplication"}


def evaluate(a: int, op: str, b: int) -> int:
    """The exact answer of `a op b`."""
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    raise ValueError(f"unknown operation {op!r}")


def generate(level: int, rep: int, master_seed: str = MASTER_SEED) -> dict:
    """Problem `rep` of `level`: {"a", "op", "b", "expression", "answer", "draws"}."""
    spec = LEVELS[level]
    rng = random.Random(f"{master_seed}:level:{level}:rep:{rep}")
    for draw in range(1, MAX_DRAWS + 1):
        a, b = rng.randint(*spec.a), rng.randint(*spec.b)
        if spec.accept(a, b):
            answer = evaluate(a, spec.op, b)
            assert answer not in (a, b)
            return {
                "a": a,
                "op": spec.op,
                "b": b,
                "expression": f"{a} {spec.op} {b}",
                "answer": answer,
                "draws": draw,
            }
    raise AssertionError(f"level {level} rep {rep}: no problem in {MAX_DRAWS} draws")
