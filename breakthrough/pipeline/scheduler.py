"""One stream of generation work for a whole `bt continue` run (continuous batching).

Each cell is a program of protocol steps (`cell_steps`, sections 3.1, 4, 3.5): probes at the
grid anchors; up to two rounds of bisection of the first stable crossing; restarts; top-up
rounds. A step's branches must all be in before the cell's next decision, but cells are
independent, so the scheduler keeps a few cells active and feeds the engine ONE lazy request
stream for the whole run:
  * a branch's answer phase is queued the moment its reasoning phase finishes (answers go
    first: they complete samples and free the live state the engine keeps for them);
  * a cell's next step is decided the moment its last branch is committed;
  * reasoning phases that unlock a decision (probes, bisection, probe top-ups) go before
    restarts, and restarts go longest first: restarts decide nothing until the cell's last one
    is in, so they fill the slots the probes leave, and the longest start early instead of
    running alone at the end (as the four 1,024-token restarts of one cell once did);
  * cells are admitted while fewer than `lookahead` batches of deciding reasoning phases are
    queued (at least `max_active_cells` at a time), not only when a cell finishes: a cell whose
    last restarts are in flight holds no slot it does not use, so a batch no longer runs
    part-empty while three cells each wait for their longest restart;
  * deciding phases go longest context first, across the admitted cells. Why: mlx-lm's batch
    cache pads every row to the longest row in flight, and on CPU the attention over that padded
    length is a large part of a decode step, so a batch mixing an anchor-8 probe with an
    anchor-1024 one pays the long row's attention for both. (Where the engine attends over a
    shared prefix once for all the rows in flight that point into it, `groups_by_prefix`, a
    cell's phases are queued together instead, longest context first within the cell: the rows
    in flight then share few prefixes, and padding does not arise.) Longest first raised the
    share of real attention positions (`attention_fill`) and the bench's ratio to the plain
    mlx-lm loop at the same occupancy (bench/RESULTS.md). The engine's
    `prefix_slots` (the shared-prefix caches it keeps, each cell's prompt + base trace) caps
    the cells that still probe, so sorting never evicts a prefix that a queued probe will need
    again (which would cost a fresh prefill of the whole trace).
Each sample is graded and committed as soon as its row finishes: a kill loses only the rows in
flight. Seeds are functions of each sample's identity, so the sample set and every token equal
a cell-by-cell run, and a rerun completes exactly the missing samples.

Memory: the MLX engine admits each row by the bytes it adds (its own tokens; a
cell's prompt + base trace is held once, shared by all its branches) and holds back a request
that does not fit until rows finish, so the scheduler offers it up to `--batch-size` requests
(`EnginePlan.rows_cap`); an engine without that gets the rows its `plan` holds at the longest
row. The engine keeps a bounded number of shared-prefix caches (the oldest is dropped, which
costs only a prefill), and the requests queued at once are about a batch of deciding ones plus
the active cells' restarts, whose prompts are the chat prompt alone."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from breakthrough.classify.panels import Outcome, PanelRow, probe_rows, restart_rows
from breakthrough.classify.plan import bisection_midpoint, plan_rows, restart_budgets_of
from breakthrough.classify.topup import TOPUP_RULES
from breakthrough.engine.contract import Engine, EnginePlan, GenRequest, GenResult, RowShape
from breakthrough.models.tokens import decode
from breakthrough.pipeline.branches import Branch, BranchRunner, check_budget
from breakthrough.pipeline.cells import CellPlan
from breakthrough.protocol import Protocol
from breakthrough.seeds import probe_seed, restart_seed
from breakthrough.store import RunStore, SampleRecord

PHASES = ("probes", "refinement", "restarts", "topups")
MAX_TOPUP_ROUNDS = 8
ANSWER_SUFFIX = "|answer"


@dataclass
class CellState:
    """A cell in flight: its plan, its branch runner, what is stored, its step program."""

    plan: CellPlan
    runner: BranchRunner
    done: set[tuple[int, int, int]]  # (anchor, budget, branch) of stored samples
    steps: Iterator[tuple[str, list[Branch]]] | None = None
    phase: str = ""
    outstanding: int = 0
    failed: str | None = None
    finished: bool = False
    prefix_chars: dict[int, int] = field(default_factory=dict)  # cut -> len(decoded prefix)
    order: int = 0  # admission order: a cell's rows queue together where the engine groups them


def branches_for(
    cell: CellState, protocol: Protocol, kind: str, point: int, indices: Sequence[int]
) -> list[Branch]:
    """The branches of (kind, anchor t or budget C) at these indices that are not stored yet."""
    out = []
    cid = cell.plan.cell_id
    for b in indices:
        if kind == "probe":
            if (point, protocol.budget, b) not in cell.done:
                out.append(
                    Branch(
                        f"probe:{point}:{b}",
                        "probe",
                        point,
                        protocol.budget,
                        b,
                        probe_seed(cid, point, b),
                        cell.plan.cut(point),
                    )
                )
        elif (-1, point, b) not in cell.done:
            out.append(
                Branch(
                    f"restart:{point}:{b}", "restart", -1, point, b, restart_seed(cid, point, b), 0
                )
            )
    return out


def cell_steps(
    cell: CellState,
    protocol: Protocol,
    tau: float,
    topup: tuple[str, ...],
    panels: Callable[[], tuple[list[PanelRow], list[PanelRow]]],
    forced: int | None = None,
) -> Iterator[tuple[str, list[Branch]]]:
    """The protocol for one cell, step by step; each yielded step's samples are all stored
    before the generator is resumed, so every decision reads complete panels (`panels()`: the
    cell's probe and restart panel rows as stored now). `forced`: the family's forced-close
    token count (default: the cell's runner's)."""
    p = protocol
    yield (
        "probes",
        [b for a in cell.plan.grid for b in branches_for(cell, p, "probe", a, range(p.samples))],
    )
    for _ in range(p.refinement_rounds):  # protocol 4: bisection of the first stable crossing
        rows, _ = panels()
        mid = bisection_midpoint(rows, tau, p)
        if mid is None:
            break
        yield "refinement", branches_for(cell, p, "probe", mid, range(p.samples))
    # Restarts (section 4), decided on the canonical probe summaries (instant cells: C = B only).
    rows, _ = panels()
    if forced is None:
        forced = len(cell.runner.forced_ids)
    budgets = [c for c in restart_budgets_of(rows, tau, p) if check_budget(0, c, p, forced)]
    yield (
        "restarts",
        [b for c in budgets for b in branches_for(cell, p, "restart", c, range(p.restart_samples))],
    )
    if not topup:
        return
    wanted = {TOPUP_RULES[t] for t in topup} | {"bisection"}
    for _ in range(MAX_TOPUP_ROUNDS):  # section 3.5: A1 replication, ambiguity enlargement
        probe, restart = panels()
        cid = cell.plan.cell_id
        todo: list[Branch] = []
        for it in plan_rows({cid: probe}, {cid: restart}, protocol=p, tau=tau, topup=topup):
            if set(it.reason.split("+")) & wanted:
                point = it.anchor if it.kind == "probe" else it.budget
                todo += branches_for(cell, p, it.kind, point, it.branches)
        if not todo:
            return
        yield "topups", todo


def cells_with_work(
    store: RunStore,
    cells: Sequence[CellPlan],
    protocol: Protocol,
    *,
    tau: float,
    topup: tuple[str, ...],
) -> list[str]:
    """The ids of the cells whose program (`cell_steps`) still has a branch to generate, read
    from the store alone: no model, no engine. Why: a rerun with nothing left to do must say so
    before it loads any weights.

    Plans made without the family's forced-close tokens (`plan_cell(..., forced=0)`) and run
    with `forced=0` see a superset of the real work (a longer grid, more restart budgets; every
    later decision reads only the stored panels), so an empty answer is exact and a non-empty
    one at worst loads a model that then finds an anchor near the total cap out of reach."""
    out = []
    for plan in cells:
        done = {k[2:] for k in store.existing_keys(cell_id=plan.cell_id)}
        cell = CellState(plan, None, done)  # type: ignore[arg-type]  # the runner is never read
        panels = _panels_of(store, plan.cell_id, protocol)
        for _, branches in cell_steps(cell, protocol, tau, topup, panels, forced=0):
            if branches:
                out.append(plan.cell_id)
                break
    return out


def _panels_of(
    store: RunStore, cell_id: str, protocol: Protocol
) -> Callable[[], tuple[list[PanelRow], list[PanelRow]]]:
    """The (probe, restart) panel rows of one cell as stored now, read when called (from the
    store's outcome tuples: no data frame between two decoding steps)."""

    def read() -> tuple[list[PanelRow], list[PanelRow]]:
        outcomes = [
            Outcome(cid, kind, a, b, br, ok, sid)
            for sid, cid, kind, a, b, br, ok, _ in store.outcomes(cell_id=cell_id)
        ]
        return (
            probe_rows(outcomes, protocol).get(cell_id, []),
            restart_rows(outcomes, protocol).get(cell_id, []),
        )

    return read


def row_shape(cells: Sequence[CellPlan], protocol: Protocol) -> RowShape:
    """The longest rows `cells` will ask for: the deepest probe (prompt + base trace to the
    deepest anchor, its prefix held once, + B + answer) and the longest restart."""
    probe = max((c.probe_row(protocol) for c in cells), default=(1, 0))
    restart = max((c.restart_row(protocol) for c in cells), default=1)
    return RowShape(probe[0], probe[1], restart)


def memory_plan(engine: Engine, cells: Sequence[CellPlan], protocol: Protocol) -> EnginePlan | None:
    """The engine's plan for `cells` (None without cells), applied to it; raises BtError, before
    anything is written, when the budget cannot hold one row of the deepest probe with its
    prefix, or one of the longest restart."""
    if not cells:
        return None
    plan = engine.plan(row_shape(cells, protocol))
    engine.configure(plan)
    return plan


@dataclass
class SchedulerCounts:
    cells: int = 0
    failed_cells: int = 0
    samples: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PHASES})


