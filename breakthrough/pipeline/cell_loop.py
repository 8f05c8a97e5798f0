"""`bt continue`: probes, refinement, restarts and top-ups for every cell of a run.

Per cell, in protocol order (sections 3.1, 4, 3.5), every request declaring the cell's prompt +
base trace as its shared prefix (one prefill per cell on the MLX backend):
  1. probes at the grid anchors (64 ... 8,192 reasoning tokens; anchors beyond the trace's
     reasoning length, or whose prefix leaves no room for B + the answer reserve, are skipped);
  2. up to two rounds of bisection of the first stable crossing (classify.plan.bisection_midpoint);
  3. restarts: empty prefix, reasoning budget C, 4 attempts each (instant cells: C = B only);
  4. top-ups from classify.plan.plan_next: terminal replication (A1), ambiguity enlargement of
     probe cells (A5.1) and of restart cells (which the study required but never ran), under
     the `--topup` rules the run records (manifest `topup`: a continuation runs the run's rules
     plus any named beyond them, and records them; `manifest.resolve_topup`).
All cells' work runs as one continuously batched stream (pipeline.scheduler). Every sample's
seed is a function of its identity and every sample is committed when its row finishes, so a
rerun after a kill completes the missing samples only and ends with the same sample set.

What a continuation stores (protocol 2.2 instruments "one 16K trajectory per cell", the base
trace): its token ids, log-probs, full-distribution entropies and sampling entropies; the
per-token protocol 2.2 signals only with `--instrument` (they cost about a fifth of a decode
step at batch 32 and are computed beside it). The choice is the manifest's identity field
`continuation` (`continuation_identity`), so a run never mixes continuations that hold the
signals with ones that do not; `bt signals` says which trajectories hold what.

A rerun with nothing left to do says so before any model is loaded
(`scheduler.cells_with_work` reads the store alone)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from breakthrough.engine import make_engine
from breakthrough.engine.contract import Engine, EngineSpec
from breakthrough.errors import BtError
from breakthrough.models.loading import load_model
from breakthrough.pipeline.branches import close_tokens
from breakthrough.pipeline.cells import CellPlan, plan_cell, similar_length_chunks
from breakthrough.pipeline.dry_run import RunPlan, large_run_line, plan_continue
from breakthrough.pipeline.manifest import (
    TopupChoice,
    check_engine,
    check_model,
    preflight_continue,
    record_continuation_protocol,
    record_throughput,
    record_topup,
    resolve_topup,
    store_protocol,
)
from breakthrough.pipeline.scheduler import PHASES, RunScheduler, cells_with_work, memory_plan
from breakthrough.protocol import DEFAULT, Protocol
from breakthrough.runlock import run_lock
from breakthrough.store import RunStore
from breakthrough.tasks.family import family_of, make_grader

__all__ = [
    "CellPlan",
    "ContinueOptions",
    "ContinueReport",
    "check_continue_runs",
    "continue_run",
    "continue_runs",
    "plan_cell",
    "plan_continue_runs",
    "similar_length_chunks",
]


@dataclass
class ContinueOptions:
    """How to continue: the protocol (B, anchors, samples, ...), the --topup rules, the engine,
    and how many cells may be in flight at once (each holds a shared-prefix cache).

    `topup`: the rules asked for (() = none); None, the run's recorded rules (the default,
    "terminal,ambiguous", when it records none). `continue_runs` joins rules asked for to the
    run's recorded ones (`manifest.resolve_topup`); every continuation records what it ran."""

    protocol: Protocol = DEFAULT
    topup: tuple[str, ...] | None = None
    engine: EngineSpec = field(default_factory=lambda: EngineSpec(batch_size=32))
    max_active_cells: int = 3
    lock_wait: float = 0.0  # --wait: seconds to wait for another bt writing the same run
    instrument: bool = False  # `--instrument`: also store the protocol 2.2 per-token signals
    kv_bits: int | None = None  # `--kv-bits`: None = the run's own setting (the model's dtype)
    fill_batch: bool = True  # admit cells while the batch lacks work (scheduler module doc)


SIGNALS_FULL = "full"
SIGNALS_LIGHT = "logprobs+entropy"


