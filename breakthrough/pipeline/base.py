"""Turns store state into generation work and writes the results back (design: scheduler).

The base phase reads like protocol section 2: for every problem x model cell without a base
trace, one prefill of the chat prompt, sampling up to `base_max_tokens` with seed 11, stop only
at EOS; segment the tokens (3.2), grade the whole decoded text (7), store everything. Each
finished sample is committed on its own, so a kill loses at most the samples in flight and a
rerun resumes with exactly the missing cells.

Hidden vectors (protocol 2.2): with `hidden_stride` N > 0 (the study's 8) every trace also
stores the float16 final-normalised hidden vectors of its tokens 0, N, 2N, ... in
RUN/hidden/<sample_id>.npz, committed with the sample (store.RunStore.add_samples). The stride
is part of the run's identity (manifest `hidden_stride`): a resume with another is refused."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from typing import Protocol as Shape

import numpy as np

from breakthrough.engine import HTTP_BACKENDS, EngineSpec, make_engine
from breakthrough.engine.contract import GenRequest, GenResult
from breakthrough.errors import BtError
from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import fetch_hub_models, load_model, model_identity
from breakthrough.models.segments import reasoning_length, segment_ids
from breakthrough.models.tokens import decode
from breakthrough.pipeline.branches import request_facts
from breakthrough.pipeline.dry_run import (
    PhasePlan,
    RunPlan,
    large_run_line,
    plural,
    rate_for,
    sibling_runs,
)
from breakthrough.pipeline.manifest import (
    cell_id,
    check_engine,
    check_run_name,
    record_throughput,
    refuse_changed_run,
    request_identity,
    run_alias,
    run_manifest,
    run_name,
)
from breakthrough.protocol import HIDDEN_STRIDE, Protocol
from breakthrough.runlock import run_lock
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.cohorts import cohort_digest, load_cohort
from breakthrough.tasks.family import family_of, make_grader, user_message


class _NamesModels(Shape):
    @property
    def models(self) -> tuple[str, ...]: ...


_Req = TypeVar("_Req", bound=_NamesModels)  # a request naming `models` (distinct_models)


@dataclass
class BaseReport:
    """What one `bt base` call did for one model (the summary table's rows come from the store)."""

    run_dir: Path
    todo: int
    generated: int
    tokens: int
    elapsed_s: float
    skipped: int = 0
    failed: int = 0
    finish: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the engine's (e.g. endpoints that died)


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


def run_base(
    *,
    loaded: Any,
    rows: Sequence[dict],
    cohort: str,
    cohort_digest: str,
    run_dir: Path,
    protocol: Protocol,
    engine: EngineSpec = EngineSpec(),
    variant: str = "plain",
    hidden_stride: int = 0,
    on_start: Callable[[int, Any], None] | None = None,
    on_sample: Callable[[SampleRecord, Any], None] | None = None,
) -> BaseReport:
    """Generate, segment, grade and store the missing base traces of `rows` for one model,
    on the engine `engine` names, with the hidden vectors of every `hidden_stride`-th token.

    `on_start(n_todo, engine)` and `on_sample(record, grade)` let the CLI drive a progress bar."""
    family = family_of(rows)
    check_hidden_stride(hidden_stride, engine.backend)
    cells = base_cells(loaded, rows, protocol, variant)  # refuses a long prompt before any write
    gen = make_engine(engine, loaded)
    store = RunStore(run_dir, create=True)
    try:
        try:
            store.ensure_manifest(
                run_manifest(
                    loaded,
                    rows,
                    protocol,
                    cohort,
                    cohort_digest,
                    variant,
                    gen.identity(),
                    hidden_stride,
                )
            )
            check_engine(store, gen)
        except BaseException:
            store.discard_new()  # a creation that failed leaves nothing a rerun would trip on
            raise
        store.remove_orphan_hidden()  # files a kill left between their rename and their commit
        store.add_cells(cells)
        done = {key[0] for key in store.existing_keys("base")}
        todo = [c for c in cells if c["cell_id"] not in done]
        by_id = {c["cell_id"]: c for c in todo}
        if on_start:
            on_start(len(todo), gen)
        requests: Iterator[GenRequest] = (
            GenRequest(
                key=c["cell_id"],
                prompt=c["prompt_ids"],
                max_tokens=protocol.base_max_tokens,
                seed=protocol.base_seed,
                sampling=protocol.sampling,
                hidden_stride=hidden_stride,
            )
            for c in todo
        )
        report = BaseReport(
            run_dir=run_dir,
            todo=len(todo),
            generated=0,
            tokens=0,
            elapsed_s=0.0,
            skipped=len(cells) - len(todo),
        )
        t0 = time.perf_counter()
        grader = make_grader(family, run_dir)
        try:
            for res in gen.generate(requests):
                cell = by_id[res.key]
                stored = commit_trajectory(
                    store,
                    grader,
                    loaded,
                    res,
                    cell["item"],
                    cell_id=res.key,
                    kind="base",
                    budget=0,
                    branch=0,
                    seed=protocol.base_seed,
                    reasoning_tokens=True,
                    hidden_stride=hidden_stride,
                )
                if stored is None:
                    report.failed += 1
                    continue
                rec, grade = stored
                report.generated += 1
                report.tokens += len(res.tokens)
                report.finish[res.finish_reason] = report.finish.get(res.finish_reason, 0) + 1
                if on_sample:
                    on_sample(rec, grade)
        finally:
            getattr(grader, "close", lambda: None)()
        report.elapsed_s = time.perf_counter() - t0
        report.notes = list(getattr(gen, "notes", []))
        record_throughput(
            store,
            "base",
            report.tokens,
            report.elapsed_s,  # for --dry-run ETAs
            batch_size=engine.batch_size,
            occupancy=getattr(gen, "occupancy", None),
        )
        return report
    except Exception:  # a crash; an interrupt (Ctrl-C, SIGTERM) keeps the run to resume
        discard_if_empty(store)
        raise
    finally:
        store.close()


def discard_if_empty(store: RunStore) -> None:
    """A run this call made that crashed before any sample was stored is removed again: nothing
    was made under the identity it records, so none is left to refuse a rerun with other
    settings. A store that holds a sample, or that existed before, is kept (as is one a user
    interrupted: "interrupted, rerun to resume" keeps its word). Serves `bt base` and
    `bt sample`."""
    import sqlite3

    try:
        empty = store.created and not store.existing_keys()
    except (sqlite3.Error, BtError):
        return  # the store cannot be read now: leave it as it is
    if empty:
        store.discard_new()


def select_rows(
    rows: list[dict], problems: str | None, limit: int | None, cohort: str
) -> list[dict]:
    """Apply --problems (ids, in cohort order) and --limit (first N)."""
    if problems:
        wanted = [p.strip() for p in problems.split(",") if p.strip()]
        known = {r["id"] for r in rows}
        missing = [p for p in wanted if p not in known]
        if missing:
            raise BtError(f"--problems: {missing[0]!r} is not in cohort {cohort}")
        rows = [r for r in rows if r["id"] in set(wanted)]
    if limit is not None:
        if limit < 1:
            raise BtError("--limit must be >= 1")
        rows = rows[:limit]
    return rows


def _all_stored(run_dir: Path, alias: str, rows: Sequence[dict]) -> bool:
    """Whether the run in `run_dir` already holds the base trace of every row (read-only)."""
    from breakthrough.store import STORE_FILE

    if not (run_dir / STORE_FILE).exists():
        return False
    with RunStore(run_dir, readonly=True) as store:
        done = {key[0] for key in store.existing_keys("base")}
        alias = store.manifest().get("model_alias") or alias  # the run's name for these weights
    return all(cell_id(alias, r["id"]) in done for r in rows)


@dataclass(frozen=True)
class BaseRequest:
    """What `bt base` was asked for: a cohort (subset), models, protocol and engine."""

    cohort: str
    models: tuple[str, ...]
    protocol: Protocol
    engine: EngineSpec
    runs_dir: Path
    run: str | None = None
    limit: int | None = None
    problems: str | None = None
    variant: str = "plain"
    hidden_stride: int = HIDDEN_STRIDE  # protocol 2.2: every 8th token's hidden vector; 0 none
    lock_wait: float = 0.0  # --wait: seconds to wait for another bt writing the same run


def base_runs(
    req: BaseRequest,
    *,
    announce: Callable[[str], None] | None = None,
    drive: Callable[[Callable], BaseReport] | None = None,
) -> list[BaseReport]:
    """`bt base`: for each model, load it and run `run_base` into its run directory
    (COHORT-MODEL, or RUN / RUN-MODEL with several models).

    `announce(line)` reports what is about to run; `drive(run)` wraps `run(on_start, on_sample)`
    (the CLI's progress display)."""
    say = announce or (lambda line: None)
    if req.variant not in ("plain", "explicit"):
        raise BtError(f"--prompt-variant: expected plain or explicit, got {req.variant!r}")
    if req.protocol.base_max_tokens < 1:
        raise BtError("--max-tokens must be >= 1")
    check_hidden_stride(req.hidden_stride, req.engine.backend)
    check_runs_dir(req.runs_dir)
    if req.run is not None:
        check_run_name(req.run)  # before a cohort is read or a hub model fetched
    if not req.models:
        raise BtError("--model: no model named")
    all_rows = load_cohort(req.cohort)
    digest = cohort_digest(all_rows)
    rows = select_rows(all_rows, req.problems, req.limit, req.cohort)
    cohort_name = Path(req.cohort).stem
    fetch_hub_models(req.models)  # every missing hub model named at once, before any run
    req = distinct_models(req, weights_key, say)
    reports = []
    for name in req.models:
        ident = model_identity(name)  # from the files: a differing run is refused before loading
        run_dir = req.runs_dir / run_name(req.run, req.models, cohort_name, ident.alias)
        # the backend first: another backend also changes the default --hidden-stride, and the
        # user typed --backend
        refuse_other_backend(run_dir, req.engine.backend)
        refuse_changed_run(
            run_dir,
            request_identity(ident, rows, req.protocol, digest, req.variant, req.hidden_stride),
        )
        if _all_stored(run_dir, ident.alias, rows):  # said before any model is loaded
            say(
                f"{run_dir}: nothing to do: the {len(rows)} "
                f"base trace{'' if len(rows) == 1 else 's'} asked for "
                f"{'is' if len(rows) == 1 else 'are'} stored (no model loaded)"
            )
            continue
        _say_if_large(req, run_dir, ident.alias, rows, say)
        with run_lock(run_dir, wait=req.lock_wait):  # before loading: a busy run costs nothing
            reports.append(_base_one(req, name, run_dir, rows, digest, cohort_name, say, drive))
    return reports


def _say_if_large(
    req: BaseRequest, run_dir: Path, alias: str, rows: list[dict], say: Callable[[str], None]
) -> None:
    """Before a model loads: the one line of a run about to generate more than
    `dry_run.LARGE_RUN_TOKENS` tokens (its bound and ETA)."""
    from breakthrough.store import STORE_FILE

    done: set[str] = set()
    if (run_dir / STORE_FILE).exists():
        with RunStore(run_dir, readonly=True) as store:
            done = {key[0] for key in store.existing_keys("base")}
            alias = store.manifest().get("model_alias") or alias
    todo = [r for r in rows if cell_id(alias, r["id"]) not in done]
    line = large_run_line(base_plan(run_dir, alias, rows, todo, req))
    if line:
        say(line)


def _base_one(
    req: BaseRequest,
    name: str,
    run_dir: Path,
    rows: list[dict],
    digest: str,
    cohort_name: str,
    say: Callable[[str], None],
    drive: Callable[[Callable], BaseReport] | None,
) -> BaseReport:
    """Load one model and run (or hand `drive`) its base phase, holding the run's lock."""
    loaded = run_alias(run_dir, load_model(name))  # one model, one name per run
    base_cells(
        loaded, rows, req.protocol, req.variant
    )  # a too-long prompt: refused before any output
    ctx = loaded.config.get("max_position_embeddings")
    if ctx and req.protocol.base_max_tokens > int(ctx):
        say(f"note: {loaded.alias} has a {int(ctx):,}-token context; generation beyond it degrades")
    say(
        f"[bold]{loaded.alias}[/]: {len(rows)} problem{'' if len(rows) == 1 else 's'} of "
        f"{cohort_name} -> {run_dir}; prompt family: {loaded.family.name}"
    )

    def run(on_start=None, on_sample=None):
        return run_base(
            loaded=loaded,
            rows=rows,
            cohort=cohort_name,
            cohort_digest=digest,
            run_dir=run_dir,
            protocol=req.protocol,
            engine=req.engine,
            variant=req.variant,
            hidden_stride=req.hidden_stride,
            on_start=on_start,
            on_sample=on_sample,
        )

    return drive(run) if drive else run()


def check_runs_dir(runs_dir: Path) -> None:
    """--runs-dir: a folder, or a path where one can be made (checked before any model loads)."""
    p = Path(runs_dir)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise BtError(f"--runs-dir {runs_dir}: {q} is a file, not a folder")
            return


def refuse_other_backend(run_dir: Path, backend: str) -> None:
    """A run that recorded its engine's backend refuses another before any model is loaded."""
    from breakthrough.store import STORE_FILE

    if not (run_dir / STORE_FILE).exists():
        return
    with RunStore(run_dir, readonly=True) as store:
        have = (store.manifest().get("engine") or {}).get("backend")
    if have and have != backend:
        raise BtError(
            f"{run_dir}: --backend: run was made with engine.backend={have!r}, this request has "
            f"engine.backend={backend!r}; a run never mixes backends (use --backend {have})"
        )


def weights_key(name: str) -> tuple[str, str | None]:
    """What makes two `--model` names one model: the identity recorded from its files."""
    ident = model_identity(name)
    return ident.model_id, ident.digest


def _path_key(name: str) -> str:
    """`weights_key` without reading weights (`--dry-run`): a local folder by its real path
    (a symlink is its target), any other name as given."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def distinct_models(req: _Req, key: Callable[[str], object], say: Callable[[str], None]) -> _Req:
    """`req` with a second `--model` name for a model already named dropped (`key` says which
    are one: FOLDER and a LINK to it, two aliases of one checkpoint): a run's identity is its
    weights, so they are one run, generated once and named as with one model. `say` tells
    which name was dropped. Serves `bt base` and `bt sample` (a `BaseRequest`, a
    `sample.SampleRequest`)."""
    from dataclasses import replace

    kept: dict[object, str] = {}
    for name in req.models:
        first = kept.setdefault(key(name), name)
        if first != name:
            say(f"--model {name}: the same model as {first} (same weights); one run for both")
    names = tuple(kept.values())
    return req if names == req.models else replace(req, models=names)  # type: ignore[type-var]


def plan_base(req: BaseRequest, say: Callable[[str], None] | None = None) -> list[RunPlan]:
    """`bt base --dry-run`: per model, the base traces still missing and their token bound
    (`say`: a note for a model named twice, `distinct_models`)."""
    from breakthrough.models.loading import model_alias
    from breakthrough.store import STORE_FILE

    req = distinct_models(req, _path_key, say or (lambda line: None))
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
        plans.append(base_plan(run_dir, alias, rows, todo, req))
    return plans


def base_plan(
    run_dir: Path, alias: str, rows: list[dict], todo: list[dict], req: BaseRequest
) -> RunPlan:
    """The base phase of one run: `todo` of `rows` still to generate, with its ETA."""
    plan = RunPlan(
        run_dir,
        alias,
        [
            PhasePlan(
                "base",
                len(todo),
                len(todo) * req.protocol.base_max_tokens,
                f"{plural(len(rows) - len(todo), 'cell')} already done"
                if len(todo) < len(rows)
                else "",
            )
        ],
    )
    rate_for(plan, sibling_runs(run_dir), "base", req.engine.batch_size)
    return plan
