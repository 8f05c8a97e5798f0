"""One model's whole-trajectory run, shared by `bt base` (one base trace per cell,
pipeline.base) and `bt sample` / a screen (N attempts per cell, pipeline.sample).

A whole trajectory is the chat prompt, protocol sampling up to `base_max_tokens`, stop only at
EOS, segmented (3.2) and graded on its whole text (7). `run_model` is the one driver: under the
run's lock it loads the model, refuses a too-long prompt before any output, says what is about
to run and hands `run(on_start, on_sample)` to the CLI's display; `generate` opens (or makes)
the store, records the manifest, and commits every finished trajectory on its own, so a kill
loses at most the rows in flight and a rerun resumes with exactly the missing ones. What a kind
of run adds (its trajectories, seeds, headline, what it records beside the manifest) is a
`ModelRun` subclass."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from breakthrough.engine import HTTP_BACKENDS, EngineSpec, make_engine
from breakthrough.engine.contract import GenRequest, GenResult
from breakthrough.errors import BtError
from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model, remember_copies
from breakthrough.models.segments import reasoning_length, segment_ids
from breakthrough.models.tokens import decode
from breakthrough.pipeline.branches import request_facts
from breakthrough.pipeline.manifest import (
    cell_id,
    check_engine,
    check_run_name,
    record_throughput,
    run_alias,
    run_manifest,
)
from breakthrough.protocol import Protocol
from breakthrough.runlock import run_lock
from breakthrough.store import RunStore, SampleRecord, is_run_dir
from breakthrough.tasks.family import family_of, make_grader, user_message


@dataclass
class ModelReport:
    """What one call did for one model (`bt base`'s summary table reads the store itself)."""

    run_dir: Path
    model: str
    todo: int
    generated: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    skipped: int = 0
    failed: int = 0
    solved: int = 0
    finish: dict[str, int] = field(default_factory=dict)  # finish reason -> trajectories
    notes: list[str] = field(default_factory=list)  # the engine's (e.g. endpoints that died)


@dataclass(frozen=True)
class Trajectory:
    """One missing whole trajectory: its request key, its cell (`base_cells`), its branch (the
    attempt index; 0 for a base trace) and its seed."""

    key: str
    cell: dict
    branch: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class ModelsRequest:
    """What `bt base` and `bt sample` (a screen) are both asked for: a cohort (subset), models,
    protocol and engine, where the runs go, the hidden vectors' stride and --wait."""

    cohort: str
    models: tuple[str, ...]
    protocol: Protocol
    engine: EngineSpec
    runs_dir: Path
    run: str | None = None
    limit: int | None = None
    problems: str | None = None
    hidden_stride: int = 0  # store every Nth token's hidden vector (0: none)
    lock_wait: float = 0.0  # --wait: seconds to wait for another bt writing the same run

    def check_outputs(self) -> None:
        """Refuse, before anything is read or loaded, what the runs cannot be: a hidden stride
        the backend cannot give, a --runs-dir that is no folder, a --run that is no name."""
        check_hidden_stride(self.hidden_stride, self.engine.backend)
        check_runs_dir(self.runs_dir)
        if self.run is not None:
            check_run_name(self.run)


_Run = TypeVar("_Run", bound="ModelRun")


@dataclass(frozen=True)
class ModelRun:
    """One model's run: the `--model` name `name` into `run_dir`, over `rows` of the cohort
    `cohort` (digest `digest`), under `protocol` on `engine`, storing every `hidden_stride`-th
    token's hidden vector; `lock_wait` is --wait. Subclasses say the rest."""

    kind: ClassVar[str]  # the samples' kind, also the throughput phase ("base", "attempt")
    run_kind: ClassVar[str]  # the manifest's run kind ("base", "sample")
    reasoning_tokens: ClassVar[bool] = False  # store each cell's reasoning length (base traces)

    name: str
    run_dir: Path
    rows: Sequence[dict]
    cohort: str
    digest: str
    protocol: Protocol
    engine: EngineSpec
    hidden_stride: int
    lock_wait: float
    # the request's other `--model` names of this model (`base.distinct_models` dropped them as
    # another name of it): the identical copies among them are recorded as its folders once it
    # has loaded (`models.loading.remember_copies`), so the run is found in a copy later
    second_names: tuple[str, ...] = ()

    @classmethod
    def of(
        cls: type[_Run],
        req: ModelsRequest,
        name: str,
        run_dir: Path,
        rows: Sequence[dict],
        cohort: str,
        digest: str,
        **more: Any,
    ) -> _Run:
        """The run of model `name` a request asks for (`more`: the subclass's own fields)."""
        return cls(
            name=name,
            run_dir=run_dir,
            rows=rows,
            cohort=cohort,
            digest=digest,
            protocol=req.protocol,
            engine=req.engine,
            hidden_stride=req.hidden_stride,
            lock_wait=req.lock_wait,
            **more,
        )

    @property
    def variant(self) -> str:
        """The optimum-benchmark prompt variant (plain or explicit)."""
        return "plain"

    @property
    def budget(self) -> int:
        """The `budget` stored with each trajectory."""
        return 0

    def headline(self, loaded: Any) -> list[str]:
        """What is about to run, said once the model is loaded."""
        raise NotImplementedError

    def check_store(self, store: RunStore) -> None:
        """Refuse a store this run cannot be added to (before its manifest is written)."""

    def prepare(self, store: RunStore) -> None:
        """After the manifest: refuse what differs from the stored run, record what it adds."""

    def trajectories(self, store: RunStore, cells: list[dict]) -> tuple[list[Trajectory], int]:
        """(the trajectories still missing, how many the run asks for in all)."""
        raise NotImplementedError


def run_model(
    job: ModelRun,
    say: Callable[[str], None],
    drive: Callable[[Callable], ModelReport] | None,
) -> ModelReport:
    """Hold the run's lock (before loading: a busy run costs nothing), load the model under the
    run's name for it, refuse a too-long prompt before any output, `say` the headline, and run
    (or hand `drive`) `run(on_start, on_sample)`."""
    with run_lock(job.run_dir, wait=job.lock_wait):
        # one model, one name per run; the prompt under the run's thinking switch
        loaded = run_alias(job.run_dir, load_model(job.name, thinking=job.protocol.thinking))
        cells = base_cells(loaded, job.rows, job.protocol, job.variant)
        for line in job.headline(loaded):
            say(line)

        def run(on_start=None, on_sample=None) -> ModelReport:
            return generate(job, loaded, cells, on_start=on_start, on_sample=on_sample)

        return drive(run) if drive else run()


def generate(
    job: ModelRun,
    loaded: Any,
    cells: list[dict],
    *,
    on_start: Callable[[int, Any], None] | None = None,
    on_sample: Callable[[SampleRecord, Any], None] | None = None,
) -> ModelReport:
    """Generate, segment, grade and store the missing trajectories of `job` for the loaded
    model, each committed when it finishes. `on_start(n_todo, engine)` and
    `on_sample(record, grade)` let the CLI drive a progress display."""
    family = family_of(job.rows)
    check_hidden_stride(job.hidden_stride, job.engine.backend)
    gen = make_engine(job.engine, loaded)
    store = RunStore(job.run_dir, create=True)
    try:
        try:
            job.check_store(store)
            store.ensure_manifest(
                run_manifest(
                    loaded,
                    job.rows,
                    job.protocol,
                    job.cohort,
                    job.digest,
                    job.variant,
                    gen.identity(),
                    job.hidden_stride,
                    run_kind=job.run_kind,
                )
            )
            check_engine(store, gen)
        except BaseException:
            store.discard_new()  # a creation that failed leaves nothing a rerun would trip on
            raise
        store.remove_orphan_hidden()  # files a kill left between their rename and their commit
        job.prepare(store)
        remember_copies(job.name, job.second_names)  # the model loaded: a copy is a folder of it
        store.add_cells(cells)
        todo, total = job.trajectories(store, cells)
        report = ModelReport(
            run_dir=job.run_dir, model=loaded.alias, todo=len(todo), skipped=total - len(todo)
        )
        if on_start:
            on_start(len(todo), gen)
        by_key = {t.key: t for t in todo}
        requests = (
            GenRequest(
                key=t.key,
                prompt=t.cell["prompt_ids"],
                max_tokens=job.protocol.base_max_tokens,
                seed=t.seed,
                sampling=job.protocol.sampling,
                hidden_stride=job.hidden_stride,
            )
            for t in todo
        )
        grader = make_grader(family, job.run_dir)
        t0 = time.perf_counter()
        try:
            for res in gen.generate(requests):
                t = by_key[res.key]
                stored = commit_trajectory(
                    store,
                    grader,
                    loaded,
                    res,
                    t.cell["item"],
                    cell_id=t.cell["cell_id"],
                    kind=job.kind,
                    budget=job.budget,
                    branch=t.branch,
                    seed=t.seed,
                    reasoning_tokens=job.reasoning_tokens,
                    hidden_stride=job.hidden_stride,
                )
                if stored is None:
                    report.failed += 1
                    continue
                rec, grade = stored
                report.generated += 1
                report.tokens += len(res.tokens)
                report.solved += int(bool(grade and grade.correct))
                report.finish[res.finish_reason] = report.finish.get(res.finish_reason, 0) + 1
                if on_sample:
                    on_sample(rec, grade)
        finally:
            getattr(grader, "close", lambda: None)()
        report.elapsed_s = time.perf_counter() - t0
        stats = gen.stats()
        report.notes = list(stats.notes)
        record_throughput(
            store,
            job.kind,
            report.tokens,
            report.elapsed_s,  # for --dry-run ETAs
            batch_size=job.engine.batch_size,
            occupancy=stats.occupancy,
        )
        return report
    except Exception:  # a crash; an interrupt (Ctrl-C, SIGTERM) keeps the run to resume
        discard_if_empty(store)  # a new run that made nothing under its identity: removed
        raise
    finally:
        store.close()


def base_cells(loaded: Any, rows: Sequence[dict], protocol: Protocol, variant: str) -> list[dict]:
    """One cell per row: its id and chat prompt ids (protocol 1.3), refused in one line when a
    prompt exceeds `max_prompt_tokens` (1.5)."""
    cells = []
    for row in rows:
        msg = user_message(row, variant)
        try:
            prompt = build_prompt_ids(
                loaded.tokenizer, loaded.family, msg, max_prompt_tokens=protocol.max_prompt_tokens
            )
        except BtError as exc:
            raise BtError(f"problem {row['id']}: {exc}") from None
        cells.append(
            {
                "cell_id": cell_id(loaded.alias, row["id"]),
                "model": loaded.alias,
                "item": row,
                "prompt_ids": prompt,
            }
        )
    return cells


def check_runs_dir(runs_dir: Path) -> None:
    """--runs-dir: a folder, or a path where one can be made (checked before any model loads)."""
    p = Path(runs_dir)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise BtError(f"--runs-dir {runs_dir}: {q} is a file, not a folder")
            return


def check_hidden_stride(stride: int, backend: str) -> int:
    """--hidden-stride: an integer >= 0, and 0 on a backend that cannot return hidden states
    (the HTTP servers); refused in one line before anything is loaded or written."""
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 0:
        raise BtError(
            f"--hidden-stride: expected an integer >= 0 (0: store no hidden vectors), "
            f"got {stride!r}"
        )
    if stride > 0 and backend in HTTP_BACKENDS:
        raise BtError(
            f"--hidden-stride {stride}: the {backend} backend cannot return hidden "
            "states; use --backend mlx, or --hidden-stride 0 to store none"
        )
    return stride


def commit_trajectory(
    store: RunStore,
    grader: Any,
    loaded: Any,
    res: GenResult,
    item: dict,
    *,
    cell_id: str,
    kind: str,
    budget: int,
    branch: int,
    seed: int,
    reasoning_tokens: bool = False,
    hidden_stride: int = 0,
) -> tuple[SampleRecord, Any] | None:
    """One finished whole-trajectory request (a base trace, an attempt): segmented (3.2), graded
    on its whole text (7) and committed on its own, so a kill loses only rows in flight. A request
    a remote backend gave up on becomes an error row instead (None): the run goes on and a rerun
    retries it. With `reasoning_tokens`, the cell's reasoning length is stored too (base traces).
    Its hidden vectors (`res.hidden`, asked for with `hidden_stride`) are committed with it."""
    if res.error or res.finish_reason == "error":
        store.add_error(cell_id, res.key, str(res.error or "generation failed"), res.endpoint or "")
        return None
    text = decode(loaded.tokenizer, res.tokens)
    segments = segment_ids(loaded.tokenizer, res.tokens, loaded.family)
    rec = SampleRecord(
        cell_id=cell_id,
        kind=kind,
        anchor=-1,
        budget=budget,
        branch=branch,
        seed=seed,
        prefix_len=0,
        token_ids=np.asarray(res.tokens, dtype=np.int32),
        text=text,
        finish_reason=res.finish_reason,
        segments=segments,
        logprobs=res.logprobs,
        entropies=res.entropies,
        sampling_entropies=res.sampling_entropies,
        signals=res.signals,
        elapsed_s=res.elapsed_s,
        peak_mem_mb=res.peak_memory_bytes / 2**20,
        extra={"prompt_tokens": res.prompt_tokens, **request_facts([res])},
        hidden=res.hidden if hidden_stride > 0 else None,
        hidden_stride=hidden_stride,
    )
    if hidden_stride > 0 and res.hidden is None:
        raise BtError(
            f"{res.key}: the engine returned no hidden vectors (hidden_stride "
            f"{hidden_stride}); it cannot record them"
        )
    grade = grader.grade(text, item, res.finish_reason)
    store.add_samples(
        [rec],
        [grade],
        reasoning_tokens={cell_id: reasoning_length(segments)} if reasoning_tokens else None,
    )
    return rec, grade


def discard_if_empty(store: RunStore) -> None:
    """A run this call made that crashed before any sample was stored is removed again: nothing
    was made under the identity it records, so none is left to refuse a rerun with other
    settings. A store that holds a sample, or that existed before, is kept (as is one a user
    interrupted: "interrupted, rerun to resume" keeps its word)."""
    import sqlite3

    try:
        empty = store.created and not store.existing_keys()
    except (sqlite3.Error, BtError):
        return  # the store cannot be read now: leave it as it is
    if empty:
        store.discard_new()


def stored_keys(run_dir: Path, kind: str) -> tuple[set[tuple], str | None]:
    """(the sample keys of `kind` stored in the run in `run_dir`, the model alias the run
    records), read-only; (empty, None) where no run is yet."""
    if not is_run_dir(run_dir):
        return set(), None
    with RunStore(run_dir, readonly=True) as store:
        keys = set(store.existing_keys(kind))
        alias = store.manifest().get("model_alias") or None
    return keys, alias