def continuation_identity(instrument: bool, kv_bits: int | None = None) -> dict[str, Any]:
    """The manifest's `continuation` identity field: what each continuation stores
    (`signals`: "full" protocol 2.2 signals, or "logprobs+entropy"), the rule that ends a
    plain-family branch at a reasoning EOS (`plain_eos`, pipeline.branches) and, when asked,
    the quantized KV cache the continuations ran with (`kv_bits`: it changes tokens; absent
    for the model's own dtype, so runs continued before it existed keep their identity)."""
    ident: dict[str, Any] = {
        "signals": SIGNALS_FULL if instrument else SIGNALS_LIGHT,
        "plain_eos": "ends-branch",
    }
    if kv_bits:
        ident["kv_bits"] = int(kv_bits)
    return ident


def run_kv_bits(man: dict[str, Any], asked: int | None, run_dir: Path) -> int | None:
    """`--kv-bits` for one run: what was asked, else what the run was continued with (like the
    protocol options); a run continued with another setting is refused, naming the option."""
    had = (man.get("continuation") or {}).get("kv_bits") if man.get("continuation") else None
    if asked is None:
        return had
    if man.get("continuation") and had != asked:
        was = f"--kv-bits {had}" if had else "the model's own KV dtype (no --kv-bits)"
        raise BtError(
            f"{run_dir}: --kv-bits {asked}: the run was continued with {was}; a run "
            "never mixes them (use a new run)"
        )
    return asked


@dataclass
class ContinueReport:
    run_dir: Path
    cells: int = 0
    failed_cells: int = 0
    samples: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PHASES})
    prefill_tokens: int = 0
    trace_tokens: int = 0
    generated_tokens: int = 0
    elapsed_s: float = 0.0
    occupancy: float | None = None  # mean batch occupancy (MlxEngine.occupancy); None: unknown
    attention_fill: float | None = None  # real / padded attention positions (MlxEngine)
    batch_size: int = 0
    nothing_to_do: bool = False  # every sample was stored already: no model was loaded
    memory: str = ""  # what the memory budget admits (contract.EnginePlan.line)
    peak_memory_bytes: int = 0  # MLX's peak allocation over the run (weights included)
    rows_in_flight_max: int = 0  # the most rows the engine had in flight at once
    rows_by_context: dict[int, int] = field(default_factory=dict)  # EngineStats.rows_by_context
    # rows per attention path that served them (EngineStats.rows_by_attention; MlxEngine)
    rows_by_attention: dict[str, int] = field(default_factory=dict)
    topup: TopupChoice | None = None  # the --topup rules the run was continued under
    notes: list[str] = field(default_factory=list)  # the engine's (e.g. endpoints that died)


def continue_run(
    run_dir: Path,
    loaded: Any,
    opts: ContinueOptions,
    *,
    on_start: Callable[[dict, Any], None] | None = None,
    on_sample: Callable[[str, int], None] | None = None,
    tau: float | None = None,
    engine: Engine | None = None,
) -> ContinueReport:
    """All phases for every cell of one run that has a base trace; on `engine` when given (a
    backend bt does not make itself: any `contract.Engine`), else on the one `opts.engine`
    names."""
    tau = opts.protocol.tau if tau is None else tau
    report = ContinueReport(run_dir=run_dir)
    t0 = time.perf_counter()
    # what this continuation adds to the run's identity is committed with its first sample
    # (store.identity_with_first_sample): a crash at start-up leaves the run as it was
    with RunStore(run_dir) as store, store.identity_with_first_sample():
        check_model(store, loaded, run_dir)
        topup = opts.topup
        if topup is None:  # the run's recorded rules (the default when it records none)
            topup = resolve_topup(run_dir, store.manifest(), None).rules
            opts = replace(opts, topup=topup)
        forced = len(close_tokens(loaded)[1])
        cells = []
        for rec in store.base_traces():
            item, prompt = store.cell_prompt(rec["cell_id"])
            cells.append(plan_cell(rec["cell_id"], item, prompt, rec, opts.protocol, forced))
        if engine is None:
            engine = make_engine(
                replace(opts.engine, instrument=opts.instrument, kv_bits=opts.kv_bits), loaded
            )
        # refuses a --memory-gb that cannot hold one row, before anything is written
        memory = memory_plan(engine, cells, opts.protocol)
        if memory is not None:
            report.memory = memory.line()
        ident = continuation_identity(opts.instrument, opts.kv_bits)
        store.check_identity({"continuation": ident})
        check_engine(store, engine)
        store_protocol(store, opts.protocol)
        record_topup(store, topup)
        store.ensure_manifest({"continuation": ident})
        if on_start:
            on_start(
                {
                    "cells": len(cells),
                    "probes": sum(len(c.grid) for c in cells) * opts.protocol.samples,
                },
                engine,
            )
        if not cells:
            return report
        run_scheduled(
            lambda grader: RunScheduler(
                store,
                loaded,
                engine,
                grader,
                cells,
                opts.protocol,
                tau=tau,
                topup=topup,
                on_sample=on_sample,
                max_active_cells=opts.max_active_cells,
                instrument=opts.instrument,
                fill=opts.fill_batch,
            ),
            store,
            run_dir,
            engine,
            cells,
            report,
            opts.engine.batch_size,
            t0,
        )
    report.elapsed_s = time.perf_counter() - t0
    return report


