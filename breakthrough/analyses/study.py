"""`bt report study RUN...`: one self-contained HTML page across both halves of the study.

Reads every run (labels under its stored protocol, as `bt classify` makes them; written under
OUT/classify with the per-cell pages), the results of `bt confirm` (OUT of `bt confirm`: by
default the `confirm` folder beside the runs' classify folder) and of `bt probe` (RUN/probe by
default), and writes:

    OUT/index.html        the page: every headline number as the sentence it supports
                          (`report.headlines`), its table, the figures the runs have data for,
                          and what is missing with the command that would produce it
    OUT/figures/*.png     the figures of protocol 10 the runs have data for
    OUT/tables/*.{csv,parquet}   every table the page shows
    OUT/headlines.json    every sentence and the numbers it holds
    OUT/classify/         `bt classify`'s outputs for the same runs (cells table, cell pages)

This module decides what the page holds (reading, headlines, figures, what is missing); the
page itself is `breakthrough.report.study.write_page`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.analyses.classify_run import classify_runs, default_out_dir
from breakthrough.classify.settings import DRAWS, SEED, ClassifySettings
from breakthrough.errors import BtError
from breakthrough.outputs import write_atomic
from breakthrough.report import headlines as HL
from breakthrough.report.names import model_name
from breakthrough.report.study import PROBE_FIGURE, PROBE_SUMMARY, Missing, write_page
from breakthrough.schemas import study as schemas
from breakthrough.schemas.write import write_document, write_frame
from breakthrough.store import find_runs


@dataclass
class StudyReport:
    """What `bt report study` wrote."""

    out_dir: Path
    index: Path
    headlines: list[HL.Headline]
    figures: dict[str, Path]
    tables: list[Path]
    missing: list[Missing] = field(default_factory=list)
    notes: list[str] = field(
        default_factory=list
    )  # `bt classify`'s (skipped runs, unlabelled cells)


def default_study_dir(runs: Sequence[Path]) -> Path:
    """RUN/study for one run, else <common parent of the runs>/study."""
    roots = [Path(r) for r in runs]
    if len(roots) == 1:
        return roots[0] / "study"
    return Path(os.path.commonpath([str(p.resolve()) for p in roots])) / "study"


def default_confirm_dir(runs: Sequence[Path]) -> Path:
    """Where `bt confirm RUN...` writes by default: beside the runs' classify folder."""
    return default_out_dir(runs).parent / "confirm"


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BtError(f"{path}: unreadable JSON ({exc})") from None


def check_inputs(
    runs: Sequence[Path], confirm: Path | None, probes: Sequence[Path] | None
) -> list[Path]:
    """The run directories, refused before anything is written: no run, a --confirm folder
    without confirm.json, a --probe folder without probe_summary.json."""
    dirs = find_runs(runs, study=True).runs
    if confirm is not None and not (Path(confirm) / "confirm.json").is_file():
        raise BtError(
            f"--confirm: {confirm} holds no confirm.json (the output folder of `bt confirm`)"
        )
    for p in probes or []:
        if not (Path(p) / PROBE_SUMMARY).is_file():
            raise BtError(
                f"--probe: {p} holds no {PROBE_SUMMARY} (the output folder of `bt probe`)"
            )
    return dirs


def _copy(src: Path, dst: Path) -> Path:
    return write_atomic(dst, lambda tmp: shutil.copyfile(src, tmp))


def _a2_table(classify_dir: Path) -> pd.DataFrame:
    path = classify_dir / "a2.parquet"
    return pd.read_parquet(path) if path.is_file() else pd.DataFrame()


A2_BUDGET = 4096  # the study's second arm (protocol 3.6): B2 = 4 x its B = 1,024


def _a2_work(dirs: Sequence[Path]) -> dict[Path, int]:
    """Each run's A2 work: the probe samples `bt continue RUN --add-budget A2_BUDGET` would
    generate (`pipeline.budget_arm.arm_work`, the count that command itself plans with), so
    the page never names the command for a run where it would say "nothing to do" (targets
    without a base trace, or whose anchors leave no room for B2 within the total cap)."""
    from breakthrough.pipeline.budget_arm import arm_work
    from breakthrough.store import RunStore

    out = {}
    for d in dirs:
        with RunStore(d, readonly=True) as store:
            try:
                out[d] = arm_work(store, A2_BUDGET).missing
            except BtError:  # the arm is refused here (B2 is the run's B, no probes yet)
                out[d] = 0
    return out


NO_COMMAND = "none for these runs"


