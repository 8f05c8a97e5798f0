"""The exact number of optima by projected model counting: the model's constraints plus
the objective bounded by the optimum (`LinearModel.reaching`: no point is better, so exactly
the optima meet it), encoded as CNF (python-sat's pseudo-Boolean encoder, backed by
pindakaas), counted by Ganak (pyganak) projected on the decision variables.

Why projected: the pseudo-Boolean encodings add auxiliary variables that need not be functions
of the decision variables, so counting every variable could count one solution many times; the
sampling set makes the counter count distinct decision vectors only, exactly the benchmark's
rule ("distinct iff they differ in at least one decision variable"). The product variables
z = x_i x_j are tied to their factors by three clauses each. This method knows nothing of CP-SAT
except the optimum it is handed. Needs the `uoo` extra; `exact` imports this module lazily."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

import pyganak
from pysat.pb import PBEnc

from breakthrough.tasks.optimum.linear import Linear, LinearModel
from breakthrough.tasks.optimum.solver_errors import SolverTimeout


def _positive(c: Linear) -> tuple[list[int], list[int], int]:
    """(literals, positive weights, shift): c*x with c < 0 is c + |c|*(not x), so the sum equals
    sum(weights * literals) + shift. The encoder takes positive weights and bounds only."""
    lits, weights, shift = [], [], 0
    for v, coef in c.terms:
        lits.append(v + 1 if coef > 0 else -(v + 1))
        weights.append(abs(coef))
        shift += min(coef, 0)
    return lits, weights, shift


def _encode(c: Linear, top: int) -> tuple[list[list[int]], int]:
    """Clauses for one linear constraint over 0/1 variables (1-based literals), new top id."""
    lits, weights, shift = _positive(c)
    lo = None if c.lo is None else c.lo - shift
    hi = None if c.hi is None else c.hi - shift
    total = sum(weights)
    if lo is not None and lo <= 0:
        lo = None  # the positive sum is never below 0
    if hi is not None and hi >= total:
        hi = None  # nor above its total
    if (hi is not None and hi < 0) or (lo is not None and lo > total):
        return [[]], top  # no point satisfies it
    parts = []
    if lo is not None and hi is not None and lo == hi:
        parts.append(PBEnc.equals(lits=lits, weights=weights, bound=lo, top_id=top))
    else:
        if lo is not None:
            parts.append(PBEnc.atleast(lits=lits, weights=weights, bound=lo, top_id=top))
            top = max(top, parts[-1].nv)
        if hi is not None:
            parts.append(PBEnc.atmost(lits=lits, weights=weights, bound=hi, top_id=top))
    clauses: list[list[int]] = []
    for cnf in parts:
        clauses += [list(cl) for cl in cnf.clauses]
        top = max(top, cnf.nv)
    return clauses, top


def cnf_of(lm: LinearModel, optimum: int) -> tuple[list[list[int]], int]:
    """(clauses, number of variables) whose models, projected on the decision variables, are
    exactly the optimal points."""
    top = lm.n_vars
    clauses: list[list[int]] = []
    for k, (i, j) in enumerate(lm.products):
        z = lm.n_decision + k + 1
        clauses += [[-z, i + 1], [-z, j + 1], [z, -(i + 1), -(j + 1)]]
    for c in (*lm.constraints, lm.reaching(optimum)):
        more, top = _encode(c, top)
        clauses += more
    return clauses, top


def _count(clauses: list[list[int]], nv: int, n_decision: int, conn: Connection) -> None:
    """Child process body: Ganak's projected count, sent back as a decimal string."""
    counter = pyganak.Counter()
    counter.new_vars(nv)
    counter.add_clauses(clauses)
    counter.set_sampling_set(range(1, n_decision + 1))
    conn.send(str(counter.count()))
    conn.close()


def count_optima(lm: LinearModel, optimum: int, time_limit: float) -> int:
    """The exact number of distinct optimal decision vectors (Ganak, projected).

    Ganak takes no time limit, and a hard formula can run for hours, so it counts in a child
    process that is ended at `time_limit` (then `SolverTimeout`)."""
    clauses, nv = cnf_of(lm, optimum)
    if any(not cl for cl in clauses):
        return 0
    fork = "fork" in multiprocessing.get_all_start_methods()  # not on Windows
    ctx: Any = multiprocessing.get_context("fork" if fork else "spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_count, args=(clauses, nv, lm.n_decision, send), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(time_limit):
            raise SolverTimeout(f"Ganak did not finish counting within {time_limit:g} s")
        return int(recv.recv())
    except EOFError:
        raise RuntimeError(f"Ganak's counting process died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
