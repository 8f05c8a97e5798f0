"""The real-size UoO cohort `uoo-large`: the same five kinds at sizes enumeration
cannot reach, counted exactly by solvers (`exact`), with each row's counting method and time.

Design: for each kind and size of the dial (`SIZES`), attempts draw instances at levels in
`LEVEL_ORDER` (spread first: untied, very tied, in between) and keep the first instance that
lands in a bin this kind x size does not hold yet, until `BINS_PER_CELL` bins are held or
`MAX_ATTEMPTS` attempts (`MORE_ATTEMPTS` where most draws time out) are spent; an attempt whose
optimum CP-SAT cannot prove within the time limit is skipped. So the cohort covers the bins
each size reaches ("where reachable"), the way uoo87 covers its cells. Seeds come from
GENERATOR_VERSION_LARGE, so uoo87/uoo29 (uoo-v1) are untouched. The counts need the `uoo`
extra; the shipped file carries them, so running the benchmark does not. Timings
(`count_seconds`, `build_seconds`) are measurements, so `--check` recounts every row and
compares everything else (`check_rows`)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from breakthrough.errors import BtError
from breakthrough.tasks.optimum.generator import (
    ALL_BIN_LABELS,
    KINDS,
    MASTER_SEED,
    SENSE,
    derive_seed,
    generate_instance,
    large_bin_of,
)
from breakthrough.tasks.optimum.prompts import VARIANTS, render_prompt
from breakthrough.tasks.optimum.solver_errors import CountDisagreement, SolverTimeout

NAME = "uoo-large"
GENERATOR_VERSION_LARGE = "uoo-v2-size"
SIZES: dict[str, tuple[int, ...]] = {
    "subset": (30, 40, 60, 100),
    "qubo": (30, 40),
    "assignment": (10, 12, 14, 16),
    "knapsack": (30, 40, 60),
    "portfolio": (30, 40, 60),
}
LEVEL_ORDER: dict[str, tuple[int, ...]] = {
    "subset": (0, 5, 3, 1, 4, 2),
    "qubo": (0, 5, 3, 1, 4, 2),
    "assignment": (0, 5, 3, 1, 4, 2),
    "knapsack": (0, 6, 3, 1, 5, 2, 4),
    "portfolio": (0, 5, 3, 1, 4, 2),
}
BINS_PER_CELL = 4
MAX_ATTEMPTS = 8
# Cells where most draws are skipped get more draws, so they hold more than one row: subset at
# n = 100 (Ganak ran past 20 s on five draws in eight) and QUBO at n = 40 (CP-SAT proved the
# optimum of one draw in eight within 20 s; only its sparse levels fit the prompt cap, so only
# they are drawn there).
MORE_ATTEMPTS: dict[tuple[str, int], int] = {("subset", 100): 16, ("qubo", 40): 16}
CELL_LEVELS: dict[tuple[str, int], tuple[int, ...]] = {("qubo", 40): (5, 4)}
TIME_LIMIT = 20.0  # seconds per CP-SAT call while building; an unproven optimum skips the draw
SELECTION = (
    "UoO at real sizes: per kind x size, the first draws landing in up to "
    f"{BINS_PER_CELL} distinct count bins within {MAX_ATTEMPTS} attempts (subset n=100 and "
    f"QUBO n=40: {MORE_ATTEMPTS[('qubo', 40)]}, QUBO n=40 at levels 5 and 4) whose prompts fit "
    "the 2,048-token cap; counted by solvers"
)
TIMING_FIELDS = ("count_seconds", "build_seconds")
# A draw whose prompt (either variant) would not fit the protocol's 2,048-token prompt cap is
# drawn again, so `bt base --cohort uoo-large` runs under the default cap. Tokenizers split
# numbers into single digits, so a prompt's tokens are about its digits, whitespace runs,
# punctuation and words (`prompt_pieces`): 1.07-1.36 times SmolLM2's count of the whole chat
# prompt over every kind and size of the dial, so 2,150 pieces stay under 2,048 tokens. (Why
# portfolio stops at n = 60: its n = 100 prompts are about 2,150 tokens.)
MAX_PROMPT_PIECES = 2_150
_PIECE = re.compile(r"\d|\s+|[^\w\s]|_")
_WORD = re.compile(r"[^\W\d_]+")


def prompt_pieces(kind: str, inst: dict[str, Any]) -> int:
    """A tokenizer-free upper bound of the longer prompt variant's tokens (`MAX_PROMPT_PIECES`)."""
    item = {"kind": kind, "instance": inst}
    return max(
        len(_PIECE.findall(t)) + len(_WORD.findall(t))
        for t in (render_prompt(item, v) for v in VARIANTS)
    )


def large_seed(kind: str, size: int, attempt: int, master: int = MASTER_SEED) -> int:
    return derive_seed(GENERATOR_VERSION_LARGE, master, kind, size, attempt)