def _missing(
    labels: pd.DataFrame,
    found: Mapping[str, Any],
    runs: str,
    confirm_dir: Path,
    *,
    planned: int = 0,
    restart_budgets: int = 2,
    a2_work: Mapping[Path, int] | None = None,
) -> list[Missing]:
    """Every headline or figure the runs hold no data for, why, and the command that, run,
    produces it; where no command can with these runs (their top-ups are stored, they hold no
    such cell), the hint says so and what would (more cells, a new run) instead of naming a
    command that does nothing. `planned`: top-up items the runs' terminal,ambiguous plan still
    holds; `restart_budgets`: how many the runs' protocol has; `a2_work`: run → the
    probe samples an A2 arm at `A2_BUDGET` would generate."""
    out = []
    more = "more problems or models may hold one (bt base --cohort COHORT; bt continue)"
    topup_done = "; the top-ups these runs are owed are stored (`bt status` plans none)"
    if labels.empty:
        out.append(
            Missing(
                "labels (every number below)",
                "no run holds probed cells",
                f"bt base …; bt continue {runs}",
            )
        )
    elif labels["model"].nunique() < 2:
        out.append(
            Missing(
                "cross-model agreement (9.1)",
                f"the runs hold one model ({model_name(labels['model'].iloc[0])})",
                "bt base --cohort COHORT --model gemma4-e4b,ministral3-3b; bt continue; "
                "then list both runs",
            )
        )
    if "dose_response" not in found and len(labels):
        if restart_budgets < 2:  # a run keeps its restart budgets: another --restarts is refused
            out.append(
                Missing(
                    "restart dose-response (9.2)",
                    "the runs measure restarts at one "
                    "budget, and a run keeps the budgets it was continued with",
                    "a new run: bt base --cohort COHORT --run NEW; bt continue "
                    "runs/NEW --restarts 1024,2048,4096,8192",
                )
            )
        else:
            out.append(
                Missing(
                    "restart dose-response (9.2)",
                    "no non-instant cell has restarts at two budgets",
                    f"{NO_COMMAND}: {more}",
                )
            )
    for key, what, why in (
        (
            "matched_compute",
            "matched compute (9.3)",
            "no cell has an A1 terminal event (a "
            "censored trajectory whose replicated final anchor reached τ)",
        ),
        ("topup_resolution", "top-up resolution (3.5, 9.4)", "no probe cell holds 8 branches"),
    ):
        if key in found or not len(labels):
            continue
        if planned:
            out.append(Missing(what, why, f"bt continue {runs} --topup terminal,ambiguous"))
        else:
            out.append(Missing(what, why + topup_done, f"{NO_COMMAND}: {more}"))
    if "a2" not in found:
        targets = [str(d) for d, n in (a2_work or {}).items() if n]
        if targets or a2_work is None:
            out.append(
                Missing(
                    "continuation-budget falsification (3.6, A2)",
                    "no run holds a second probe arm",
                    f"bt continue {' '.join(targets) or runs} --add-budget {A2_BUDGET}",
                )
            )
        else:
            out.append(
                Missing(
                    "continuation-budget falsification (3.6, A2)",
                    "no run holds a second probe arm, and no run has an A2 target (a "
                    "non-instant T_F event) with a base trace and room for "
                    f"B2={A2_BUDGET} within the total cap",
                    f"{NO_COMMAND}: {more}",
                )
            )
    if "confirmatory" not in found:
        out.append(
            Missing(
                "confirmatory early-signal test (9.5) and its forest figure",
                f"no confirm.json in {confirm_dir}",
                f"bt signals RUN (each run); bt confirm {runs}",
            )
        )
    if "sweep" not in found:
        out.append(
            Missing(
                "forecast-point sweep (9.5, post-hoc)",
                f"no sweep.json in {confirm_dir}",
                f"bt confirm {runs} --forecast-token 128,256,512,1024,2048",
            )
        )
    if "probe_dissection" not in found:
        out.append(
            Missing(
                "probe dissection (9.8)",
                "no bt probe output (RUN/probe)",
                "bt probe RUN (or a public dump: bt probe DUMP --model …)",
            )
        )
    out.append(
        Missing(
            "difficulty ceilings (9.6, 9.7)",
            "computed from public datasets (OpenR1, GPQA), not from runs",
            "bt auroc TABLE --group problem --score loo_pass_rate --label correct",
        )
    )
    return out