def run_scheduled(
    scheduler: Callable[[Any], RunScheduler],
    store: RunStore,
    run_dir: Path,
    engine: Engine,
    cells: Sequence[Any],
    report: ContinueReport,
    batch_size: int,
    t0: float,
) -> None:
    """Run `scheduler(grader)` over `cells` with the family's grader (closed however it ends),
    then fill `report` from its counts and the engine, and record the run's throughput with its
    batch size and occupancy (what `--dry-run` ETAs read). Serves `bt continue` and its
    `--add-budget` arm (pipeline.budget_arm)."""
    grader = make_grader(family_of([c.item for c in cells]), run_dir)
    try:
        counts = scheduler(grader).run()
    finally:
        getattr(grader, "close", lambda: None)()
    report.cells, report.failed_cells, report.samples = (
        counts.cells,
        counts.failed_cells,
        counts.samples,
    )
    report.trace_tokens = sum(len(c.prompt) + len(c.trace) for c in cells)
    stats = engine.stats()
    report.generated_tokens = stats.generated_tokens
    report.prefill_tokens = stats.prefill_tokens
    report.notes += stats.notes
    report.occupancy = stats.occupancy
    report.attention_fill = stats.attention_fill
    report.peak_memory_bytes = stats.peak_memory_bytes
    report.rows_in_flight_max = stats.rows_in_flight_max
    report.rows_by_context = dict(stats.rows_by_context)
    report.rows_by_attention = dict(stats.rows_by_attention)
    report.batch_size = batch_size
    record_throughput(
        store,
        "continue",
        engine.generated_tokens,
        time.perf_counter() - t0,
        batch_size=batch_size,
        occupancy=report.occupancy,
    )  # --dry-run ETAs


def has_work(store: RunStore, protocol: Protocol, opts: ContinueOptions) -> bool:
    """Whether `bt continue` would generate anything in this run (`cells_with_work`), known
    from the store alone, before any model is loaded (`opts.topup`: the resolved rules)."""
    cells = [plan_cell(rec["cell_id"], {}, [], rec, protocol) for rec in store.base_traces()]
    topup = (
        opts.topup
        if opts.topup is not None
        else resolve_topup(store.run_dir, store.manifest(), None).rules
    )
    return bool(cells_with_work(store, cells, protocol, tau=protocol.tau, topup=topup))


def with_bound(
    on_start: Callable[[dict, Any], None] | None, max_tokens: int
) -> Callable[[dict, Any], None] | None:
    """`on_start` told the run's token bound too (totals["max_tokens"], `dry_run`'s plan): what
    a progress display's ETA counts down."""
    if on_start is None:
        return None
    return lambda totals, engine: on_start({**totals, "max_tokens": max_tokens}, engine)


def check_continue_runs(
    run_dirs: Sequence[Path], settings: dict[str, Any], opts: ContinueOptions
) -> None:
    """Every refusal `bt continue` makes from the stores and the request alone, before it
    takes a lock or loads a model (`preflight_continue`: an empty manifest, a `bt sample` run,
    settings that cannot run or differ from the run's, anchors beyond every base trace, ...;
    then `--kv-bits` and `--instrument` against the run's continuations). Its `--dry-run`
    (`plan_continue_runs`) calls this too, so it refuses what the real command refuses, in
    the same line, instead of printing a plan the command would never run."""
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            preflight_continue(store, settings, opts.engine.backend, opts.topup)
            kv_bits = run_kv_bits(store.manifest(), opts.kv_bits, run_dir)
            store.check_identity({"continuation": continuation_identity(opts.instrument, kv_bits)})


