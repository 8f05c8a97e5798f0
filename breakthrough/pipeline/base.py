"""Turns store state into generation work and writes the results back (design: scheduler).

The base phase reads like protocol section 2: for every problem x model cell without a base
trace, one prefill of the chat prompt, sampling up to `base_max_tokens` with seed 11, stop only
at EOS; segment the tokens (3.2), grade the whole decoded text (7), store everything. Each
finished sample is committed on its own, so a kill loses at most the samples in flight and a
rerun resumes with exactly the missing cells. The per-model driver (lock, load, generate,
commit) is `pipeline.trajectories`, shared with `bt sample`; this module says what a base run
is (`BaseRun`) and checks a `bt base` request before any model loads.

Hidden vectors (protocol 2.2): with `hidden_stride` N > 0 (the study's 8) every trace also
stores the float16 final-normalised hidden vectors of its tokens 0, N, 2N, ... in
RUN/hidden/<sample_id>.npz, committed with the sample (store.RunStore.add_samples). The stride
is part of the run's identity (manifest `hidden_stride`): a resume with another is refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from breakthrough.errors import BtError
from breakthrough.models.loading import check_thinking, fetch_hub_models, model_identity
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
from breakthrough.protocol import HIDDEN_STRIDE
from breakthrough.store import RunStore, is_run_dir
from breakthrough.tasks.cohorts import cohort_digest, load_cohort

_Req = TypeVar("_Req", bound=ModelsRequest)  # a base or sample request (distinct_models)


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


@dataclass(frozen=True, kw_only=True)
class BaseRequest(ModelsRequest):
    """What `bt base` was asked for: a cohort (subset), models, protocol and engine, and the
    prompt variant."""

    variant: str = "plain"
    hidden_stride: int = HIDDEN_STRIDE  # protocol 2.2: every 8th token's hidden vector; 0 none


def dropped_names(named: Sequence[str], kept: Sequence[str]) -> tuple[str, ...]:
    """The `--model` names `distinct_models` dropped as another name of a model kept: the
    identical copies among them are recorded as that model's folders once it has loaded
    (`ModelRun.second_names`)."""
    return tuple(n for n in named if n not in kept)


def base_runs(
    req: BaseRequest,
    *,
    announce: Callable[[str], None] | None = None,
    drive: Callable[[Callable], ModelReport] | None = None,
) -> list[ModelReport]:
    """`bt base`: for each model, load it and generate its missing base traces into its run
    directory (COHORT-MODEL, or RUN / RUN-MODEL with several models), `trajectories.run_model`.

    `announce(line)` reports what is about to run; `drive(run)` wraps `run(on_start, on_sample)`
    (the CLI's progress display)."""
    say = announce or (lambda line: None)
    if req.variant not in ("plain", "explicit"):
        raise BtError(f"--prompt-variant: expected plain or explicit, got {req.variant!r}")
    if req.protocol.base_max_tokens < 1:
        raise BtError("--max-tokens must be >= 1")
    req.check_outputs()  # before a cohort is read or a hub model fetched
    if not req.models:
        raise BtError("--model: no model named")
    named = req.models
    req, rows, digest, cohort_name = read_request(req, say)
    second_names = dropped_names(named, req.models)
    for name in req.models:  # every model's --thinking refusal before any run is written
        check_thinking(name, req.protocol.thinking)
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
        keys, stored_alias = stored_keys(run_dir, "base")
        alias = stored_alias or ident.alias  # the run's name for these weights
        done = {key[0] for key in keys}
        todo = [r for r in rows if cell_id(alias, r["id"]) not in done]
        if not todo and is_run_dir(run_dir):  # said before any model is loaded
            say(
                f"{run_dir}: nothing to do: the {len(rows)} "
                f"base trace{'' if len(rows) == 1 else 's'} asked for "
                f"{'is' if len(rows) == 1 else 'are'} stored (no model loaded)"
            )
            continue
        line = large_run_line(base_plan(run_dir, alias, rows, todo, req))
        if line:  # before a model loads: the bound and ETA of a large run
            say(line)
        job = BaseRun.of(
            req,
            name,
            run_dir,
            rows,
            cohort_name,
            digest,
            prompt_variant=req.variant,
            second_names=second_names,
        )
        reports.append(run_model(job, say, drive))
    return reports


@dataclass(frozen=True)
class BaseRun(ModelRun):
    """One model's base phase: one trace per cell, seed `protocol.base_seed`, with the cell's
    reasoning length (protocol section 2)."""

    kind: ClassVar[str] = "base"
    run_kind: ClassVar[str] = "base"
    reasoning_tokens: ClassVar[bool] = True

    prompt_variant: str = "plain"

    @property
    def variant(self) -> str:
        return self.prompt_variant

    def headline(self, loaded: Any) -> list[str]:
        lines = []
        ctx = loaded.config.get("max_position_embeddings")
        if ctx and self.protocol.base_max_tokens > int(ctx):
            lines.append(
                f"note: {loaded.alias} has a {int(ctx):,}-token context; generation beyond it "
                "degrades"
            )
        n = len(self.rows)
        lines.append(
            f"[bold]{loaded.alias}[/]: {n} problem{'' if n == 1 else 's'} of "
            f"{self.cohort} -> {self.run_dir}; prompt family: {loaded.family.name}"
        )
        return lines

    def trajectories(self, store: RunStore, cells: list[dict]) -> tuple[list[Trajectory], int]:
        done = {key[0] for key in store.existing_keys("base")}
        seed = self.protocol.base_seed
        todo = [Trajectory(c["cell_id"], c, 0, seed) for c in cells if c["cell_id"] not in done]
        return todo, len(cells)


def read_request(req: _Req, say: Callable[[str], None]) -> tuple[_Req, list[dict], str, str]:
    """(the request with a second name of one model dropped, `distinct_models`; the rows of
    the cohort it selects; the whole cohort's digest; the cohort's name): the cohort read
    once, and every missing hub model fetched at once, before any run. Serves `bt base` and
    `bt sample`."""
    all_rows = load_cohort(req.cohort)
    digest = cohort_digest(all_rows)
    rows = select_rows(all_rows, req.problems, req.limit, req.cohort)
    fetch_hub_models(req.models)  # every missing hub model named at once, before any run
    return distinct_models(req, weights_key, say), rows, digest, Path(req.cohort).stem


def refuse_other_backend(run_dir: Path, backend: str) -> None:
    """A run that recorded its engine's backend refuses another before any model is loaded."""
    if not is_run_dir(run_dir):
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


def folder_keys(names: Sequence[str]) -> Callable[[str], object]:
    """`weights_key` for `--dry-run`, reading weights only where it must: a local folder is its
    real path (a symlink is its target), any other name as given, except that folders whose
    token files have the same names and sizes are told apart by their content digest (an
    identical copy is the same model; a copy with an edited config of the same length is not).
    A hub id is never looked up (nothing is downloaded)."""
    from breakthrough.models.digest import token_files
    from breakthrough.models.loading import content_digest

    real: dict[str, Path] = {}
    for name in names:
        path = Path(name).expanduser()
        if path.is_dir():
            real[name] = path.resolve()
    shapes: dict[Path, tuple] = {}
    for folder in set(real.values()):
        try:
            files = token_files(folder)
            shapes[folder] = tuple(
                (f.relative_to(folder).as_posix(), f.stat().st_size) for f in files
            )
        except OSError:
            shapes[folder] = (str(folder),)
    alike: dict[tuple, list[Path]] = {}
    for folder, shape in shapes.items():
        alike.setdefault(shape, []).append(folder)
    keys: dict[str, object] = {}
    for name, folder in real.items():
        keys[name] = folder
        if len(alike[shapes[folder]]) > 1:
            try:
                keys[name] = content_digest(folder)
            except OSError:
                pass
    return lambda name: keys.get(name, name)


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
    return req if names == req.models else replace(req, models=names)


def plan_base(req: BaseRequest, say: Callable[[str], None] | None = None) -> list[RunPlan]:
    """`bt base --dry-run`: per model, the base traces still missing and their token bound
    (`say`: a note for a model named twice, `distinct_models`)."""
    from breakthrough.models.loading import model_alias

    req = distinct_models(req, folder_keys(req.models), say or (lambda line: None))
    rows = select_rows(load_cohort(req.cohort), req.problems, req.limit, req.cohort)
    cohort_name = Path(req.cohort).stem
    plans = []
    for name in req.models:
        alias = model_alias(name)
        run_dir = req.runs_dir / run_name(req.run, req.models, cohort_name, alias)
        done = {key[0] for key in stored_keys(run_dir, "base")[0]}
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
