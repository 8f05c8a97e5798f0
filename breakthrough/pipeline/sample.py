"""`bt sample` and the screen of `bt cohorts screen`: N independent from-scratch attempts per
problem x model, the within-problem data an early-signal dissection needs (issue 11) and the
measurement a screening rule (protocol 6.2) selects problems by.

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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breakthrough.engine import EngineSpec, make_engine
from breakthrough.engine.contract import GenRequest
from breakthrough.errors import BtError
from breakthrough.models.loading import fetch_hub_models, load_model, model_identity
from breakthrough.pipeline.base import (
    base_cells,
    check_hidden_stride,
    check_runs_dir,
    commit_trajectory,
    discard_if_empty,
    distinct_models,
    select_rows,
    weights_key,
)
from breakthrough.pipeline.dry_run import PhasePlan, RunPlan, large_run_line, rate_for, sibling_runs
from breakthrough.pipeline.manifest import (
    check_engine,
    check_run_name,
    record_throughput,
    refuse_changed_run,
    request_identity,
    run_alias,
    run_manifest,
    run_name,
)
from breakthrough.protocol import Protocol
from breakthrough.runlock import run_lock
from breakthrough.seeds import attempt_seed
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.cohorts import cohort_digest, load_cohort
from breakthrough.tasks.family import family_of, make_grader

KIND = "attempt"
MAX_ATTEMPTS = 4096


@dataclass(frozen=True)
class SampleRequest:
    """What `bt sample` (or a screen) asks for: a cohort (subset), models, N attempts of at most
    `protocol.base_max_tokens` tokens each, an engine, and where the runs go."""

    cohort: str
    models: tuple[str, ...]
    attempts: int
    protocol: Protocol
    engine: EngineSpec
    runs_dir: Path
    run: str | None = None
    limit: int | None = None
    problems: str | None = None
    seeds: tuple[int, ...] | None = None  # explicit seed of attempt b (screens); else attempt_seed
    subdir: str = "attempts"
    # store every Nth token's hidden vector (0: none; `bt sample` passes protocol 2.2's 8,
    # screens keep the 0 here: they only count successes)
    hidden_stride: int = 0
    lock_wait: float = 0.0  # --wait: seconds to wait for another bt writing the same run


@dataclass
class SampleReport:
    """What one call did for one model."""

    run_dir: Path
    model: str
    todo: int
    generated: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    skipped: int = 0
    failed: int = 0
    solved: int = 0
    notes: list[str] = field(default_factory=list)


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
    check_hidden_stride(req.hidden_stride, req.engine.backend)
    check_runs_dir(req.runs_dir)
    if req.run is not None:
        check_run_name(req.run)


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
    sql = store.conn.execute("SELECT sql FROM sqlite_master WHERE name='samples'").fetchone()
    if sql and "'attempt'" not in sql[0]:
        raise BtError(f"{store.run_dir}: this run's store predates attempts; use another --run")


def run_sample(
    *,
    loaded: Any,
    rows: Sequence[dict],
    cohort: str,
    digest: str,
    run_dir: Path,
    attempts: int,
    protocol: Protocol,
    engine: EngineSpec = EngineSpec(),
    seeds: tuple[int, ...] | None = None,
    hidden_stride: int = 0,
    on_start: Callable[[int, Any], None] | None = None,
    on_sample: Callable[[SampleRecord, Any], None] | None = None,
) -> SampleReport:
    """Generate, segment, grade and store the missing attempts 0..N-1 of every row's cell for
    one loaded model (with the hidden vectors of every `hidden_stride`-th token); each attempt
    is committed when it finishes."""
    family = family_of(rows)
    check_hidden_stride(hidden_stride, engine.backend)
    cells = base_cells(
        loaded, rows, protocol, "plain"
    )  # a too-long prompt: refused before any write
    gen = make_engine(engine, loaded)
    store = RunStore(run_dir, create=True)
    try:
        try:
            _accepts_attempts(store)
            store.ensure_manifest(
                run_manifest(
                    loaded,
                    rows,
                    protocol,
                    cohort,
                    digest,
                    "plain",
                    gen.identity(),
                    hidden_stride,
                    run_kind="sample",
                )
            )
            check_engine(store, gen)
        except BaseException:
            store.discard_new()  # a creation that failed leaves nothing a rerun would trip on
            raise
        store.remove_orphan_hidden()  # files a kill left between their rename and their commit
        _refuse_other_seeds(
            store, lambda c, b: seed_of(c, b, seeds) if seeds is None or b < len(seeds) else -1
        )
        store.update_manifest(
            {
                "attempts": {
                    "kind": KIND,
                    "max_tokens": protocol.base_max_tokens,
                    "seeds": list(seeds) if seeds is not None else "attempt_seed",
                }
            }
        )
        store.add_cells(cells)
        done = {(k[0], k[4]) for k in store.existing_keys(KIND)}
        by_key: dict[str, tuple[dict, int]] = {}
        requests = []
        for c in cells:
            for b in range(attempts):
                if (c["cell_id"], b) in done:
                    continue
                key = f"{c['cell_id']}#{KIND}{b}"
                by_key[key] = (c, b)
                requests.append(
                    GenRequest(
                        key=key,
                        prompt=c["prompt_ids"],
                        max_tokens=protocol.base_max_tokens,
                        seed=seed_of(c["cell_id"], b, seeds),
                        sampling=protocol.sampling,
                        hidden_stride=hidden_stride,
                    )
                )
        report = SampleReport(
            run_dir=run_dir,
            model=loaded.alias,
            todo=len(requests),
            skipped=len(cells) * attempts - len(requests),
        )
        if on_start:
            on_start(len(requests), gen)
        grader = make_grader(family, run_dir)
        t0 = time.perf_counter()
        try:
            for res in gen.generate(iter(requests)):
                cell, branch = by_key[res.key]
                stored = commit_trajectory(
                    store,
                    grader,
                    loaded,
                    res,
                    cell["item"],
                    cell_id=cell["cell_id"],
                    kind=KIND,
                    budget=protocol.base_max_tokens,
                    branch=branch,
                    seed=seed_of(cell["cell_id"], branch, seeds),
                    hidden_stride=hidden_stride,
                )
                if stored is None:
                    report.failed += 1
                    continue
                rec, grade = stored
                report.generated += 1
                report.tokens += len(res.tokens)
                report.solved += int(bool(grade and grade.correct))
                if on_sample:
                    on_sample(rec, grade)
        finally:
            getattr(grader, "close", lambda: None)()
        report.elapsed_s = time.perf_counter() - t0
        report.notes = list(getattr(gen, "notes", []))
        record_throughput(
            store,
            KIND,
            report.tokens,
            report.elapsed_s,
            batch_size=engine.batch_size,
            occupancy=getattr(gen, "occupancy", None),
        )
        return report
    except Exception:  # a crash; an interrupt keeps the run to resume
        discard_if_empty(store)  # a new run that made nothing under its identity: removed
        raise
    finally:
        store.close()


def sample_runs(
    req: SampleRequest,
    *,
    announce: Callable[[str], None] | None = None,
    drive: Callable[[Callable], SampleReport] | None = None,
) -> list[SampleReport]:
    """`bt sample`: for each model, check the request against an existing run (before loading),
    load the model and run `run_sample` into its run directory."""
    say = announce or (lambda line: None)
    check_request(req)
    all_rows = load_cohort(req.cohort)
    digest = cohort_digest(all_rows)
    rows = select_rows(all_rows, req.problems, req.limit, req.cohort)
    cohort_name = Path(req.cohort).stem
    fetch_hub_models(req.models)  # every missing hub model named at once, before any run
    req = distinct_models(req, weights_key, say)
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
        with run_lock(run_dir, wait=req.lock_wait):  # before loading: a busy run costs nothing
            reports.append(_sample_one(req, name, run_dir, rows, digest, cohort_name, say, drive))
    return reports


def _sample_one(
    req: SampleRequest,
    name: str,
    run_dir: Path,
    rows: list[dict],
    digest: str,
    cohort_name: str,
    say: Callable[[str], None],
    drive: Callable[[Callable], SampleReport] | None,
) -> SampleReport:
    """Load one model and run (or hand `drive`) its attempts, holding the run's lock."""
    loaded = run_alias(run_dir, load_model(name))  # one model, one name per run
    base_cells(loaded, rows, req.protocol, "plain")
    say(
        f"[bold]{loaded.alias}[/]: {req.attempts} attempt{'' if req.attempts == 1 else 's'} x "
        f"{len(rows)} problem{'' if len(rows) == 1 else 's'} of {cohort_name} -> {run_dir}"
    )

    def run(on_start=None, on_sample=None):
        return run_sample(
            loaded=loaded,
            rows=rows,
            cohort=cohort_name,
            digest=digest,
            run_dir=run_dir,
            attempts=req.attempts,
            protocol=req.protocol,
            engine=req.engine,
            seeds=req.seeds,
            hidden_stride=req.hidden_stride,
            on_start=on_start,
            on_sample=on_sample,
        )

    return drive(run) if drive else run()


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
    have: set[tuple[str, int]] = set()
    if (run_dir / "store.sqlite").exists():
        with RunStore(run_dir, readonly=True) as store:
            have = {(k[0], k[4]) for k in store.existing_keys(KIND)}
            alias = store.manifest().get("model_alias") or alias
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
