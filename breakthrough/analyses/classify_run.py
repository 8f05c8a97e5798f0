"""`bt classify RUN...` end to end: each run's store in, labels, plans and summary out, written by
`breakthrough.report.classify_outputs.write_outputs`.

`classify_runs` reads every run whole from its store, including the protocol it was made
under (`RunStore.protocol()`: a run without one is refused, never re-inferred from its
samples; a `bt sample` run, independent attempts, is no study run and is skipped), labels it
with `breakthrough.classify.frames.classify_frames` and hands the results to `write_outputs`
(the files it writes are listed there). `labels_dir` finds the classify folder a later command
(`bt confirm`) reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.classify.completeness import STATUSES, owed_grids
from breakthrough.classify.frames import ClassifyResult, classify_frames
from breakthrough.classify.settings import DEFAULT_SETTINGS, ClassifySettings
from breakthrough.report.cell_details import CellDetail, cell_details, problem_line, problem_text
from breakthrough.report.classify_outputs import write_outputs
from breakthrough.store import RunStore, find_runs, run_names


@dataclass
class ClassifyReport:
    """What `bt classify` wrote: the combined summary, the report's top page and the plan."""

    out_dir: Path
    index: Path
    summary: dict
    results: dict[str, ClassifyResult]  # run name → result
    paths: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what the command says beside the tables
    runs: list[Path] = field(default_factory=list)  # the run directories classified

    @property
    def plan_items(self) -> int:
        """Items of the chosen --topup plan over all runs."""
        return sum(len(r.plan) for r in self.results.values())


def default_out_dir(runs: Sequence[Path]) -> Path:
    """RUN/classify for one run, else <common parent of the runs>/classify."""
    roots = [Path(r) for r in runs]
    if len(roots) == 1:
        return roots[0] / "classify"
    return Path(os.path.commonpath([str(p.resolve()) for p in roots])) / "classify"


def labels_dir(runs: Sequence[Path]) -> Path:
    """The classify folder whose labels a later command (`bt confirm RUN...`) reads: the
    first of `default_out_dir(runs)` (what `bt classify` with the same arguments writes), each
    run's own RUN/classify and its parent's classify folder (what `bt classify runs/` writes)
    whose summary labels every one of the runs; `default_out_dir(runs)` when none does (the
    reader then says how to make it)."""
    first = default_out_dir(runs)
    dirs = find_runs(runs, study=True).runs
    names = {d.name for d in dirs}
    candidates = [first] + [c for d in dirs for c in (d / "classify", d.parent / "classify")]
    for cand in dict.fromkeys(candidates):
        try:
            held = set(json.loads((cand / "summary.json").read_text(encoding="utf-8"))["runs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (cand / "labels.parquet").is_file() and names <= held:
            return cand
    return first


def classify_runs(
    runs: Sequence[Path],
    out: Path | None = None,
    *,
    settings: ClassifySettings = DEFAULT_SETTINGS,
    cell_pages: bool = True,
) -> ClassifyReport:
    """`bt classify RUN...`: classify every run (run directories or folders of them) under its
    stored protocol (`settings`' τ, δ, prior and band override it when given) and write every
    output under `out` (default `default_out_dir(runs)`)."""
    results: dict[str, ClassifyResult] = {}
    details: dict[str, dict[str, CellDetail]] = {}
    problems: dict[str, dict[str, str | None]] = {}
    dirs, notes = study_runs(runs)
    for d, name in zip(dirs, run_names(dirs), strict=True):
        with RunStore(d, readonly=True) as store:
            protocol = store.protocol()
            samples = store.samples_frame(arrays=False)
            cells = store.cells_frame()
            items = store.items()
            # the anchors each cell's base trace asks probes at: a cell whose probe rows were
            # lost is unfinished (as `bt status` says), never labelled from what is left
            grids = owed_grids(store.base_segments(), protocol)
            base_gone = store.base_trace_gone()  # a lost base trace, likewise
        results[name] = classify_frames(
            samples,
            cells,
            protocol=protocol,
            settings=settings,
            grids=grids,
            base_gone=base_gone,
        )
        if cell_pages:
            details[name] = cell_details(
                samples, items, dict(zip(cells["cell_id"], cells["answer"], strict=True))
            )
        problems[name] = {cid: problem_line(problem_text(item)) for cid, item in items.items()}
    out_dir = default_out_dir(runs) if out is None else Path(out)
    paths = write_outputs(
        results, out_dir, cell_pages=cell_pages, details=details, problems=problems
    )
    notes += result_notes(results)
    return ClassifyReport(
        out_dir=out_dir,
        index=paths["index"],
        summary=paths["summary_obj"],
        results=results,
        paths=paths,
        notes=notes,
        runs=dirs,
    )


def study_runs(runs: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """(the study runs among `runs`, notes): `store.find_runs(runs, study=True)`, which skips
    folders that are no run and `bt sample` runs, one note each. Refused when no study run is
    left."""
    found = find_runs(runs, study=True)
    return found.runs, found.notes


def result_notes(results: Mapping[str, ClassifyResult]) -> list[str]:
    """The notes of the classified runs: the cells left unlabelled (one note, every run), and
    the restart cells whose R counts attempts no rule of the study's wave 3 would have."""
    notes = []
    frames = [r.unfinished for r in results.values() if len(r.unfinished)]
    if frames:
        un = pd.concat(frames, ignore_index=True)
        parts = [f"{(un['status'] == s).sum()} {s}" for s in STATUSES if (un["status"] == s).any()]
        notes.append(
            f"left {len(un)} cell{'s' if len(un) != 1 else ''} unlabelled ({', '.join(parts)}): "
            f"a cell gets a regime once its probes and restarts are stored (`bt status` says "
            f"what each lacks; `bt continue` runs it); unfinished.csv lists them"
        )
    whole = sum(r.restarts_whole for r in results.values())
    if whole:
        m = next(iter(results.values())).protocol.restart_samples
        notes.append(
            f"{whole} restart cell{'s' if whole != 1 else ''} hold{'s' if whole == 1 else ''} more "
            f"than {m} attempts with 0/{m} or {m}/{m} in the first {m} (the study's wave 3 never "
            f"enlarged one): R counts all of them, as the protocol's development/supplement "
            f"pooled restart panel does (section 4)"
        )
    return notes
