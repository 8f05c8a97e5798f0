"""`bt continue` for one run: probes, refinement, restarts and top-ups, cell by cell.

Per cell, in protocol order (sections 3.1, 4, 3.5), every request declaring the cell's prompt +
base trace as its shared prefix (one prefill per cell on the MLX backend):
  1. probes at the grid anchors (64 ... 8,192 reasoning tokens; anchors beyond the trace's
     reasoning length, or whose prefix leaves no room for B + the answer reserve, are skipped);
  2. up to two rounds of bisection of the first stable crossing (classify.bisection_midpoint);
  3. restarts: empty prefix, reasoning budget C, 4 attempts each (instant cells: C = 1,024 only);
  4. top-ups from classify.plan_next: terminal replication (A1), ambiguity enlargement of probe
     cells (A5.1) and of restart cells (which the study required but never ran).
Every sample's seed is a function of its identity and every finished batch is committed, so a
rerun after a kill completes the missing samples only and ends with the same sample set."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from breakthrough.classify.panels import probe_panel, restart_panel
from breakthrough.classify.plan import bisection_midpoint, plan_next, restart_budgets_for
from breakthrough.classify.regimes import budget_fit_time, is_instant
from breakthrough.classify.topup import TOPUP_RULES
from breakthrough.engine import make_engine
from breakthrough.engine.contract import Engine, EngineSpec, SharedPrefix
from breakthrough.models.loading import load_model
from breakthrough.models.tokens import decode
from breakthrough.models.segments import anchor_cutoff, reasoning_length
from breakthrough.pipeline.branches import Branch, BranchRunner, check_budget
from breakthrough.pipeline.manifest import check_engine, check_model, record_continuation
from breakthrough.tasks.family import family_of, make_grader
from breakthrough.protocol import DEFAULT, Protocol
from breakthrough.seeds import probe_seed, restart_seed
from breakthrough.store import RunStore, SampleRecord

PHASES = ("probes", "refinement", "restarts", "topups")


@dataclass
class CellPlan:
    """The fixed facts of one cell's base trace that every phase needs."""

    cell_id: str
    item: dict
    prompt: list[int]
    trace: list[int]
    segments: np.ndarray
    reasoning_tokens: int
    grid: list[int]

    def cut(self, anchor: int) -> int:
        """Prefix length (generated tokens) for anchor t: through the t-th reasoning token."""
        return anchor_cutoff(self.segments, anchor) + 1


def plan_cell(cell_id: str, item: dict, prompt: Sequence[int], base: Any, protocol: Protocol) -> CellPlan:
    segs = np.asarray(base["segments"])
    trace = [int(t) for t in base["token_ids"]]
    r = reasoning_length(segs)
    grid = []
    for a in protocol.anchors:
        if a > r or not check_budget(anchor_cutoff(segs, a) + 1, protocol.budget, protocol):
            break
        grid.append(a)
    return CellPlan(cell_id, item, [int(t) for t in prompt], trace, segs, r, grid)


def similar_length_chunks(branches: Sequence[Branch], rows: int, spread: float = 1.5) -> list[list[Branch]]:
    """Batches of at most `rows` branches whose prefix lengths are close (the longest at most
    `spread` x the shortest, plus 64): a batch is padded to its longest row, so mixing a
    64-token prefix with a 4,096-token one would waste most of the batch's attention work."""
    chunks: list[list[Branch]] = []
    for b in sorted(branches, key=lambda b: (b.cut, b.key)):
        if chunks and len(chunks[-1]) < rows and b.cut <= spread * chunks[-1][0].cut + 64:
            chunks[-1].append(b)
        else:
            chunks.append([b])
    return chunks


@dataclass
class ContinueOptions:
    protocol: Protocol = DEFAULT
    topup: tuple[str, ...] = ("terminal", "ambiguous")  # () = none; ("posterior",)
    engine: EngineSpec = field(default_factory=lambda: EngineSpec(batch_size=32))
    posterior_band: tuple[float, float] = DEFAULT.posterior_band


@dataclass
class ContinueReport:
    run_dir: Path
    cells: int = 0
    samples: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PHASES})
    prefill_tokens: int = 0
    trace_tokens: int = 0
    generated_tokens: int = 0
    elapsed_s: float = 0.0


