"""`bt continue RUN --add-budget B2`: a second probe arm on the same base traces (protocol 3.6).

The run's probes stay at its continuation budget B (never changed: `--budget` against a run
made under another B is refused); this adds probes at B2 for the A2 targets
(`classify.arms.arm_targets`: trajectories with a non-instant T_F event, every probed anchor
up to the stability anchor), m branches each with the identical branch seeds (a sample's seed
does not depend on B). Each probe is stored with its own budget, so the primary arm's panels
and labels are untouched, and the arm is recorded in the run's manifest (`probe_arms`) beside
the protocol. No restart and no top-up runs; a rerun completes the arm's missing samples only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from breakthrough.classify.arms import RULE_TEXT, arm_targets, target_counts
from breakthrough.classify.panels import probe_panel
from breakthrough.engine import make_engine
from breakthrough.engine.contract import EngineSpec
from breakthrough.errors import BtError
from breakthrough.models.loading import load_model
from breakthrough.pipeline.branches import Branch, check_budget, close_tokens
from breakthrough.pipeline.cell_loop import (
    SIGNALS_FULL,
    ContinueReport,
    run_kv_bits,
    run_scheduled,
    with_bound,
)
from breakthrough.pipeline.cells import CellPlan, plan_cell
from breakthrough.pipeline.dry_run import (
    PhasePlan,
    RunPlan,
    large_run_line,
    plural,
    rate_for,
    sibling_runs,
)
from breakthrough.pipeline.manifest import check_engine, check_model, preflight_continue
from breakthrough.pipeline.scheduler import CellState, RunScheduler, branches_for, memory_plan
from breakthrough.protocol import Protocol
from breakthrough.runlock import held_by, run_lock
from breakthrough.store import RunStore

ARMS_KEY = "probe_arms"


@dataclass(frozen=True)
class ArmAsked:
    """The run settings typed beside `--add-budget`: the protocol options (`bt continue`'s
    `settings`, None where not given), `--kv-bits` and `--instrument`. The arm runs under the
    run's own, so each is only checked: one that differs from what the run was continued
    under is refused (`check_arm_asked`), never silently ignored."""

    settings: dict[str, Any] = field(default_factory=dict)
    kv_bits: int | None = None
    instrument: bool = False


def check_arm_asked(store: RunStore, asked: ArmAsked | None, backend: str | None) -> None:
    """`preflight_continue` with the protocol options typed (a `--budget` other than the
    run's B is refused as on any continued run), then `--kv-bits` (`run_kv_bits`: the arm
    runs on the KV cache the run's continuations used) and `--instrument` (the arm stores the
    signals they stored)."""
    asked = asked or ArmAsked()
    if "model_id" in store.manifest():  # else preflight_continue names the damage
        refuse_never_continued(store)
    preflight_continue(store, asked.settings, backend)
    man = store.manifest()
    run_kv_bits(man, asked.kv_bits, store.run_dir)
    signals = (man.get("continuation") or {}).get("signals")
    if asked.instrument and signals and signals != SIGNALS_FULL:
        raise BtError(
            f"{store.run_dir}: --instrument: the run was continued without it (its "
            f"continuations store {signals}); an arm stores what they store: leave "
            f"--instrument out"
        )


def refuse_never_continued(store: RunStore) -> None:
    """An arm re-probes the targets of the run's probes, so a run without one is refused first,
    naming that (and a `bt continue` that holds the run now, whose probes are on their way):
    the checks after it would read the run's protocol, which is `bt base`'s default anchor
    grid until a continuation records its own, and refuse anchors the user never typed."""
    if store.run_kind() != "base":
        return  # a `bt sample` run: preflight_continue says what it is
    if store.has_probes():
        return
    holder = held_by(store.run_dir)
    now = f"; another bt is writing it now ({holder}): let it finish" if holder else ""
    raise BtError(
        f"{store.run_dir}: --add-budget: the run was never continued (no probes yet){now}; "
        f"run `bt continue {store.run_dir}` first (the arm re-probes its targets)"
    )


def arm_protocol(store: RunStore, budget: int) -> Protocol:
    """The run's protocol with B = `budget` (what the arm's branches run under), refused
    before anything is written: a budget equal to the run's B, one that cannot run, a run
    without primary-arm probes."""
    protocol = store.protocol()
    if budget == protocol.budget:
        raise BtError(
            f"{store.run_dir}: --add-budget {budget} is the run's own B; the arm must "
            f"differ (the run's probes are at B={protocol.budget})"
        )
    arm = protocol.with_overrides(budget=int(budget))
    arm.validate({"budget": "--add-budget"})
    if arm.budget + arm.answer_budget >= arm.total_cap:
        raise BtError(
            f"--add-budget {budget}: with the answer reserve {arm.answer_budget} it "
            f"leaves no room for a prefix within the total cap {arm.total_cap}"
        )
    if probe_panel(store.samples_frame(arrays=False, kind="probe"), protocol).empty:
        raise BtError(
            f"{store.run_dir}: no probes at B={protocol.budget} yet: run "
            f"`bt continue {store.run_dir}` first (the arm re-probes its targets)"
        )
    return arm


@dataclass(frozen=True)
class ArmWork:
    """What an arm at one budget still has to do in one run, from its store alone (no model):
    the one source of the arm's work for its `--dry-run` (`plan_add_budget`), the "nothing to
    do" check made before a model is loaded (`add_budget_runs`) and the arm itself
    (`add_budget_run`), so the three never count differently.

    `cells` are the target trajectories with a base trace, each with the grid of its target
    anchors that leave room for B2 (+ the forced close) + the answer reserve within the total
    cap (`branches.check_budget`, the rule every probe obeys); `unfit` the target anchors that
    do not, by cell; `missing` the probe samples of `cells` not yet stored (what the arm would
    generate); `why`, when `missing` is 0, why, and what would change it."""

    run_dir: Path
    arm: Protocol
    targets: dict[str, list[int]]  # A2 target trajectory -> anchors (`classify.arms.arm_targets`)
    cells: list[CellPlan]
    unfit: dict[str, list[int]]
    missing: int
    why: str = ""
    fits_all: int | None = None  # the largest B2 with room at every target anchor (None: none)

    def unfit_notes(self) -> list[str]:
        """One note per cell with target anchors that leave no room for B2."""
        return [
            f"{cell}: anchors {anchors} leave no room for B={self.arm.budget} + the answer reserve"
            for cell, anchors in sorted(self.unfit.items())
        ]


def arm_work(store: RunStore, budget: int, forced: int = 0) -> ArmWork:
    """The arm's remaining work in `store` (refused as `arm_protocol` refuses), an `ArmWork`.
    `forced`: the model's forced-close tokens, which `check_budget` also needs room for; before
    a model is loaded (dry run, the "nothing to do" check) they are not known and count 0, so
    those see at most the anchors the arm then runs (a few tokens at the total cap's edge)."""
    primary = store.protocol()
    arm = arm_protocol(store, budget)
    panel = probe_panel(store.samples_frame(arrays=False, kind="probe"), primary)
    targets = arm_targets(panel, primary.tau, primary)
    have = store.existing_keys("probe")
    cells: list[CellPlan] = []
    unfit: dict[str, list[int]] = {}
    based = set()
    rooms = []  # per target anchor: the largest B2 check_budget admits there
    if targets:
        for rec in store.base_traces():
            want = targets.get(rec["cell_id"])
            if not want:
                continue
            based.add(rec["cell_id"])
            item, prompt = store.cell_prompt(rec["cell_id"])
            plan = plan_cell(rec["cell_id"], item, prompt, rec, arm, forced)
            rooms += [
                arm.total_cap - plan.cut(a) - forced - arm.answer_budget
                for a in want
                if a <= plan.reasoning_tokens
            ]
            fits = [
                a
                for a in want
                if a <= plan.reasoning_tokens and check_budget(plan.cut(a), arm.budget, arm, forced)
            ]
            if len(fits) < len(want):
                unfit[rec["cell_id"]] = sorted(set(want) - set(fits))
            if fits:
                cells.append(replace(plan, grid=fits))
    missing = sum(
        (c.cell_id, "probe", a, arm.budget, b) not in have
        for c in cells
        for a in c.grid
        for b in range(arm.samples)
    )
    fits_all = min(rooms) if rooms and min(rooms) >= 1 else None
    work = ArmWork(Path(store.run_dir), arm, targets, cells, unfit, missing, fits_all=fits_all)
    if missing:
        return work
    return replace(work, why=_why_nothing(work, primary, panel, have, based))


def _why_nothing(work: ArmWork, primary: Protocol, panel: Any, have: set, based: set[str]) -> str:
    """Why an arm has nothing to generate, and what would change it."""
    arm, targets = work.arm, work.targets
    if not targets:
        counts = target_counts(panel, primary.tau, primary)
        return (
            f"no trajectory is an A2 target ({RULE_TEXT}): of {counts['trajectories']} probed "
            f"at B={primary.budget}, {counts['no_event']} never reach p >= τ={primary.tau:g} "
            f"stably (no T_F event) and {counts['instant']} have an instant one; the arm needs "
            f"cells whose prefix becomes enough later in the trace (more problems, a model "
            f"that solves them, or larger --anchors)"
        )
    shape = (
        f"{len(targets)} target trajectories, {sum(map(len, targets.values()))} anchors x "
        f"{arm.samples} branches at B={arm.budget}"
    )
    if all(
        (cell, "probe", a, arm.budget, b) in have
        for cell, anchors in targets.items()
        for a in anchors
        for b in range(arm.samples)
    ):
        return f"every probe of the arm is stored ({shape})"
    parts = []
    if work.cells:
        parts.append(f"every probe of the arm that can run is stored ({shape})")
    if work.unfit:
        n = sum(map(len, work.unfit.values()))
        parts.append(
            f"{n} target anchor{'s' if n != 1 else ''} of {len(work.unfit)} "
            f"trajector{'y' if len(work.unfit) == 1 else 'ies'} "
            f"leave{'s' if n == 1 else ''} no room for "
            f"B={arm.budget} + the answer reserve {arm.answer_budget} within the total cap "
            f"{arm.total_cap}"
            + (
                f" (--add-budget {work.fits_all} or less fits every target anchor)"
                if work.fits_all
                else ""
            )
        )
    if len(based) < len(targets):
        n = len(targets) - len(based)
        parts.append(
            f"{n} target trajector{'y has' if n == 1 else 'ies have'} no base trace in the run"
        )
    return "; ".join(parts)


def recorded_arms(manifest: dict) -> list[dict]:
    """The run's probe arms as its manifest records them (the primary arm first)."""
    return list(manifest.get(ARMS_KEY) or [])


def _record_arm(
    store: RunStore, primary: Protocol, arm: Protocol, targets: dict[str, list[int]]
) -> None:
    arms = [a for a in recorded_arms(store.manifest()) if a.get("budget") != arm.budget]
    if not any(a.get("role") == "primary" for a in arms):
        arms.insert(0, {"budget": primary.budget, "role": "primary", "samples": primary.samples})
    arms.append(
        {
            "budget": arm.budget,
            "role": "A2 continuation-budget arm (protocol 3.6)",
            "samples": arm.samples,
            "seeds": "identical branch seeds (probe_seed)",
            "rule": RULE_TEXT,
            "targets": len(targets),
            "anchors": sum(len(v) for v in targets.values()),
        }
    )
    store.update_manifest({ARMS_KEY: arms})


class ArmScheduler(RunScheduler):
    """The run's scheduler with one step per cell: its arm anchors at the arm's B."""

    def program(self, cell: CellState) -> Iterator[tuple[str, list[Branch]]]:
        p = self.protocol
        yield (
            "probes",
            [
                b
                for a in cell.plan.grid
                for b in branches_for(cell, p, "probe", a, range(p.samples))
            ],
        )


def add_budget_run(
    run_dir: Path,
    loaded: Any,
    budget: int,
    engine_spec: EngineSpec,
    *,
    on_start: Callable[[dict, Any], None] | None = None,
    on_sample: Callable[[str, int], None] | None = None,
    max_active_cells: int = 3,
) -> ContinueReport:
    """Probe one run's A2 targets at B = `budget` (see module doc)."""
    report = ContinueReport(run_dir=run_dir)
    t0 = time.perf_counter()
    # the arm's record and engine are committed with its first probe (a crash at start-up
    # leaves the run as it was: store.identity_with_first_sample)
    with RunStore(run_dir) as store, store.identity_with_first_sample():
        check_model(store, loaded, run_dir)
        primary = store.protocol()
        work = arm_work(store, budget, len(close_tokens(loaded)[1]))
        arm, cells = work.arm, work.cells
        report.notes.extend(work.unfit_notes())
        # the arm's probes store what the run's other continuations store (cell_loop)
        continued = store.manifest().get("continuation") or {}
        instrument = continued.get("signals") == SIGNALS_FULL
        engine = make_engine(
            replace(engine_spec, instrument=instrument, kv_bits=continued.get("kv_bits")), loaded
        )
        memory = memory_plan(engine, cells, arm)  # refuses a budget that cannot hold one row
        if memory is not None:
            report.notes.append(memory.line())
        check_engine(store, engine)
        _record_arm(store, primary, arm, work.targets)
        if on_start:
            on_start(
                {"cells": len(cells), "probes": sum(len(c.grid) for c in cells) * arm.samples},
                engine,
            )
        if not cells:
            return report
        run_scheduled(
            lambda grader: ArmScheduler(
                store,
                loaded,
                engine,
                grader,
                cells,
                arm,
                tau=arm.tau,
                topup=(),
                on_sample=on_sample,
                max_active_cells=max_active_cells,
                instrument=instrument,
            ),
            store,
            run_dir,
            engine,
            cells,
            report,
            engine_spec.batch_size,
            t0,
        )
    report.elapsed_s = time.perf_counter() - t0
    return report


def add_budget_runs(
    run_dirs: Sequence[Path],
    budget: int,
    engine_spec: EngineSpec,
    *,
    progress: Callable[[Path, dict], None] | None = None,
    drive: Callable[[Callable], ContinueReport] | None = None,
    lock_wait: float = 0.0,
    asked: ArmAsked | None = None,
) -> list[ContinueReport]:
    """`bt continue RUN... --add-budget B2`: check every run first (nothing is written or
    loaded for a run that would be refused, nor for settings typed beside it that differ from
    the run's: `check_arm_asked`), then run each run's arm, holding every run's lock
    as `bt continue` does (`runlock`; `lock_wait` seconds to wait for a busy one).
    `progress(run_dir, manifest)` gets "large_run" as `bt continue`'s does."""
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            check_arm_asked(store, asked, engine_spec.backend)
            arm_protocol(store, budget)
    with ExitStack() as locks:
        for run_dir in run_dirs:
            locks.enter_context(run_lock(run_dir, wait=lock_wait))
        return _add_budget_locked(run_dirs, budget, engine_spec, progress=progress, drive=drive)


def _add_budget_locked(
    run_dirs: Sequence[Path],
    budget: int,
    engine_spec: EngineSpec,
    *,
    progress: Callable[[Path, dict], None] | None,
    drive: Callable[[Callable], ContinueReport] | None,
) -> list[ContinueReport]:
    reports = []
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:  # what the arm needs now, under the lock
            now = arm_work(store, budget)
            man = store.manifest()
            base_traces = len(store.existing_keys("base"))
        if not now.missing:  # said before any model is loaded, nothing written
            reports.append(ContinueReport(run_dir=run_dir, nothing_to_do=True, notes=[now.why]))
            continue
        plan = arm_plan(now, man.get("model_alias", "?"), engine_spec.batch_size)
        man = {
            **man,
            "protocol": {**man["protocol"], "budget": int(budget)},
            "base_traces": base_traces,
            "large_run": large_run_line(plan),
        }
        if progress:
            progress(run_dir, man)
        loaded = load_model(
            man["model_id"],
            family=man.get("family"),
            thinking=str(man["protocol"].get("thinking", "")),
        )

        def run(
            on_start=None, on_sample=None, run_dir=run_dir, loaded=loaded, bound=plan.max_tokens
        ):
            return add_budget_run(
                run_dir,
                loaded,
                budget,
                engine_spec,
                on_sample=on_sample,
                on_start=with_bound(on_start, bound),
            )

        reports.append(drive(run) if drive else run())
    return reports


def plan_add_budget(
    run_dirs: list[Path],
    budget: int,
    batch_size: int = 32,
    backend: str | None = None,
    asked: ArmAsked | None = None,
) -> list[RunPlan]:
    """`bt continue --add-budget B2 --dry-run`: per run, the arm's probes still missing
    (`arm_work`: its targets' anchors that leave room for B2 + the answer reserve, m branches
    each) and their token bound, refused as the arm itself would be
    (`budget_arm.arm_protocol`), with an ETA from `bt continue`'s rate (the arm runs on its
    scheduler), or, when there is nothing to do, why."""
    plans = []
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            check_arm_asked(store, asked, backend)
            work = arm_work(store, budget)
            model = store.manifest().get("model_alias", "?")
        plans.append(arm_plan(work, model, batch_size))
    return plans


def arm_plan(work: ArmWork, model: str, batch_size: int) -> RunPlan:
    """The `RunPlan` of an arm's work: its samples and token bound (the `--dry-run` lines, the
    large-run line), its ETA from `bt continue`'s rate, and, with nothing to do, why."""
    arm, n = work.arm, len(work.targets)
    plan = RunPlan(
        work.run_dir,
        model,
        [
            PhasePlan(
                f"arm B={arm.budget}",
                work.missing,
                work.missing * (arm.budget + arm.answer_budget),
                f"{n:,} target trajector{'y' if n == 1 else 'ies'}, "
                f"{plural(arm.samples, 'branch')} per anchor",
            )
        ],
        nothing_why=work.why,
    )
    if work.missing:
        rate_for(plan, sibling_runs(work.run_dir), "continue", batch_size, fallback="base")
    return plan
