"""`bt sample` and the screen of `bt cohorts screen`: N independent from-scratch attempts per
problem x model, the within-problem data an early-signal dissection needs (9.8: many attempts
at one problem) and the measurement a screening rule (protocol 6.2) selects problems by.

An attempt is a base trace in everything but its seed: the chat prompt, protocol sampling, up to
`max_tokens` generated tokens, stop only at EOS, segmented and graded like `bt base`. Attempt b
of a cell is stored as kind "attempt", anchor -1, budget = its token cap, branch = b, with the
seed `seeds.attempt_seed(cell, b)` (or, for a screen, the b-th of an explicit seed list, as the
study's screens used seeds 21, 22, 23 for every problem). Each finished attempt is committed on
its own, so a SIGKILL loses at most the attempts in flight; the unique key makes a rerun add only
what is missing, and a larger N adds only the new indices.

Where attempts live: their own run directory, `RUNS/attempts/COHORT-MODEL` by default (screens:
`RUNS/screens/COHORT-MODEL`). Not the `bt base` run: the attempt cap is part of the protocol
digest (a run never mixes protocols), and one level below `runs/` keeps `bt continue` and
`bt classify runs/` (which read run directories directly under the folder they are given) from
treating attempts as cells to continue.

Hidden vectors: with `hidden_stride` N > 0 (bt sample's default, protocol 2.2's 8) each attempt
also stores the float16 final-normalised hidden vectors of its tokens 0, N, 2N, ... in
RUN/hidden/<sample_id>.npz, committed with it (see pipeline.base); screens store none."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from breakthrough.errors import BtError
from breakthrough.models.loading import model_identity
from breakthrough.pipeline.base import (
    distinct_models,
    dropped_names,
    read_request,
    select_rows,
    weights_key,
)
from breakthrough.pipeline.dry_run import PhasePlan, RunPlan, large_run_line, rate_for, sibling_runs
from breakthrough.pipeline.manifest import (
    refuse_changed_run,
    request_identity,
    run_name,
)
from breakthrough.pipeline.trajectories import (
    ModelReport,
    ModelRun,
    ModelsRequest,
    Trajectory,
    run_model,
    stored_keys,
)
from breakthrough.seeds import attempt_seed
from breakthrough.store import RunStore
from breakthrough.tasks.cohorts import load_cohort

KIND = "attempt"
MAX_ATTEMPTS = 4096
SampleReport = ModelReport  # what one call did for one model (the name screens know)


@dataclass(frozen=True, kw_only=True)
class SampleRequest(ModelsRequest):
    """What `bt sample` (or a screen) asks for: a cohort (subset), models, N attempts of at most
    `protocol.base_max_tokens` tokens each, an engine, and where the runs go. Its hidden
    stride: `bt sample` passes protocol 2.2's 8, screens keep the 0 (they only count
    successes)."""

    attempts: int
    seeds: tuple[int, ...] | None = None  # explicit seed of attempt b (screens); else attempt_seed
    subdir: str = "attempts"


def seed_of(cell: str, branch: int, seeds: tuple[int, ...] | None) -> int:
    """The seed of attempt `branch` of `cell`: the explicit list's (same for every cell), or the
    identity seed."""
    return seeds[branch] if seeds is not None else attempt_seed(cell, branch)


def check_request(req: SampleRequest) -> None:
    """Refuse option mistakes before anything is loaded or written."""
    if not 1 <= req.attempts <= MAX_ATTEMPTS:
        raise BtError(f"--attempts: expected 1..{MAX_ATTEMPTS}, got {req.attempts}")
    if req.protocol.base_max_tokens < 1:
        raise BtError("--max-tokens must be >= 1")
    if req.seeds is not None and len(req.seeds) != req.attempts:
        raise BtError(f"--seeds: {len(req.seeds)} seeds for {req.attempts} attempts")
    if not req.models:
        raise BtError("--model: no model named")
    req.check_outputs()


def run_dir_for(req: SampleRequest, cohort_name: str, alias: str) -> Path:
    """RUNS/SUBDIR/COHORT-MODEL, or RUNS/SUBDIR/RUN (RUN-MODEL with several models)."""
    return req.runs_dir / req.subdir / run_name(req.run, req.models, cohort_name, alias)


def _refuse_other_seeds(store: RunStore, want: Callable[[str, int], int]) -> None:
    """A stored attempt whose seed is not the one this request gives it was drawn under another
    seed scheme: refuse rather than mix two experiments in one run."""
    df = store.samples_frame(arrays=False, kind=KIND)
    for cell, branch, seed in zip(df["cell_id"], df["branch"], df["seed"], strict=True):
        if int(seed) != want(cell, int(branch)):
            raise BtError(
                f"{store.run_dir}: attempt {int(branch)} of {cell} was drawn with seed "
                f"{int(seed)}, this request gives it {want(cell, int(branch))}; "
                "use another --run"
            )


def _accepts_attempts(store: RunStore) -> None:
    if not store.accepts_attempts():
        raise BtError(f"{store.run_dir}: this run's store predates attempts; use another --run")


def sample_runs(
    req: SampleRequest,
    *,
    announce: Callable[[str], None] | None = None,
    drive: Callable[[Callable], SampleReport] | None = None,
) -> list[SampleReport]:
    """`bt sample`: for each model, check the request against an existing run (before loading),
    load the model and generate its missing attempts into its run directory
    (`trajectories.run_model`)."""
    say = announce or (lambda line: None)
    check_request(req)
    named = req.models
    req, rows, digest, cohort_name = read_request(req, say)
    second_names = dropped_names(named, req.models)
    planned, aliases = [], []
    for name in req.models:  # every model checked before any is loaded or written
        ident = model_identity(name)
        aliases.append(ident.alias)
        run_dir = run_dir_for(req, cohort_name, ident.alias)
        refuse_changed_run(
            run_dir,
            request_identity(
                ident, rows, req.protocol, digest, "plain", req.hidden_stride, run_kind="sample"
            ),
        )
        planned.append((name, run_dir))
    reports = []
    for (name, run_dir), alias in zip(planned, aliases, strict=True):
        large = large_run_line(_plan_one(req, rows, alias, cohort_name))
        if large:  # said before the model loads
            say(large)
        job = AttemptRun.of(
            req,
            name,
            run_dir,
            rows,
            cohort_name,
            digest,
            attempts=req.attempts,
            seeds=req.seeds,
            second_names=second_names,
        )
        reports.append(run_model(job, say, drive))
    return reports


@dataclass(frozen=True)
class AttemptRun(ModelRun):
    """One model's attempts: attempts 0..N-1 of every cell, attempt b with the seed
    `seed_of(cell, b, seeds)`, stored with the token cap as their budget."""

    kind: ClassVar[str] = KIND
    run_kind: ClassVar[str] = "sample"

    attempts: int = 1
    seeds: tuple[int, ...] | None = None

    @property
    def budget(self) -> int:
        return self.protocol.base_max_tokens

    def headline(self, loaded: Any) -> list[str]:
        n, rows = self.attempts, len(self.rows)
        return [
            f"[bold]{loaded.alias}[/]: {n} attempt{'' if n == 1 else 's'} x "
            f"{rows} problem{'' if rows == 1 else 's'} of {self.cohort} -> {self.run_dir}"
        ]

    def check_store(self, store: RunStore) -> None:
        _accepts_attempts(store)

    def prepare(self, store: RunStore) -> None:
        seeds = self.seeds
        _refuse_other_seeds(
            store, lambda c, b: seed_of(c, b, seeds) if seeds is None or b < len(seeds) else -1
        )
        store.update_manifest(
            {
                "attempts": {
                    "kind": KIND,
                    "max_tokens": self.protocol.base_max_tokens,
                    "seeds": list(seeds) if seeds is not None else "attempt_seed",
                }
            }
        )

    def trajectories(self, store: RunStore, cells: list[dict]) -> tuple[list[Trajectory], int]:
        done = {(k[0], k[4]) for k in store.existing_keys(KIND)}
        todo = [
            Trajectory(f"{c['cell_id']}#{KIND}{b}", c, b, seed_of(c["cell_id"], b, self.seeds))
            for c in cells
            for b in range(self.attempts)
            if (c["cell_id"], b) not in done
        ]
        return todo, len(cells) * self.attempts


def success_counts(run_dirs: Sequence[Path], attempts: int) -> dict[str, tuple[int, int]]:
    """problem id -> (verified successes, attempts counted) over attempts 0..N-1 of every run
    (models); an ungraded attempt counts as no success."""
    out: dict[str, tuple[int, int]] = {}
    for run_dir in run_dirs:
        with RunStore(run_dir, readonly=True) as store:
            df = store.samples_frame(arrays=False, kind=KIND)
        df = df[df["branch"] < attempts]
        for pid, group in df.groupby("problem_id"):
            k, n = out.get(pid, (0, 0))
            ok = group["correct"].astype("boolean").fillna(False).astype(bool)
            out[pid] = (k + int(ok.sum()), n + len(group))
    return out


def plan_sample(req: SampleRequest) -> list[RunPlan]:
    """`bt sample --dry-run` (and a screen's): per model, the attempts still missing, their
    token bound and an ETA from this machine's measured tokens/s (attempts of the same model at
    the same batch size, else its base traces, said so; scaled to the rows the attempts keep in
    flight); loads no model, writes nothing."""
    check_request(req)
    all_rows = load_cohort(req.cohort)
    rows = select_rows(all_rows, req.problems, req.limit, req.cohort)
    cohort_name = Path(req.cohort).stem
    req = distinct_models(req, weights_key, lambda line: None)
    return [_plan_one(req, rows, model_identity(name).alias, cohort_name) for name in req.models]


def _plan_one(req: SampleRequest, rows: list[dict], alias: str, cohort_name: str) -> RunPlan:
    """The attempts one model's run still needs (see `plan_sample`)."""
    run_dir = run_dir_for(req, cohort_name, alias)
    keys, stored_alias = stored_keys(run_dir, KIND)
    have = {(k[0], k[4]) for k in keys}
    alias = stored_alias or alias
    missing = sum(
        1 for r in rows for b in range(req.attempts) if (f"{alias}:{r['id']}", b) not in have
    )
    total = len(rows) * req.attempts
    plan = RunPlan(
        run_dir,
        alias,
        [
            PhasePlan(
                "attempts",
                missing,
                missing * req.protocol.base_max_tokens,
                f"{missing:,} of {total:,} attempts to generate",
            )
        ],
    )
    siblings = list(
        dict.fromkeys(  # attempts and screens measure alike; base runs last
            sibling_runs(run_dir)
            + sibling_runs(req.runs_dir / "attempts" / "_")
            + sibling_runs(req.runs_dir / "screens" / "_")
            + sibling_runs(req.runs_dir / "_")
        )
    )
    rate_for(plan, siblings, KIND, req.engine.batch_size, fallback="base")
    return plan
