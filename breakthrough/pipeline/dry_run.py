"""`--dry-run` of `bt base`, `bt continue` (and its `--add-budget` arm), `bt sample` and
`bt cohorts screen`: what a command would generate, per phase, and how long that takes on this
machine, without loading a model or writing a byte; and the one line a command about to
generate more than `LARGE_RUN_TOKENS` says before it starts (`large_run_line`).

`bt continue --dry-run` is `cell_loop.plan_continue_runs`: the run checked first by the checks
`bt continue` itself runs before it locks a run or loads a model (`cell_loop.check_continue_runs`),
so it never prints a plan for a run the real command refuses; then `plan_continue` here.

Counts come from the run's store (read-only) and the protocol the command would run under;
token counts are upper bounds (every sample running to its budget). The ETA divides them by
the generated tokens/s an earlier call measured for the same model on this machine, stored in
its run's manifest (`manifest.record_throughput`): first the same command at the same batch
size; else (a model's first `bt continue`, a first `bt sample`) the rate `bt base` measured,
and the ETA says which it used. Why the command matters: `bt base` (a few long trajectories at
batch 8) and `bt continue` (thousands of short branches at batch 32) run the batch at very
different sizes and fullness.

The rate scales with the rows in flight (a decode step costs about the same for 2 rows as for
8). The record holds the measured run's mean batch occupancy; a plan with fewer samples than
the rows the measurement had in flight gets the rate scaled down to its rows, so the ETA stays
an upper bound. An ETA that assumes a fuller batch than measured is printed only as a labelled
optimistic bound, never as the estimate. Start-up and model loading are not counted."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breakthrough.classify.panels import Outcome, PanelRow, probe_rows
from breakthrough.classify.plan import bisection_midpoint
from breakthrough.errors import BtError
from breakthrough.pipeline.cells import plan_cell
from breakthrough.pipeline.manifest import machine_name, record_continuation_protocol, resolve_topup
from breakthrough.protocol import Protocol
from breakthrough.store import RunStore, is_run_dir


@dataclass
class PhasePlan:
    """One phase: samples to generate and at most how many tokens they take."""

    phase: str
    samples: int
    max_tokens: int
    note: str = ""


LARGE_RUN_TOKENS = 1_000_000  # a command about to generate more says so before it starts
COMMANDS = {"attempt": "sample"}  # the command that records a phase's rate, where not its name
GENERATION_ONLY = "generation only: start-up and model loading come on top"


def command_of(phase: str) -> str:
    """`bt NAME` of the command whose runs record `phase`'s throughput."""
    return f"`bt {COMMANDS.get(phase, phase)}`"


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
    rate_note: str = ""  # how the rate was carried over (another command's, scaled to rows)
    memory: str = ""  # what --memory-gb admits at the deepest anchor (bt continue)
    nothing_why: str = ""  # with nothing to do: why (default: every sample needed is stored)

    @property
    def max_tokens(self) -> int:
        return sum(p.max_tokens for p in self.phases)

    @property
    def samples(self) -> int:
        return sum(p.samples for p in self.phases)

    @property
    def eta_s(self) -> float | None:
        return self.max_tokens / self.tokens_per_s if self.tokens_per_s else None

    def eta_text(self) -> str:
        """`ETA at most ...` at the rate and where it came from, or why it is unknown."""
        if self.eta_s is None:
            return (
                f"ETA unknown: {self.missing_rate or 'no measured tokens/s of ' + self.model}"
                f" (a run stores it when it finishes)"
            )
        note = f"; {self.rate_note}" if self.rate_note else ""
        return (
            f"ETA at most {_duration(self.eta_s)} at {self.tokens_per_s:,.1f} tokens/s "
            f"({self.rate_source}{note})"
        )

    def lines(self) -> list[str]:
        """What `--dry-run` prints for this run."""
        out = [f"{self.run_dir} ({self.model}):"]
        for p in self.phases:
            out.append(
                f"  {p.phase:<10} {plural(p.samples, 'sample')}, at most {p.max_tokens:,} "
                f"tokens" + (f" ({p.note})" if p.note else "")
            )
        if self.max_tokens == 0:
            why = self.nothing_why or "every sample these phases need is stored"
            out.append(f"  nothing to do: {why}")
            return out + ([f"  {self.memory}"] if self.memory else [])
        out.append(f"  {self.eta_text()}")
        if self.eta_s is not None:
            out.append(f"  ({GENERATION_ONLY})")
        if self.eta_s is not None and self.occupancy and self.occupancy < 0.9:
            full = self.eta_s * self.occupancy
            out.append(
                f"  optimistic bound, not the estimate: {_duration(full)} if the batch "
                f"stayed full (the measured run filled {self.occupancy:.0%} of it)"
            )
        if self.memory:
            out.append(f"  {self.memory}")
        return out