class CellContinuer:
    """Runs every phase of one cell; `on_sample(phase, n)` reports progress."""

    def __init__(self, store: RunStore, loaded: Any, engine: Engine, grader: Any, cell: CellPlan,
                 opts: ContinueOptions, on_sample: Callable[[str, int], None] | None = None) -> None:
        self.store, self.loaded, self.engine, self.grader = store, loaded, engine, grader
        self.cell, self.opts, self.p = cell, opts, opts.protocol
        self.on_sample = on_sample or (lambda phase, n: None)
        max_cut = cell.cut(cell.grid[-1]) if cell.grid else 0
        np_ = len(cell.prompt)
        shared = SharedPrefix(key=cell.cell_id, ids=tuple(cell.prompt + cell.trace[:max_cut]),
                              starts=(np_, *(np_ + cell.cut(a) for a in cell.grid)))
        self.runner = BranchRunner(engine, loaded, cell.prompt, cell.trace, self.p, shared)
        longest = np_ + max_cut + max(self.p.budget, *self.p.restart_budgets) + self.p.answer_budget
        self.rows = engine.capacity(longest)
        self.done = {k[2:] for k in store.existing_keys(cell_id=cell.cell_id)}

    # -- running -------------------------------------------------------------------------
    def _branches(self, kind: str, point: int, branches: range) -> list[Branch]:
        out = []
        for b in branches:
            if kind == "probe":
                if (point, self.p.budget, b) in self.done:
                    continue
                out.append(Branch(f"probe:{point}:{b}", "probe", point, self.p.budget, b,
                                  probe_seed(self.cell.cell_id, point, b), self.cell.cut(point)))
            else:
                if (-1, point, b) in self.done:
                    continue
                out.append(Branch(f"restart:{point}:{b}", "restart", -1, point, b,
                                  restart_seed(self.cell.cell_id, point, b), 0))
        return out

    def run(self, phase: str, branches: list[Branch]) -> int:
        """Run, grade and commit `branches` in batches of at most `self.rows` rows
        (rows of similar prefix length together: sorted by cut)."""
        total = 0
        for chunk in similar_length_chunks(branches, self.rows):
            results = self.runner.run(chunk)
            texts = [decode(self.loaded.tokenizer, r.tokens) for r in results]
            grades = self.grader.grade_many([(t, self.cell.item, r.finish_reason) for t, r in zip(texts, results)])
            recs = []
            for r, text in zip(results, texts):
                b = r.branch
                recs.append(SampleRecord(
                    cell_id=self.cell.cell_id, kind=b.kind, anchor=b.anchor, budget=b.budget,
                    branch=b.branch, seed=b.seed, prefix_len=b.cut,
                    token_ids=np.asarray(r.tokens, dtype=np.int32), text=text,
                    finish_reason=r.finish_reason, logprobs=r.logprobs, entropies=r.entropies,
                    sampling_entropies=r.sampling_entropies,
                    elapsed_s=r.elapsed_s, peak_mem_mb=r.peak_memory_bytes / 2**20,
                    extra={**r.extra, "phase": phase},
                ))
                self.done.add((b.anchor, b.budget, b.branch))
            self.store.add_samples(recs, grades)
            total += len(recs)
            self.on_sample(phase, len(recs))
        return total

    def panels(self):
        df = self.store.samples_frame(arrays=False, cell_id=self.cell.cell_id)
        return probe_panel(df, self.p), restart_panel(df, self.p)

    # -- the protocol, step by step ----------------------------------------------------------
    def probes(self) -> None:
        m = range(self.p.samples)
        self.run("probes", [b for a in self.cell.grid for b in self._branches("probe", a, m)])

    def refinement(self, tau: float) -> None:
        for _ in range(self.p.refinement_rounds):
            probe, _r = self.panels()
            rows = list(probe[["anchor", "n", "k", "n_canon", "k_canon"]].itertuples(index=False, name=None))
            mid = bisection_midpoint(rows, tau, self.p)
            if mid is None:
                return
            self.run("refinement", self._branches("probe", mid, range(self.p.samples)))

    def restarts(self, tau: float) -> None:
        probe, _ = self.panels()
        rates = {int(a): k / n for a, n, k in zip(probe["anchor"], probe["n"], probe["k"]) if n}
        tf = budget_fit_time(list(rates), list(rates.values()), tau)
        instant = is_instant(tf.event_observed, tf.interval_upper, self.p)
        budgets = [c for c in restart_budgets_for(instant, self.p) if check_budget(0, c, self.p)]
        r = range(self.p.restart_samples)
        self.run("restarts", [b for c in budgets for b in self._branches("restart", c, r)])

    def topups(self, tau: float, max_rounds: int = 8) -> None:
        mode = self.opts.topup  # the --topup rules (classify.topup); plan_next applies them
        wanted = {TOPUP_RULES[t] for t in self.opts.topup} | {"bisection"}
        for _ in range(max_rounds):
            probe, restart = self.panels()
            plan = plan_next(probe, restart, protocol=self.p, tau=tau, topup=mode,
                             band=self.opts.posterior_band)
            todo: list[Branch] = []
            for it in plan:
                if not set(it.reason.split("+")) & wanted:
                    continue
                point = it.anchor if it.kind == "probe" else it.budget
                todo += self._branches(it.kind, point, it.branches)
            if not todo:
                return
            self.run("topups", todo)