def study_report(
    runs: Sequence[Path | str],
    out: Path | str | None = None,
    *,
    confirm: Path | str | None = None,
    probes: Sequence[Path | str] | None = None,
    draws: int = DRAWS,
    seed: int = SEED,
    cell_pages: bool = True,
) -> StudyReport:
    """`bt report study RUN...` (see module doc). `confirm`: a `bt confirm` output folder
    (default `default_confirm_dir`, used when it exists); `probes`: `bt probe` output folders
    (default: RUN/probe of each run that has one)."""
    roots = [Path(r) for r in runs]
    dirs = check_inputs(
        roots, Path(confirm) if confirm else None, [Path(p) for p in probes] if probes else None
    )
    out_dir = Path(out) if out is not None else default_study_dir(roots)
    confirm_dir = Path(confirm) if confirm else default_confirm_dir(roots)
    probe_dirs = (
        [Path(p) for p in probes]
        if probes
        else [d / "probe" for d in dirs if (d / "probe" / PROBE_SUMMARY).is_file()]
    )

    settings = ClassifySettings(draws=draws, seed=seed)
    cl = classify_runs(roots, out_dir / "classify", settings=settings, cell_pages=cell_pages)
    dirs = cl.runs  # the study runs: no `bt sample` run, no output folder (cl.notes says so)
    runs_text = " ".join(str(r) for r in dirs)  # a hint names only the runs it would fill
    summary, labels = cl.summary, cl.paths["labels"]
    protocol = next(iter(cl.results.values())).protocol
    budgets = sorted({int(c) for r in cl.results.values() for c in r.protocol.restart_budgets})
    confirm_doc = _read_json(confirm_dir / "confirm.json")
    sweep_doc = _read_json(confirm_dir / "sweep.json")
    probe_docs = {
        f"{p.parent.name}/{p.name}": d for p in probe_dirs if (d := _read_json(p / PROBE_SUMMARY))
    }

    heads = [
        h
        for h in (
            HL.regime_summary(labels),
            HL.tv_events(labels),
            HL.delta_sensitivity(
                labels,
                summary.get("deltas", list(protocol.deltas)),
                summary.get("primary_delta", protocol.delta),
            ),
            HL.cross_model(labels),
            HL.dose_response(labels, budgets, protocol.tau),
            HL.matched_compute(labels, budgets, protocol.tau),
            HL.topup_resolution(summary.get("topup_resolution", []), protocol.topup_samples),
            HL.label_hardening(summary.get("label_hardening", [])),
            HL.a2(_a2_table(out_dir / "classify"), summary.get("a2", {})),
            HL.confirmatory(confirm_doc, sweep_doc),
            HL.probe_dissection(probe_docs),
        )
        if h is not None
    ]
    found = {h.key for h in heads} | ({"sweep"} if sweep_doc else set())

    figures: dict[str, Path] = {}
    fig_dir = out_dir / "figures"
    for name, path in cl.paths["figures"].items():
        figures[name] = _copy(Path(path), fig_dir / f"{name}.png")
    for name in ("prefix_sweep", "confirmatory_forest"):
        src = confirm_dir / "figures" / f"{name}.png"
        if src.is_file() and (name != "prefix_sweep" or sweep_doc):
            figures[name] = _copy(src, fig_dir / f"{name}.png")
    for i, p in enumerate(probe_dirs):
        if (p / PROBE_FIGURE).is_file():
            name = "probe_dissection" if i == 0 else f"probe_dissection_{i + 1}"
            figures[name] = _copy(p / PROBE_FIGURE, fig_dir / f"{name}.png")
    if labels.empty or "matched_compute" not in found:
        figures.pop("matched_compute", None)  # an empty axes is not a figure of the data
    if "topup_resolution" not in found:
        figures.pop("topup_resolution", None)
    if "dose_response" not in found:
        figures.pop("dose_response", None)

    tables: list[Path] = []
    for h in heads:
        for name, frame in h.tables.items():
            if frame is not None and len(frame.columns):
                tables += write_frame(schemas.BY_KEY[name], frame, out_dir / "tables" / name)
    missing = _missing(
        labels,
        {**{k: 1 for k in found}},
        runs_text,
        confirm_dir,
        planned=cl.plan_items,
        restart_budgets=len(budgets),
        a2_work=None if "a2" in found else _a2_work(dirs),  # planned only for the hint
    )
    doc = {
        "runs": [str(d) for d in dirs],
        "protocol": protocol.to_dict(),
        "headlines": [
            {
                "key": h.key,
                "title": h.title,
                "sentences": h.sentences,
                "numbers": h.numbers,
                "figures": [f for f in h.figures if f in figures],
            }
            for h in heads
        ],
        "missing": [m.__dict__ for m in missing],
    }
    write_document(schemas.HEADLINES, doc, out_dir / "headlines.json")

    index = write_page(
        out_dir / "index.html",
        runs=dirs,
        summary=summary,
        labels=labels,
        protocol=protocol,
        budgets=budgets,
        heads=heads,
        figures=figures,
        gaps=cl.paths.get("figure_gaps", {}),
        missing=missing,
        classify_index=cl.index,
        tables=tables,
    )
    return StudyReport(
        out_dir=out_dir,
        index=index,
        headlines=heads,
        figures=figures,
        tables=tables,
        missing=missing,
        notes=cl.notes,
    )