class RunScheduler:
    """Streams every cell's branches through one `engine.generate` call (see module doc)."""

    def __init__(
        self,
        store: RunStore,
        loaded: Any,
        engine: Engine,
        grader: Any,
        cells: Sequence[CellPlan],
        protocol: Protocol,
        *,
        tau: float,
        topup: tuple[str, ...],
        on_sample: Callable[[str, int], None] | None = None,
        max_active_cells: int = 3,
        instrument: bool = False,
        fill: bool = True,
        lookahead: int = 8,
    ) -> None:
        self.store, self.loaded, self.engine, self.grader = store, loaded, engine, grader
        self.protocol, self.tau, self.topup = protocol, tau, topup
        self.on_sample = on_sample or (lambda phase, n: None)
        self.max_active = max(1, max_active_cells)
        self.fill = bool(fill)  # admit cells while the batch would lack deciding work (module doc)
        # batches of deciding phases kept queued (sorted by length, module doc) while cells wait
        self.lookahead = max(1, int(lookahead))
        # Store the protocol 2.2 per-token signals of continuations (`bt continue --instrument`);
        # otherwise log-probs and entropies only, whatever the backend returned.
        self.instrument = bool(instrument)
        self.waiting: deque[CellPlan] = deque(cells)
        self.active: list[CellState] = []
        self.answers: deque[GenRequest] = deque()
        # queued reasoning phases: a heap of ((rank, cell group, -length, order), request); rank
        # 0 for the phases a decision waits for (probes; length: the context), 1 for restarts
        # (length: the budget); the group is the cell's admission order where the engine groups
        # rows by prefix, else 0 (see the module doc)
        self.reasoning: list[tuple[tuple[int, int, int, int], GenRequest]] = []
        self._cell_order = itertools.count()
        self.deciding_queued = 0  # queued reasoning phases of rank 0
        self._order = itertools.count()
        self.in_flight = 0
        # the engine's plan for the active cells (`memory_plan`, redone as cells are admitted)
        self.plan: EnginePlan | None = None
        self.rows_cap = 1
        # request key -> (cell, branch, reasoning-phase state or None for a reasoning request)
        self.by_key: dict[str, tuple[CellState, Branch, Any]] = {}
        self.counts = SchedulerCounts()

    # -- cells ----------------------------------------------------------------------------
    def _wants_cell(self) -> bool:
        """Admit another cell: fewer than `max_active_cells` are active, or (`fill`) fewer than
        `lookahead` batches of deciding reasoning phases are queued and fewer cells still probe
        than the engine keeps shared prefixes (`prefix_slots`, when it has such a bound)."""
        if not self.waiting:
            return False
        if len(self.active) < self.max_active:
            return True
        if not self.fill or self.deciding_queued >= self.lookahead * self.rows_cap:
            return False
        slots = self.plan.prefix_slots if self.plan is not None else None
        probing = sum(1 for c in self.active if c.phase != "restarts")
        return not slots or probing < slots

    def _activate(self) -> None:
        while self._wants_cell():
            plan = self.waiting.popleft()
            done = {k[2:] for k in self.store.existing_keys(cell_id=plan.cell_id)}
            cell = CellState(
                plan,
                BranchRunner(
                    self.engine,
                    self.loaded,
                    plan.prompt,
                    plan.trace,
                    self.protocol,
                    plan.shared_prefix(),
                ),
                done,
                order=next(self._cell_order),
            )
            cell.steps = self.program(cell)
            self.active.append(cell)
            self._replan()
            self._advance(cell)

    def _replan(self) -> None:
        """The engine's plan for the active cells (before the new cell's phases are queued: the
        queue order follows `groups_by_prefix`): their longest rows set the rows in flight and
        the shared prefixes kept (`Engine.plan`; the whole run's plan already held, so this
        never refuses)."""
        self.plan = memory_plan(self.engine, [c.plan for c in self.active], self.protocol)
        assert self.plan is not None  # a cell is active
        self.rows_cap = self.plan.rows_cap

    def program(self, cell: CellState) -> Iterator[tuple[str, list[Branch]]]:
        """The cell's step program: the protocol's (`cell_steps`); `bt continue --add-budget`
        runs another (pipeline.budget_arm)."""
        return cell_steps(
            cell, self.protocol, self.tau, self.topup, self._panels(cell.plan.cell_id)
        )

    def _panels(self, cell_id: str) -> Callable[[], tuple[list[PanelRow], list[PanelRow]]]:
        return _panels_of(self.store, cell_id, self.protocol)

    def _advance(self, cell: CellState) -> None:
        """Run the cell's program to its next step with work to do (or its end)."""
        assert cell.steps is not None  # the program is set when the cell is admitted
        while cell.outstanding == 0 and not cell.finished:
            try:
                phase, branches = next(cell.steps)
            except StopIteration:
                self._finish(cell)
                return
            cell.phase = phase
            if phase == "restarts":
                self._release_prefix(cell)
            for b in branches:
                req = cell.runner.reasoning_request(b, key=f"{cell.plan.cell_id}|{b.key}")
                self.by_key[req.key] = (cell, b, None)
                self._queue(b, req, cell)
            cell.outstanding = len(branches)

    def _queue(self, b: Branch, req: GenRequest, cell: CellState) -> None:
        """Queue a reasoning phase: deciding ones (probes) first, longest context first (module
        doc), then restarts, longest budget first; cell by cell where the engine attends over a
        shared prefix once for the rows in flight that point into it (`groups_by_prefix`)."""
        rank = 1 if b.kind == "restart" else 0
        length = -b.budget if rank else -len(req.prompt)
        group = cell.order if self.plan is not None and self.plan.groups_by_prefix else 0
        heapq.heappush(self.reasoning, ((rank, group, length, next(self._order)), req))
        self.deciding_queued += rank == 0

    def _next_reasoning(self) -> GenRequest:
        (rank, _, _, _), req = heapq.heappop(self.reasoning)
        self.deciding_queued -= rank == 0
        return req

    def _release_prefix(self, cell: CellState) -> None:
        """Let the engine drop the cell's shared-prefix cache (`Engine.release_prefix`): its
        probes are done, and the slot goes to the next cell's (module doc)."""
        self.engine.release_prefix(cell.plan.cell_id)

    def _finish(self, cell: CellState) -> None:
        self._release_prefix(cell)
        cell.finished = True
        if cell in self.active:
            self.active.remove(cell)
        if cell.failed:
            self.counts.failed_cells += 1
        else:
            self.counts.cells += 1

    def _fail(self, cell: CellState, res: GenResult) -> None:
        """A request that kept failing (remote backends): the cell stops with a stored error
        row (its missing samples are retried by a rerun); its queued requests are dropped; the
        run goes on."""
        if cell.failed is None:
            cell.failed = str(res.error or "generation failed")
            self.store.add_error(cell.plan.cell_id, res.key, cell.failed, res.endpoint or "")
            mine = lambda r: self.by_key.get(r.key, (None,))[0] is cell  # noqa: E731
            self.answers = deque(r for r in self.answers if not mine(r))
            self.reasoning = [item for item in self.reasoning if not mine(item[1])]
            heapq.heapify(self.reasoning)
            self.deciding_queued = sum(item[0][0] == 0 for item in self.reasoning)
            self._finish(cell)

    # -- the stream -----------------------------------------------------------------------
    def requests(self) -> Iterator[GenRequest | None]:
        """The engine's request source: answers first, then reasoning phases (deciding ones in
        cell order, then restarts longest first); None while the rows cap is reached or every
        active cell awaits results in flight."""
        while True:
            self._activate()
            if (self.answers or self.reasoning) and self.in_flight < self.rows_cap:
                req = self.answers.popleft() if self.answers else self._next_reasoning()
                self.in_flight += 1
                yield req
            elif self.in_flight:
                yield None
            elif self.answers or self.reasoning:
                raise AssertionError("queued work with a zero rows cap")  # pragma: no cover
            else:
                return

    def run(self) -> SchedulerCounts:
        for res in self.engine.generate(self.requests()):
            self.in_flight -= 1
            self._on_result(res)
        return self.counts

    def _on_result(self, res: GenResult) -> None:
        cell, branch, reasoned = self.by_key.pop(res.key)
        if cell.failed:
            return
        if res.error or res.finish_reason == "error":
            self._fail(cell, res)
            return
        if reasoned is None and not cell.runner.needs_answer(res):  # complete (branches.py)
            self._commit(cell, cell.runner.result_without_answer(branch, res))
            cell.outstanding -= 1
            if cell.outstanding == 0:
                self._advance(cell)
            return
        if reasoned is None:  # reasoning phase done: queue its answer phase at once
            req, state = cell.runner.answer_request(branch, res, key=res.key + ANSWER_SUFFIX)
            self.by_key[req.key] = (cell, branch, state)
            self.answers.append(req)
            return
        self._commit(cell, cell.runner.result(branch, reasoned, res))
        cell.outstanding -= 1
        if cell.outstanding == 0:
            self._advance(cell)

    def _commit(self, cell: CellState, r: Any) -> None:
        """Grade one finished branch and commit it on its own (kill-safe per sample)."""
        b = r.branch
        text = decode(self.loaded.tokenizer, r.tokens)
        if b.cut not in cell.prefix_chars:  # where the prefix ends in the text (report cut marks)
            cell.prefix_chars[b.cut] = len(decode(self.loaded.tokenizer, cell.plan.trace[: b.cut]))
        grade = self.grader.grade(text, cell.plan.item, r.finish_reason)
        rec = SampleRecord(
            cell_id=cell.plan.cell_id,
            kind=b.kind,
            anchor=b.anchor,
            budget=b.budget,
            branch=b.branch,
            seed=b.seed,
            prefix_len=b.cut,
            token_ids=np.asarray(r.tokens, dtype=np.int32),
            text=text,
            finish_reason=r.finish_reason,
            logprobs=r.logprobs,
            entropies=r.entropies,
            sampling_entropies=r.sampling_entropies,
            signals=r.signals if self.instrument else None,
            elapsed_s=r.elapsed_s,
            peak_mem_mb=r.peak_memory_bytes / 2**20,
            extra={**r.extra, "phase": cell.phase, "prefix_chars": cell.prefix_chars[b.cut]},
        )
        self.store.add_samples([rec], [grade])
        cell.done.add((b.anchor, b.budget, b.branch))
        self.counts.samples[cell.phase] += 1
        self.on_sample(cell.phase, 1)