def plan_continue_runs(
    run_dirs: Sequence[Path], settings: dict[str, Any], opts: ContinueOptions
) -> list[RunPlan]:
    """`bt continue --dry-run`: every run checked as `bt continue` checks it
    (`check_continue_runs`), then what each would generate (`dry_run.plan_continue`) at the
    engine's batch size and memory budget. Not checked: what needs the model loaded or a
    server reached (the memory budget's one-row refusal, shown as the plan's memory line), nor
    another bt holding a run (the dry run takes no lock)."""
    check_continue_runs(run_dirs, settings, opts)
    return plan_continue(
        list(run_dirs),
        settings,
        opts.engine.batch_size,
        topup=opts.topup,
        memory_bytes=opts.engine.memory_budget_bytes,
        kv_bits=opts.kv_bits,
    )


def continue_runs(
    run_dirs: Sequence[Path],
    settings: dict[str, Any],
    opts: ContinueOptions,
    *,
    progress: Callable[[Path, dict], None] | None = None,
    drive: Callable[[Callable], ContinueReport] | None = None,
) -> list[ContinueReport]:
    """`bt continue`: check every run, then, run by run, load its model, record its protocol
    with `settings` (B, anchors, samples, ...) and run every phase.

    `progress(run_dir, manifest)` announces a run (its manifest plus "base_traces",
    "topup_choice", the `TopupChoice` it runs: `opts.topup` joined to the run's rules, and
    "large_run", the line of a run past `dry_run.LARGE_RUN_TOKENS`, else None);
    `drive(run)` wraps `run(on_start, on_sample)` (the CLI's progress display). Every run's
    lock is held throughout (`runlock`): a second `bt continue` on one of them is refused,
    naming the holder, or waits `opts.lock_wait` seconds."""
    # every run is checked before any is written or a model loaded: a mistake in the third run
    # must not leave the first two half continued
    check_continue_runs(run_dirs, settings, opts)
    with ExitStack() as locks:
        for run_dir in run_dirs:
            locks.enter_context(run_lock(run_dir, wait=opts.lock_wait))
        return _continue_locked(run_dirs, settings, opts, progress=progress, drive=drive)


def _continue_locked(
    run_dirs: Sequence[Path],
    settings: dict[str, Any],
    opts: ContinueOptions,
    *,
    progress: Callable[[Path, dict], None] | None = None,
    drive: Callable[[Callable], ContinueReport] | None = None,
) -> list[ContinueReport]:
    protocols, choices, bounds = {}, {}, {}
    for run_dir in run_dirs:  # written by continue_run, once the engine can run it
        with RunStore(run_dir, readonly=True) as store:
            protocols[run_dir] = record_continuation_protocol(store, **settings)
            choices[run_dir] = resolve_topup(run_dir, store.manifest(), opts.topup)
            man = {
                **store.manifest(),
                "protocol": protocols[run_dir].to_dict(),
                "base_traces": len(store.existing_keys("base")),
                "topup_choice": choices[run_dir],
            }
        plan = plan_continue(
            [run_dir], settings, opts.engine.batch_size, topup=opts.topup, memory=False
        )[0]
        bounds[run_dir] = plan.max_tokens
        man["large_run"] = large_run_line(plan)
        if progress:
            progress(run_dir, man)
    reports = []
    for run_dir in run_dirs:
        choice = choices[run_dir]
        run_opts = replace(opts, protocol=protocols[run_dir], topup=choice.rules)
        with RunStore(run_dir) as store:
            man = store.manifest()
            if not has_work(store, protocols[run_dir], run_opts):
                if choice.asked is not None and (choice.added or choice.stored is None):
                    record_topup(store, choice.rules)  # named now: later continues run them
                reports.append(ContinueReport(run_dir=run_dir, nothing_to_do=True, topup=choice))
                continue
        loaded = load_model(
            man["model_id"], family=man.get("family"), thinking=protocols[run_dir].thinking
        )
        run_opts = replace(run_opts, kv_bits=run_kv_bits(man, opts.kv_bits, run_dir))

        def run(on_start=None, on_sample=None, run_dir=run_dir, loaded=loaded, run_opts=run_opts):
            return continue_run(
                run_dir,
                loaded,
                run_opts,
                on_sample=on_sample,
                on_start=with_bound(on_start, bounds[run_dir]),
            )

        rep = drive(run) if drive else run()
        rep.topup = choice
        reports.append(rep)
    return reports
