"""`--dry-run` of `bt base` and `bt continue`: what a command would generate, per phase, and
how long that takes on this machine, without loading a model or writing a byte.

Counts come from the run's store (read-only) and the protocol the command would run under;
token counts are upper bounds (every sample running to its budget). The ETA divides them by
the generated tokens/s that an earlier call of the SAME command measured for the same model
at the same batch size on this machine, stored in its run's manifest
(`manifest.record_throughput`). Why not another command's rate: `bt base` (a few 16K
trajectories at batch 8) and `bt continue` (thousands of short branches at batch 32) run the
batch at very different sizes and fullness; a base rate made one continue ETA five times too
long. The record also holds the run's mean batch occupancy (token-weighted rows in flight /
batch size), printed with the ETA, and the ETA's lower end assumes a full batch
(rate / occupancy): the rate scales with the rows in flight, and a run with more cells in
flight fills the batch better than one with few."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breakthrough.classify.panels import probe_panel
from breakthrough.classify.plan import bisection_midpoint
from breakthrough.models.loading import model_alias
from breakthrough.pipeline.base import BaseRequest, select_rows
from breakthrough.pipeline.cells import plan_cell
from breakthrough.pipeline.manifest import (machine_name, record_continuation_protocol,
                                             resolve_topup, run_name)
from breakthrough.protocol import Protocol
from breakthrough.store import STORE_FILE, RunStore
from breakthrough.tasks.cohorts import load_cohort


@dataclass
class PhasePlan:
    """One phase: samples to generate and at most how many tokens they take."""

    phase: str
    samples: int
    max_tokens: int
    note: str = ""


@dataclass
class RunPlan:
    """What one run would generate, and the ETA at the measured rate (None: never measured)."""

    run_dir: Path
    model: str
    phases: list[PhasePlan] = field(default_factory=list)
    tokens_per_s: float | None = None
    rate_source: str = ""
    occupancy: float | None = None  # of the measured run (None: not recorded)
    missing_rate: str = ""  # why there is no rate (no measurement of this command / batch size)
    memory: str = ""  # what --memory-gb admits at the deepest anchor (bt continue)

    @property
    def max_tokens(self) -> int:
        return sum(p.max_tokens for p in self.phases)

    @property
    def eta_s(self) -> float | None:
        return self.max_tokens / self.tokens_per_s if self.tokens_per_s else None

    def lines(self) -> list[str]:
        """What `--dry-run` prints for this run."""
        out = [f"{self.run_dir} ({self.model}):"]
        for p in self.phases:
            out.append(f"  {p.phase:<10} {_n(p.samples, 'sample')}, at most {p.max_tokens:,} "
                       f"tokens" + (f" ({p.note})" if p.note else ""))
        if self.max_tokens == 0:
            out.append("  nothing to do: every sample these phases need is stored")
        elif self.eta_s is None:
            out.append(f"  ETA unknown: {self.missing_rate or 'no measured tokens/s of ' + self.model}"
                       f" (a run stores it when it finishes)")
        else:
            line = (f"  ETA at most {_duration(self.eta_s)} at {self.tokens_per_s:,.1f} "
                    f"tokens/s ({self.rate_source})")
            if self.occupancy:
                full = self.eta_s * min(self.occupancy, 1.0)
                line += (f"; batch occupancy was {self.occupancy:.0%}: {_duration(full)} if the "
                         f"batch stays full")
            out.append(line)
        if self.memory:
            out.append(f"  {self.memory}")
        return out


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def measured_rate(run_dirs: list[Path], model: str, phases: tuple[str, ...],
                  batch_size: int | None = None) -> tuple[float | None, str]:
    """(tokens/s, where it came from): the first of `phases` measured on this machine in the
    given runs (the run itself first) for `model` (at `batch_size` when given); (None, "")
    when none was."""
    for phase in phases:
        got = measured(run_dirs, model, phase, batch_size)
        if got:
            return got[0]["tokens_per_s"], got[1]
    return None, ""


def measured(run_dirs: list[Path], model: str, phase: str,
             batch_size: int | None = None) -> tuple[dict, str] | None:
    """(throughput record, where it came from) of `bt {phase}` for `model` on this machine, at
    `batch_size` when given (records made before batch sizes were recorded do not match one),
    from the first of `run_dirs` that holds one; None when none does."""
    machine = machine_name()
    keys = (phase,) if batch_size is None else (f"{phase}@{int(batch_size)}", phase)
    for run_dir in run_dirs:
        if not (run_dir / STORE_FILE).exists():
            continue
        with RunStore(run_dir, readonly=True) as store:
            man = store.manifest()
        if man.get("model_alias") != model:
            continue
        for key in keys:
            got = (man.get("throughput") or {}).get(key) or {}
            if got.get("machine") != machine or not got.get("tokens_per_s"):
                continue
            if batch_size is not None and got.get("batch_size") != int(batch_size):
                continue
            at = f" at batch {batch_size}" if batch_size is not None else ""
            return got, f"measured by `bt {phase}`{at} in {run_dir.name}"
    return None


def _rate_for(plan: RunPlan, run_dirs: list[Path], phase: str, batch_size: int) -> None:
    """Fill `plan`'s rate from `measured` (same command, model, batch size), or say why not."""
    got = measured(run_dirs, plan.model, phase, batch_size)
    if got:
        plan.tokens_per_s, plan.rate_source = float(got[0]["tokens_per_s"]), got[1]
        plan.occupancy = got[0].get("occupancy")
    else:
        plan.missing_rate = (f"no `bt {phase}` of {plan.model} at batch size {batch_size} has "
                             f"measured its tokens/s on this machine yet")


