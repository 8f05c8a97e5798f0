"""Turns store state into generation work and writes the results back (design: scheduler).

The base phase reads like protocol section 2: for every problem x model cell without a base
trace, one prefill of the chat prompt, sampling up to `base_max_tokens` with seed 11, stop only
at EOS; segment the tokens (3.2), grade the whole decoded text (7), store everything. Each
finished sample is committed on its own, so a kill loses at most the samples in flight and a
rerun resumes with exactly the missing cells."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from breakthrough.errors import BtError
from breakthrough.protocol import Protocol
from breakthrough.store import RunStore, SampleRecord

PACKAGES = ("mlx", "mlx-lm", "math-verify", "transformers", "numpy", "breakthrough")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def cell_id(alias: str, problem_id: str) -> str:
    """docs/interfaces.md: a cell is one problem x one model."""
    return f"{alias}:{problem_id}"


def run_manifest(
    loaded: Any, rows: Sequence[dict], protocol: Protocol, cohort: str, cohort_digest: str, variant: str
) -> dict:
    """What defines the run (identity fields, see store.IDENTITY_FIELDS) plus what documents it.
    `cohort_digest` is of the whole cohort file, so --limit/--problems subsets share one run."""
    families = sorted({str(r.get("family", "math")) for r in rows})
    return {
        "model_id": loaded.model_id,
        "model_alias": loaded.alias,
        "model_revision": loaded.revision,
        "family": loaded.family.name,
        "task_family": ",".join(families),
        "protocol_digest": protocol.identity_digest(),
        "protocol": protocol.identity(),
        "cohort": cohort,
        "cohort_digest": cohort_digest,
        "prompt_version": f"{protocol.prompt_version}/{variant}" if families != ["math"] else protocol.prompt_version,
        "packages": package_versions(),
        "platform": f"{platform.system()} {platform.machine()}",
    }


@dataclass
class BaseReport:
    """What one `bt base` call did for one model (the summary table's rows come from the store)."""

    run_dir: Path
    todo: int
    generated: int
    tokens: int
    elapsed_s: float
    skipped: int = 0
    finish: dict[str, int] = field(default_factory=dict)


def grader_for(rows: Sequence[dict], run_dir: Path):
    families = {str(r.get("family", "math")) for r in rows}
    if len(families) != 1:
        raise BtError(f"a run holds one task family; the cohort mixes {sorted(families)}")
    family = families.pop()
    if family == "math":
        from breakthrough.grading.math import MathGrader

        return MathGrader(cache_path=run_dir / "grade_cache.sqlite")
    from breakthrough.grading.base import get_grader

    return get_grader(family)


def run_base(
    *,
    loaded: Any,
    rows: Sequence[dict],
    cohort: str,
    cohort_digest: str,
    run_dir: Path,
    protocol: Protocol,
    batch_size: int = 8,
    variant: str = "plain",
    on_start: Callable[[int, Any], None] | None = None,
    on_sample: Callable[[SampleRecord, Any], None] | None = None,
) -> BaseReport:
    """Generate, segment, grade and store the missing base traces of `rows` for one model.

    `on_start(n_todo, engine)` and `on_sample(record, grade)` let the CLI drive a progress bar."""
    from breakthrough.engine.base import GenRequest
    from breakthrough.engine.mlx_engine import MlxEngine
    from breakthrough.models import build_prompt_ids
    from breakthrough.segments import reasoning_length, segment_ids
    from breakthrough.tasks import user_message

    store = RunStore(run_dir, create=True)
    try:
        store.ensure_manifest(run_manifest(loaded, rows, protocol, cohort, cohort_digest, variant))
        cells = []
        for row in rows:
            msg = user_message(row, variant)
            try:
                prompt = build_prompt_ids(
                    loaded.tokenizer, loaded.family, msg, max_prompt_tokens=protocol.max_prompt_tokens
                )
            except BtError as exc:
                raise BtError(f"problem {row['id']}: {exc}") from None
            cells.append({"cell_id": cell_id(loaded.alias, row["id"]), "model": loaded.alias,
                          "item": row, "prompt_ids": prompt})
        store.add_cells(cells)
        done = {key[0] for key in store.existing_keys("base")}
        todo = [c for c in cells if c["cell_id"] not in done]
        by_id = {c["cell_id"]: c for c in todo}
        engine = MlxEngine.from_loaded(loaded, batch_size=batch_size)
        if on_start:
            on_start(len(todo), engine)
        requests: Iterator[GenRequest] = (
            GenRequest(
                key=c["cell_id"],
                prompt=c["prompt_ids"],
                max_tokens=protocol.base_max_tokens,
                seed=protocol.base_seed,
                sampling=protocol.sampling,
            )
            for c in todo
        )
        report = BaseReport(run_dir=run_dir, todo=len(todo), generated=0, tokens=0, elapsed_s=0.0,
                            skipped=len(cells) - len(todo))
        t0 = time.perf_counter()
        grader = grader_for(rows, run_dir)
        try:
            for res in engine.generate(requests):
                cell = by_id[res.key]
                tokens = np.asarray(res.tokens, dtype=np.int32)
                text = decode(loaded.tokenizer, res.tokens)
                segments = segment_ids(loaded.tokenizer, res.tokens, loaded.family)
                rec = SampleRecord(
                    cell_id=res.key, kind="base", anchor=-1, budget=0, branch=0,
                    seed=protocol.base_seed, prefix_len=0, token_ids=tokens, text=text,
                    finish_reason=res.finish_reason, segments=segments, logprobs=res.logprobs,
                    entropies=res.entropies, sampling_entropies=res.sampling_entropies,
                    elapsed_s=res.elapsed_s,
                    peak_mem_mb=res.peak_memory_bytes / 2**20,
                    extra={"prompt_tokens": res.prompt_tokens},
                )
                grade = grader.grade(text, cell["item"], res.finish_reason)
                store.add_samples([rec], [grade], reasoning_tokens={res.key: reasoning_length(segments)})
                report.generated += 1
                report.tokens += len(res.tokens)
                report.finish[res.finish_reason] = report.finish.get(res.finish_reason, 0) + 1
                if on_sample:
                    on_sample(rec, grade)
        finally:
            getattr(grader, "close", lambda: None)()
        report.elapsed_s = time.perf_counter() - t0
        return report
    finally:
        store.close()


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text graders see: special tokens kept, no clean-up (protocol 2.1 step 5)."""
    return tokenizer.decode(
        [int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
