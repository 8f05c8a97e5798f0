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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from breakthrough.classify.arms import RULE_TEXT, arm_targets, target_counts
from breakthrough.classify.panels import probe_panel
from breakthrough.engine import make_engine
from breakthrough.engine.contract import EngineSpec
from breakthrough.errors import BtError
from breakthrough.models.loading import load_model
from breakthrough.pipeline.branches import Branch, check_budget, close_tokens
from breakthrough.pipeline.cell_loop import SIGNALS_FULL, ContinueReport, run_scheduled, with_bound
from breakthrough.pipeline.cells import plan_cell
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
from breakthrough.runlock import run_lock
from breakthrough.store import RunStore

ARMS_KEY = "probe_arms"


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
    the probe samples it needs that are not stored, and, when none, why."""

    run_dir: Path
    targets: int  # trajectories re-probed
    missing: int  # the arm's probe samples not yet stored
    why: str = ""  # when `missing` is 0: why, and what would change it


def arm_work(store: RunStore, budget: int) -> ArmWork:
    """The arm's remaining work in `store` (refused as `arm_protocol` refuses). Why: a rerun
    with nothing left, or a run with no target, says so before a model is loaded."""
    primary = store.protocol()
    arm = arm_protocol(store, budget)
    panel = probe_panel(store.samples_frame(arrays=False, kind="probe"), primary)
    targets = arm_targets(panel, primary.tau, primary)
    have = store.existing_keys("probe")
    missing = sum(
        (cid, "probe", a, arm.budget, b) not in have
        for cid, anchors in targets.items()
        for a in anchors
        for b in range(arm.samples)
    )
    why = ""
    if not targets:
        n = target_counts(panel, primary.tau, primary)
        why = (
            f"no trajectory is an A2 target ({RULE_TEXT}): of {n['trajectories']} probed at "
            f"B={primary.budget}, {n['no_event']} never reach p >= τ={primary.tau:g} stably "
            f"(no T_F event) and {n['instant']} have an instant one; the arm needs cells "
            f"whose prefix becomes enough later in the trace (more problems, a model that "
            f"solves them, or larger --anchors)"
        )
    elif not missing:
        why = (
            f"every probe of the arm is stored ({len(targets)} target trajectories, "
            f"{sum(map(len, targets.values()))} anchors x {arm.samples} branches at "
            f"B={arm.budget})"
        )
    return ArmWork(Path(store.run_dir), len(targets), missing, why)


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
    with RunStore(run_dir) as store:
        check_model(store, loaded, run_dir)
        primary = store.protocol()
        arm = arm_protocol(store, budget)
        targets = arm_targets(
            probe_panel(store.samples_frame(arrays=False, kind="probe"), primary),
            primary.tau,
            primary,
        )
        forced = len(close_tokens(loaded)[1])
        base = store.samples_frame(kind="base")
        cells = []
        for rec in base.to_dict(orient="records"):
            want = targets.get(rec["cell_id"])
            if not want:
                continue
            item, prompt = store.cell_prompt(rec["cell_id"])
            plan = plan_cell(rec["cell_id"], item, prompt, rec, arm, forced)
            fits = [
                a
                for a in want
                if a <= plan.reasoning_tokens and check_budget(plan.cut(a), arm.budget, arm, forced)
            ]
            if len(fits) < len(want):
                report.notes.append(
                    f"{rec['cell_id']}: anchors {sorted(set(want) - set(fits))} "
                    f"leave no room for B={arm.budget} + the answer reserve"
                )
            if fits:
                cells.append(replace(plan, grid=fits))
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
        _record_arm(store, primary, arm, targets)
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
) -> list[ContinueReport]:
    """`bt continue RUN... --add-budget B2`: check every run first (nothing is written or
    loaded for a run that would be refused), then run each run's arm, holding every run's lock
    as `bt continue` does (`runlock`; `lock_wait` seconds to wait for a busy one).
    `progress(run_dir, manifest)` gets "large_run" as `bt continue`'s does."""
    work = {}
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            preflight_continue(store, {}, engine_spec.backend)
            work[run_dir] = arm_work(store, budget)
    with ExitStack() as locks:
        for run_dir in run_dirs:
            locks.enter_context(run_lock(run_dir, wait=lock_wait))
        return _add_budget_locked(
            run_dirs, budget, engine_spec, progress=progress, drive=drive, work=work
        )


def _add_budget_locked(
    run_dirs: Sequence[Path],
    budget: int,
    engine_spec: EngineSpec,
    *,
    progress: Callable[[Path, dict], None] | None,
    drive: Callable[[Callable], ContinueReport] | None,
    work: dict[Path, ArmWork],
) -> list[ContinueReport]:
    reports = []
    for run_dir in run_dirs:
        if not work[run_dir].missing:  # said before any model is loaded, nothing written
            reports.append(
                ContinueReport(run_dir=run_dir, nothing_to_do=True, notes=[work[run_dir].why])
            )
            continue
        plan = plan_add_budget([run_dir], budget, engine_spec.batch_size, engine_spec.backend)[0]
        with RunStore(run_dir, readonly=True) as store:
            man = store.manifest()
            man = {
                **man,
                "protocol": {**man["protocol"], "budget": int(budget)},
                "base_traces": len(store.existing_keys("base")),
                "large_run": large_run_line(plan),
            }
        if progress:
            progress(run_dir, man)
        loaded = load_model(man["model_id"], family=man.get("family"))

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
    run_dirs: list[Path], budget: int, batch_size: int = 32, backend: str | None = None
) -> list[RunPlan]:
    """`bt continue --add-budget B2 --dry-run`: per run, the arm's probes still missing (its
    targets' anchors that leave room for B2 + the answer reserve, m branches each) and their
    token bound, refused as the arm itself would be (`budget_arm.arm_protocol`), with an ETA
    from `bt continue`'s rate (the arm runs on its scheduler)."""
    plans = []
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            preflight_continue(store, {}, backend)
            primary = store.protocol()
            arm = arm_protocol(store, budget)
            targets = arm_targets(
                probe_panel(store.samples_frame(arrays=False, kind="probe"), primary),
                primary.tau,
                primary,
            )
            base = store.samples_frame(kind="base")
            have = store.existing_keys()
            model = store.manifest().get("model_alias", "?")
        samples = 0
        for rec in base.to_dict(orient="records"):
            cid = rec["cell_id"]
            cell = plan_cell(cid, {}, [], rec, arm)
            fits = [
                a
                for a in targets.get(cid, ())
                if a <= cell.reasoning_tokens and check_budget(cell.cut(a), arm.budget, arm)
            ]
            samples += sum(
                1
                for a in fits
                for b in range(arm.samples)
                if (cid, "probe", a, arm.budget, b) not in have
            )
        plan = RunPlan(
            run_dir,
            model,
            [
                PhasePlan(
                    f"arm B={budget}",
                    samples,
                    samples * (arm.budget + arm.answer_budget),
                    f"{len(targets):,} target trajector{'y' if len(targets) == 1 else 'ies'}, "
                    f"{plural(arm.samples, 'branch')} per anchor",
                )
            ],
        )
        rate_for(plan, sibling_runs(run_dir), "continue", batch_size, fallback="base")
        plans.append(plan)
    return plans