def _sibling_runs(run_dir: Path) -> list[Path]:
    """The run itself, then the other runs beside it (same model, maybe measured there)."""
    parent = run_dir.parent
    others = sorted(d for d in parent.iterdir() if d != run_dir and (d / STORE_FILE).exists()) \
        if parent.is_dir() else []
    return [run_dir, *others]


def plan_base(req: BaseRequest) -> list[RunPlan]:
    """`bt base --dry-run`: per model, the base traces still missing and their token bound."""
    rows = select_rows(load_cohort(req.cohort), req.problems, req.limit, req.cohort)
    cohort_name = Path(req.cohort).stem
    plans = []
    for name in req.models:
        alias = model_alias(name)
        run_dir = req.runs_dir / run_name(req.run, req.models, cohort_name, alias)
        done: set[str] = set()
        if (run_dir / STORE_FILE).exists():
            with RunStore(run_dir, readonly=True) as store:
                done = {key[0] for key in store.existing_keys("base")}
        todo = [r for r in rows if f"{alias}:{r['id']}" not in done]
        plan = RunPlan(run_dir, alias, [PhasePlan(
            "base", len(todo), len(todo) * req.protocol.base_max_tokens,
            f"{_n(len(rows) - len(todo), 'cell')} already done" if len(todo) < len(rows) else "")])
        _rate_for(plan, _sibling_runs(run_dir), "base", req.engine.batch_size)
        plans.append(plan)
    return plans


def plan_continue(run_dirs: list[Path], settings: dict[str, Any], batch_size: int = 32, *,
                  topup: tuple[str, ...] | None = None, memory_bytes: int | None = None,
                  kv_bits: int | None = None) -> list[RunPlan]:
    """`bt continue --dry-run`: per run, probes, refinement, restarts (and the top-ups, which
    depend on outcomes, under the rules `topup` joined to the run's: `resolve_topup`) under the
    protocol the command would record, with an ETA from the rate `bt continue` measured at
    `batch_size`, and what `--memory-gb` (`memory_bytes`; None: auto) admits at the deepest
    anchor."""
    plans = []
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            protocol = record_continuation_protocol(store, **settings)
            man = store.manifest()
            rules = resolve_topup(run_dir, man, topup).describe()
            base = store.samples_frame(kind="base")
            have = store.existing_keys()
            panel = probe_panel(store.samples_frame(arrays=False, kind="probe"), protocol)
            prompts = {cid: len(store.cell_prompt(cid)[1]) for cid in base["cell_id"]}
        plan = _continue_plan(run_dir, man.get("model_alias", "?"), protocol, base, have,
                              panel, batch_size, rules)
        bits = kv_bits if kv_bits is not None else (man.get("continuation") or {}).get("kv_bits")
        plan.memory = memory_line(man.get("model_id", ""), base, prompts, protocol, batch_size,
                                  memory_bytes, bits)
        plans.append(plan)
    return plans