def large_run_line(plan: RunPlan) -> str | None:
    """The line a command says before generating more than `LARGE_RUN_TOKENS` tokens for one
    run (its token bound and ETA); None for a smaller run."""
    if plan.max_tokens <= LARGE_RUN_TOKENS:
        return None
    return (
        f"{plan.run_dir.name}: a large run: at most {plan.max_tokens:,} tokens "
        f"({plural(plan.samples, 'sample')}); {plan.eta_text()}; --dry-run shows the plan"
    )


def plural(count: int, noun: str) -> str:
    """ "1 sample", "2 samples", "2 branches"."""
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith(("ch", "s")) else "s")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def measured_rate(
    run_dirs: list[Path], model: str, phases: tuple[str, ...], batch_size: int | None = None
) -> tuple[float | None, str]:
    """(tokens/s, where it came from): the first of `phases` measured on this machine in the
    given runs (the run itself first) for `model` (at `batch_size` when given); (None, "")
    when none was."""
    for phase in phases:
        got = measured(run_dirs, model, phase, batch_size)
        if got:
            return got[0]["tokens_per_s"], got[1]
    return None, ""


def measured(
    run_dirs: list[Path], model: str, phase: str, batch_size: int | None = None
) -> tuple[dict, str] | None:
    """(throughput record, where it came from) of `bt {phase}` for `model` on this machine, at
    `batch_size` when given (records made before batch sizes were recorded do not match one),
    from the first of `run_dirs` that holds one; None when none does."""
    machine = machine_name()
    keys = (phase,) if batch_size is None else (f"{phase}@{int(batch_size)}", phase)
    for run_dir in run_dirs:
        if not is_run_dir(run_dir):
            continue
        try:
            with RunStore(run_dir, readonly=True) as store:
                man = store.manifest()
        except (BtError, sqlite3.Error):  # a damaged or foreign run holds no rate to use
            continue
        if man.get("model_alias") != model:
            continue
        for key in keys:
            got = (man.get("throughput") or {}).get(key) or {}
            if got.get("machine") != machine or not got.get("tokens_per_s"):
                continue
            if batch_size is not None and got.get("batch_size") != int(batch_size):
                continue
            at = f" at batch {batch_size}" if batch_size is not None else ""
            return got, f"measured by {command_of(phase)}{at} in {run_dir.name}"
    return None


def rate_for(
    plan: RunPlan, run_dirs: list[Path], phase: str, batch_size: int, fallback: str | None = None
) -> None:
    """Fill `plan`'s rate from `measured`: the same command, model and batch size, else (with
    `fallback`) the rate `bt {fallback}` measured for the model, said so; scaled down to the
    rows the plan can keep in flight (`_scale_to_rows`). Without either, say why not."""
    got = measured(run_dirs, plan.model, phase, batch_size)
    if got is None and fallback:
        got = measured(run_dirs, plan.model, fallback)
        if got is not None:
            plan.rate_note = (
                f"no {command_of(phase)} of {plan.model} at batch size "
                f"{batch_size} has measured its own yet"
            )
    if got is None:
        plan.missing_rate = (
            f"no {command_of(phase)} of {plan.model} at batch size "
            f"{batch_size} has measured its tokens/s on this machine yet"
        )
        return
    rec, plan.rate_source = got
    plan.tokens_per_s = float(rec["tokens_per_s"])
    plan.occupancy = None if plan.rate_note else rec.get("occupancy")  # another command's batch
    _scale_to_rows(plan, rec, min(batch_size, plan.samples))