def continue_run(run_dir: Path, loaded: Any, opts: ContinueOptions, *,
                 on_start: Callable[[dict, Any], None] | None = None,
                 on_sample: Callable[[str, int], None] | None = None,
                 tau: float | None = None) -> ContinueReport:
    """All phases for every cell of one run that has a base trace."""

    tau = opts.protocol.tau if tau is None else tau
    report = ContinueReport(run_dir=run_dir)

    def counted(phase: str, n: int) -> None:
        report.samples[phase] += n
        if on_sample:
            on_sample(phase, n)

    t0 = time.perf_counter()
    with RunStore(run_dir) as store:
        check_model(store, loaded, run_dir)
        base = store.samples_frame(kind="base")
        cells = []
        for rec in base.to_dict(orient="records"):
            item, prompt = store.cell_prompt(rec["cell_id"])
            cells.append(plan_cell(rec["cell_id"], item, prompt, rec, opts.protocol))
        items = [c.item for c in cells]
        engine = make_engine(opts.engine, loaded)
        check_engine(store, engine)
        if on_start:
            on_start({"cells": len(cells),
                      "probes": sum(len(c.grid) for c in cells) * opts.protocol.samples}, engine)
        if not cells:
            return report
        grader = make_grader(family_of(items), run_dir)
        try:
            for cell in cells:
                cc = CellContinuer(store, loaded, engine, grader, cell, opts, counted)
                cc.probes()
                cc.refinement(tau)
                cc.restarts(tau)
                if opts.topup:
                    cc.topups(tau)
                report.cells += 1
                report.trace_tokens += len(cell.prompt) + len(cell.trace)
        finally:
            getattr(grader, "close", lambda: None)()
        report.generated_tokens = engine.generated_tokens
        report.prefill_tokens = engine.prefill_tokens
    report.elapsed_s = time.perf_counter() - t0
    return report


def continue_runs(run_dirs: Sequence[Path], settings: dict[str, Any], opts: ContinueOptions, *,
                  progress: Callable[[Path, dict], None] | None = None,
                  drive: Callable[[Callable], ContinueReport] | None = None) -> list[ContinueReport]:
    """`bt continue`: record each run's protocol with `settings` (B, anchors, samples, ...),
    then, run by run, load its model and run every phase.

    `progress(run_dir, manifest)` announces a run (its manifest plus "base_traces");
    `drive(run)` wraps `run(on_start, on_sample)` (the CLI's progress display)."""
    from dataclasses import replace

    from breakthrough.pipeline.manifest import record_continuation

    protocols = {}
    for run_dir in run_dirs:
        with RunStore(run_dir) as store:
            protocols[run_dir] = record_continuation(store, **settings)
            man = {**store.manifest(), "base_traces": len(store.existing_keys("base"))}
        if progress:
            progress(run_dir, man)
    reports = []
    for run_dir in run_dirs:
        with RunStore(run_dir) as store:
            man = store.manifest()
        loaded = load_model(man["model_id"], family=man.get("family"))
        run_opts = replace(opts, protocol=protocols[run_dir])

        def run(on_start=None, on_sample=None, run_dir=run_dir, loaded=loaded, run_opts=run_opts):
            return continue_run(run_dir, loaded, run_opts, on_start=on_start, on_sample=on_sample)

        reports.append(drive(run) if drive else run())
    return reports