def memory_line(model_id: str, base: Any, prompts: dict[str, int], p: Protocol, batch_size: int,
                memory_bytes: int | None, kv_bits: int | None = None) -> str:
    """What `--memory-gb` admits for these base traces (issue 28), from the model's config.json
    and the engine's own rule (`engine.memory.admission`), without loading the model."""
    import json

    from breakthrough.engine.memory import SHARED_PREFIXES, admission, budget_without_loading
    from breakthrough.engine.memory import layout_from_config
    from breakthrough.models.loading import local_folder
    from breakthrough.pipeline.scheduler import MemoryPlan

    folder = local_folder(model_id) if model_id else None
    if folder is None or not (folder / "config.json").is_file() or base.empty:
        return "memory: rows per batch are known once the model is on this machine"
    try:
        layout = layout_from_config(json.loads((folder / "config.json").read_text()), kv_bits)
    except (ValueError, OSError) as exc:
        return f"memory: rows per batch unknown ({exc})"
    budget, how = budget_without_loading(folder, memory_bytes)
    cells = [plan_cell(rec["cell_id"], {}, [0] * prompts.get(rec["cell_id"], 0), rec, p)
             for rec in base.to_dict(orient="records")]
    probe = max(c.probe_row(p) for c in cells)
    restart = max(c.restart_row(p) for c in cells)
    rule = dict(batch_size=batch_size, max_prefixes=SHARED_PREFIXES, snapshots=len(p.anchors) + 1)
    rows_p = admission(layout, budget, probe[0], probe[1], **rule)
    rows_r = admission(layout, budget, restart, 0, **rule)
    if min(rows_p.rows, rows_r.rows) < 1:
        need = max(rows_p.need_bytes, rows_r.need_bytes) / 2**30
        return (f"memory ({how}) cannot hold one row of the deepest anchor: {need:.3g} GB "
                f"needed; bt continue will refuse it")
    return MemoryPlan(rows_p.rows, rows_r.rows, probe[0], batch_size, how).line()


def _refinement_left(cell_id: str, grid_done: bool, panel: Any, p: Protocol) -> int:
    """Bisection samples still to come for a cell: none when its probes are all in and show no
    crossing to refine (or refinement is over), else at most the rounds left."""
    rows = panel[panel["cell_id"] == cell_id]
    done = sum(a not in p.anchors for a in rows["anchor"])
    if grid_done:
        tuples = list(rows[["anchor", "n", "k", "n_canon", "k_canon"]].itertuples(index=False,
                                                                                 name=None))
        if bisection_midpoint(tuples, p.tau, p) is None:
            return 0
    return max(p.refinement_rounds - done, 0) * p.samples


def _continue_plan(run_dir: Path, model: str, p: Protocol, base: Any, have: set,
                   panel: Any, batch_size: int, topup: str = "") -> RunPlan:
    probes = refine = restarts = restart_tokens = 0
    probe_tokens = p.budget + p.answer_budget
    for rec in base.to_dict(orient="records"):
        cell = plan_cell(rec["cell_id"], {}, [], rec, p)
        cid = rec["cell_id"]
        missing = sum(1 for a in cell.grid for b in range(p.samples)
                      if (cid, "probe", a, p.budget, b) not in have)
        probes += missing
        refine += _refinement_left(cid, not missing, panel, p) if len(cell.grid) > 1 else 0
        missing = [c for c in p.restart_budgets for b in range(p.restart_samples)
                   if (cid, "restart", -1, c, b) not in have]
        restarts += len(missing)
        restart_tokens += sum(c + p.answer_budget for c in missing)
    plan = RunPlan(run_dir, model, [
        PhasePlan("probes", probes, probes * probe_tokens),
        PhasePlan("refinement", refine, refine * probe_tokens,
                  f"at most {p.refinement_rounds} bisection rounds per cell"),
        PhasePlan("restarts", restarts, restart_tokens,
                  "instant cells get only the scratch budget" if restarts else ""),
        PhasePlan("topups", 0, 0, (f"--topup {topup}: " if topup else "")
                  + "decided by the outcomes above; not counted"),
    ])
    _rate_for(plan, _sibling_runs(run_dir), "continue", batch_size)
    return plan