def _row(
    kind: str,
    size: int,
    attempt: int,
    level: int,
    seed: int,
    inst: dict[str, Any],
    res: Any,
    bid: str,
    build_seconds: float,
) -> dict[str, Any]:
    return {
        "id": f"{NAME}/{kind}/n{size}/{bid}",
        "family": "optimum",
        "stage": NAME,
        "selection": SELECTION,
        "standin": False,
        "kind": kind,
        "bin": bid,
        "bin_label": ALL_BIN_LABELS[bid],
        "rep": 0,
        "fixed29": False,
        "level": level,
        "attempts": attempt + 1,
        "seed": f"{seed:016x}",
        "sense": SENSE[kind],
        "n": size,
        "size": size,
        "variables": "permutation" if kind == "assignment" else "binary",
        "instance": inst,
        "optimum": res.optimum,
        "n_optima": res.n_optima,
        "example_optimum": res.example,
        "count_method": res.method,
        "count_seconds": round(res.seconds, 2),
        "build_seconds": round(build_seconds, 2),
        "generator_version": GENERATOR_VERSION_LARGE,
        "master_seed": MASTER_SEED,
    }


def generate_large(
    kinds: tuple[str, ...] = KINDS,
    sizes: dict[str, tuple[int, ...]] = SIZES,
    announce: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """The uoo-large rows in order (kind, size, bin); needs the solvers (takes minutes)."""
    from breakthrough.tasks.optimum.exact import require_solvers, solve_exact

    require_solvers()
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        for size in sizes[kind]:
            levels = CELL_LEVELS.get((kind, size), LEVEL_ORDER[kind])
            held: dict[str, dict[str, Any]] = {}
            since = time.perf_counter()
            for attempt in range(MORE_ATTEMPTS.get((kind, size), MAX_ATTEMPTS)):
                level = levels[attempt % len(levels)]
                seed = large_seed(kind, size, attempt)
                inst = generate_instance(kind, seed, level, size)
                pieces = prompt_pieces(kind, inst)
                if pieces > MAX_PROMPT_PIECES:
                    announce(f"{kind} n={size} attempt {attempt}: skipped (prompt {pieces} pieces)")
                    continue
                try:
                    res = solve_exact(kind, inst, time_limit=TIME_LIMIT)
                except SolverTimeout as exc:
                    announce(f"{kind} n={size} attempt {attempt}: skipped ({exc})")
                    continue
                bid = large_bin_of(res.n_optima)
                announce(
                    f"{kind} n={size} attempt {attempt} level {level}: {res.n_optima} optima "
                    f"({res.method}, {res.seconds:.1f} s)"
                )
                if bid is None or bid in held:
                    continue
                held[bid] = _row(
                    kind, size, attempt, level, seed, inst, res, bid, time.perf_counter() - since
                )
                since = time.perf_counter()
                if len(held) == BINS_PER_CELL:
                    break
            order = {b: i for i, b in enumerate(ALL_BIN_LABELS)}
            rows += sorted(held.values(), key=lambda r: order[r["bin"]])
    return rows


def check_rows(
    rows: list[dict[str, Any]], announce: Callable[[str], None] = lambda _: None
) -> list[str]:
    """Recount every shipped row: its instance must be the generator's for its seed, level and
    size, and its optimum, count, example and primary counting method the solvers' now. The problems
    found, one line each (empty: the file is right). Timings are not compared."""
    from breakthrough.tasks.optimum.exact import require_solvers, solve_exact

    require_solvers()
    problems: list[str] = []
    for r in rows:
        try:
            seed = int(r["seed"], 16)
            if r["kind"] not in KINDS or not isinstance(r["size"], int):
                raise ValueError
            inst = generate_instance(r["kind"], seed, r["level"], r["size"])
        except (KeyError, TypeError, ValueError, IndexError):
            raise BtError(
                f"{r.get('id', '?')}: fields kind, seed (hex), level and size must name a "
                f"{NAME} draw"
            ) from None
        if inst != r["instance"]:
            problems.append(f"{r['id']}: instance differs from its seed's")
            continue
        try:
            res = solve_exact(r["kind"], inst, time_limit=TIME_LIMIT)
        except (SolverTimeout, CountDisagreement) as exc:
            problems.append(f"{r['id']}: {exc}")
            continue
        # the primary method only: whether a further count (CP-SAT's enumeration, Ganak after
        # the knapsack table) also finished depends on the machine's speed (ENUM_TIME_LIMIT);
        # where it finished, it agreed or this raised
        got: tuple[Any, ...] = (res.optimum, res.n_optima, res.example, _primary(res.method))
        want: tuple[Any, ...] = (r["optimum"], r["n_optima"], r["example_optimum"])
        got += (large_bin_of(res.n_optima),)
        want += (_primary(r["count_method"]), r["bin"])
        announce(f"{'same' if got == want else 'DIFFERS'}  {r['id']} ({res.seconds:.1f} s)")
        if got != want:
            problems.append(f"{r['id']}: recounted {got[:2]} by {res.method}, file has {want[:2]}")
    return problems


def _primary(method: str) -> str:
    return method.split("+")[0]


def estimate_seconds(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds to recount the rows, seconds the build took), from the timings they record."""
    if any(f not in r for r in rows for f in TIMING_FIELDS):
        raise BtError(f"{NAME}: a row lacks {' or '.join(TIMING_FIELDS)}; rebuild it")
    return (sum(r["count_seconds"] for r in rows), sum(r["build_seconds"] for r in rows))