def _scale_to_rows(plan: RunPlan, rec: dict, rows: int) -> None:
    """A measurement that had more rows in flight (occupancy x batch size) than the plan can
    fill (`rows`) made more tokens per step than the plan will: scale its rate down to `rows`
    (the occupancy bound then no longer applies: the plan's batch is as full as it gets)."""
    if not rec.get("occupancy") or not rec.get("batch_size") or rows < 1:
        return
    had = float(rec["occupancy"]) * int(rec["batch_size"])
    if rows < had - 1e-9:
        plan.tokens_per_s = float(plan.tokens_per_s or 0) * rows / had
        plan.occupancy = None
        plan.rate_note += ("; " if plan.rate_note else "") + (
            f"scaled to the {plural(rows, 'row')} this plan keeps in flight from the {had:.1f} "
            f"measured"
        )


def sibling_runs(run_dir: Path) -> list[Path]:
    """The run itself, then the other runs beside it (same model, maybe measured there)."""
    parent = run_dir.parent
    others = (
        sorted(d for d in parent.iterdir() if d != run_dir and is_run_dir(d))
        if parent.is_dir()
        else []
    )
    return [run_dir, *others]


def plan_continue(
    run_dirs: list[Path],
    settings: dict[str, Any],
    batch_size: int = 32,
    *,
    topup: tuple[str, ...] | None = None,
    memory_bytes: int | None = None,
    kv_bits: int | None = None,
    memory: bool = True,
) -> list[RunPlan]:
    """`bt continue --dry-run`: per run, probes, refinement, restarts (and the top-ups, which
    depend on outcomes, under the rules `topup` joined to the run's: `resolve_topup`) under the
    protocol the command would record, with an ETA from the rate `bt continue` measured at
    `batch_size`, and what `--memory-gb` (`memory_bytes`; None: auto) admits at the deepest
    anchor (with `memory`)."""
    plans = []
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            protocol = record_continuation_protocol(store, **settings)
            man = store.manifest()
            rules = resolve_topup(run_dir, man, topup).describe()
            base = store.base_traces()
            have = store.existing_keys()
            panel = probe_rows(
                [
                    Outcome(cid, kind, a, b, br, ok, sid)
                    for sid, cid, kind, a, b, br, ok, _ in store.outcomes(kind="probe")
                ],
                protocol,
            )
            prompts = (
                {r["cell_id"]: len(store.cell_prompt(r["cell_id"])[1]) for r in base}
                if memory
                else {}
            )
        plan = _continue_plan(
            run_dir, man.get("model_alias", "?"), protocol, base, have, panel, batch_size, rules
        )
        plans.append(plan)
        if not memory:
            continue
        bits = kv_bits if kv_bits is not None else (man.get("continuation") or {}).get("kv_bits")
        plan.memory = memory_line(
            man.get("model_id", ""), base, prompts, protocol, batch_size, memory_bytes, bits
        )
    return plans


def memory_line(
    model_id: str,
    base: list[dict[str, Any]],
    prompts: dict[str, int],
    p: Protocol,
    batch_size: int,
    memory_bytes: int | None,
    kv_bits: int | None = None,
) -> str:
    """What `--memory-gb` admits for these base traces, from the model's config.json and the
    engine's own rule (`engine.memory.admission`: rows are admitted by the bytes they add),
    without loading the model."""
    import json

    from breakthrough.engine.contract import EnginePlan
    from breakthrough.engine.memory import (
        SHARED_PREFIXES,
        admission,
        budget_without_loading,
        layout_from_config,
    )
    from breakthrough.models.loading import local_folder
    from breakthrough.pipeline.scheduler import row_shape

    folder = local_folder(model_id) if model_id else None
    if folder is None or not (folder / "config.json").is_file() or not base:
        return "memory: rows per batch are known once the model is on this machine"
    try:
        config = json.loads((folder / "config.json").read_text())
        dtype = weights_dtype(folder)
        if dtype:  # the cache holds the activations' dtype, which the weights' files say
            config = {**config, "torch_dtype": dtype}
        layout = layout_from_config(config, kv_bits)
    except (ValueError, OSError) as exc:
        return f"memory: rows per batch unknown ({exc})"
    budget, how = budget_without_loading(folder, memory_bytes)
    cells = [
        plan_cell(rec["cell_id"], {}, [0] * prompts.get(rec["cell_id"], 0), rec, p) for rec in base
    ]
    shape = row_shape(cells, p)
    rule = dict(batch_size=batch_size, max_prefixes=SHARED_PREFIXES, snapshots=len(p.anchors) + 1)
    rows_p = admission(layout, budget, shape.probe_tokens, shape.shared_tokens, **rule)
    rows_r = admission(layout, budget, shape.restart_tokens, 0, **rule)
    if min(rows_p.rows, rows_r.rows) < 1:
        need = max(rows_p.need_bytes, rows_r.need_bytes) / 2**30
        return (
            f"memory ({how}) cannot hold one row of the deepest anchor: {need:.3g} GB "
            f"needed; bt continue will refuse it"
        )
    return EnginePlan(shape, rows_p.rows, rows_r.rows, batch_size, budget=how).line()


SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def weights_dtype(folder: Path) -> str | None:
    """The float dtype of a model's embedding (its quantization scales in a quantized
    checkpoint), read from a safetensors header without loading a tensor: the dtype its
    activations, and so its KV cache, are in. A config's `torch_dtype` is often absent or
    says bfloat16 for float32 files (the offline default, the tiny test models); counting 2
    bytes a value for them, `--dry-run` admitted rows at half the bytes `bt continue` then
    found it needed. None when no header says."""
    import json
    import struct

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with open(path, "rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(min(size, 1 << 26)))
        except (OSError, ValueError, struct.error):
            continue
        floats = {
            name: SAFETENSORS_DTYPES[info["dtype"]]
            for name, info in header.items()
            if isinstance(info, dict) and info.get("dtype") in SAFETENSORS_DTYPES
        }
        for name, dtype in floats.items():
            if "embed_tokens" in name:
                return dtype
        if floats:
            return next(iter(floats.values()))
    return None


def _refinement_left(
    cell_id: str, grid_done: bool, panel: dict[str, list[PanelRow]], p: Protocol
) -> int:
    """Bisection samples still to come for a cell: none when its probes are all in and show no
    crossing to refine (or refinement is over), else at most the rounds left."""
    rows = panel.get(cell_id, [])
    done = sum(r[0] not in p.anchors for r in rows)
    if grid_done and bisection_midpoint(rows, p.tau, p) is None:
        return 0
    return max(p.refinement_rounds - done, 0) * p.samples


def _continue_plan(
    run_dir: Path,
    model: str,
    p: Protocol,
    base: list[dict[str, Any]],
    have: set,
    panel: dict[str, list[PanelRow]],
    batch_size: int,
    topup: str = "",
) -> RunPlan:
    probes = refine = restarts = restart_tokens = 0
    probe_tokens = p.budget + p.answer_budget
    for rec in base:
        cell = plan_cell(rec["cell_id"], {}, [], rec, p)
        cid = rec["cell_id"]
        missing_probes = sum(
            1
            for a in cell.grid
            for b in range(p.samples)
            if (cid, "probe", a, p.budget, b) not in have
        )
        probes += missing_probes
        refine += _refinement_left(cid, not missing_probes, panel, p) if len(cell.grid) > 1 else 0
        missing_restarts = [
            c
            for c in p.restart_budgets
            for b in range(p.restart_samples)
            if (cid, "restart", -1, c, b) not in have
        ]
        restarts += len(missing_restarts)
        restart_tokens += sum(c + p.answer_budget for c in missing_restarts)
    plan = RunPlan(
        run_dir,
        model,
        [
            PhasePlan("probes", probes, probes * probe_tokens),
            PhasePlan(
                "refinement",
                refine,
                refine * probe_tokens,
                f"at most {p.refinement_rounds} bisection rounds per cell",
            ),
            PhasePlan(
                "restarts",
                restarts,
                restart_tokens,
                "instant cells get only the scratch budget" if restarts else "",
            ),
            PhasePlan(
                "topups",
                0,
                0,
                (f"--topup {topup}: " if topup else "")
                + "decided by the outcomes above; not counted",
            ),
        ],
    )
    rate_for(plan, sibling_runs(run_dir), "continue", batch_size, fallback="base")
    return plan
