"""`bt confirm RUN...`: protocol 9.5's confirmatory early-signal test over runs, end to end.

Reads each run's `bt signals` table (or, for a forecast point no table holds, the summaries
computed from its store), the `bt classify` labels and the cohort rows in its store; hands
them to the pure test (`breakthrough.signals.confirm`: the feature table, the frozen models,
ΔAUROC and its interval); writes what it found:

    OUT/confirm.json, OUT/confirm.csv      the results of one forecast point (the csv is the
                                           declared table `confirm`, docs/outputs.md)
    OUT/figures/confirmatory_forest.png    their forest figure
    OUT/t_<t>/confirm.{json,csv}           with --forecast-token t1,t2,…: each point's results,
    OUT/sweep.json, OUT/sweep.csv          one row per point (the table `sweep`), and
    OUT/figures/prefix_sweep.png           the sweep figure

Every check (options, runs, tables) happens before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.errors import BtError
from breakthrough.outputs import make_folder, write_atomic, write_json
from breakthrough.schemas.signals import CONFIRM, SWEEP
from breakthrough.schemas.write import write_csv
from breakthrough.signals.confirm import (
    DEFAULT_DRAWS,
    DEFAULT_FORECAST,
    ENDPOINTS,
    LOGISTIC,
    MIN_GROUPS_PER_CLASS,
    N_FOLDS,
    PLAN_SEED,
    REFIT_SEED,
    SECONDARY_THRESHOLD,
    VARIANTS,
    check_options,
    evaluate,
    feature_table,
    results_frame,
    sweep_row,
)
from breakthrough.signals.run_signals import OUTPUT_NAME as SIGNALS_NAME
from breakthrough.signals.summaries import FROZEN_SUMMARIES
from breakthrough.store import RunStore, find_runs, run_names
from breakthrough.tasks.cohorts import SPLITS

JSON_NAME, CSV_NAME = "confirm.json", "confirm.csv"
SWEEP_JSON, SWEEP_CSV = "sweep.json", "sweep.csv"
FIGURES_DIR = "figures"

# ----------------------------------------------------------------------------- one point


@dataclass
class ConfirmReport:
    """What `bt confirm` computed and wrote."""

    results: list[dict[str, Any]]
    summary: dict[str, Any]
    json_path: Path
    csv_path: Path


def _read_signals(path: Path, run: Path, forecast_token: int) -> pd.DataFrame:
    """RUN's `bt signals` table, checked: its columns, and summaries over the forecast point."""
    if not path.is_file():
        raise BtError(f"{path}: no signals file: run `bt signals {run}` first")
    frame = pd.read_parquet(path)
    missing = [
        c
        for c in (
            "sample_id",
            "cell_id",
            "kind",
            "observed_token_count",
            "correct",
            "window",
            *FROZEN_SUMMARIES,
        )
        if c not in frame.columns
    ]
    if missing:
        raise BtError(f"{path}: not a `bt signals` table (no column {missing[0]})")
    windows = sorted(set(int(w) for w in frame["window"].dropna()))
    if windows and windows != [forecast_token]:
        raise BtError(
            f"{path}: summaries over the first {windows[0]} tokens, not --forecast-token "
            f"{forecast_token}: run `bt signals RUN --window {forecast_token} --out FILE` "
            f"and pass it with --signals"
        )
    return frame


def _read_labels(path: Path, names: Sequence[str]) -> pd.DataFrame:
    """The classify labels of these runs (matched by the `run` names classify gave them)."""
    if not path.is_file():
        raise BtError(
            f"{path}: no classify labels: run `bt classify` on the runs first (or pass --labels)"
        )
    labels = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    for c in ("cell_id", "problem_id", "model", "instant"):
        if c not in labels.columns:
            raise BtError(f"{path}: not a `bt classify` labels table (no column {c})")
    if "run" not in labels.columns:
        if len(names) > 1:
            raise BtError(
                f"{path}: labels without a `run` column cannot be matched to "
                f"{len(names)} runs: run `bt classify` on them together"
            )
        labels = labels.assign(run=names[0])
    absent = [n for n in names if n not in set(labels["run"])]
    if absent:
        raise BtError(
            f"{path}: no labels for run {absent[0]}: run `bt classify` on "
            f"{' '.join(names)} first (or pass --labels)"
        )
    return labels[labels["run"].isin(names)].reset_index(drop=True)


def run_confirm(
    runs: Sequence[Path | str],
    labels: Path | str,
    out: Path | str,
    *,
    signals: Sequence[Path | str] | None = None,
    forecast_token: int = DEFAULT_FORECAST,
    split_seed: int | None = None,
    draws: int = DEFAULT_DRAWS,
    signal_frames: Sequence[pd.DataFrame] | None = None,
) -> ConfirmReport:
    """`bt confirm RUN...`: read each run's signals table (default RUN/signals.parquet), the
    classify labels and the cohort rows of its store, build the feature table, evaluate every
    endpoint × variant and write OUT/confirm.json and OUT/confirm.csv atomically. Every check
    happens before anything is written."""
    check_options(forecast_token, draws)
    found = find_runs(runs, study=True)  # folders that are no run, `bt sample` runs: a note each
    dirs = found.runs
    names = run_names(dirs)
    paths = [Path(p) for p in signals] if signals else [d / SIGNALS_NAME for d in dirs]
    if len(paths) != len(dirs):
        raise BtError(
            f"--signals: {len(paths)} given for {len(dirs)} runs (give one table per "
            f"run, in the runs' order)"
        )
    if signal_frames is not None:  # a sweep's summaries at this t (run_confirm_sweep)
        frames = [f.assign(run=n) for f, n in zip(signal_frames, names, strict=True)]
    else:
        frames = [
            _read_signals(p, d, forecast_token).assign(run=n)
            for p, d, n in zip(paths, dirs, names, strict=True)
        ]
    label_frame = _read_labels(Path(labels), names)
    items: dict[tuple[str, str], dict] = {}
    for d, n in zip(dirs, names, strict=True):
        with RunStore(d, readonly=True) as store:
            items |= {(n, cid): row for cid, row in store.items().items()}
    ft = feature_table(
        pd.concat(frames, ignore_index=True),
        label_frame,
        items,
        forecast_token=forecast_token,
        split_seed=split_seed,
    )
    results = [evaluate(ft.table, e, v, draws=draws) for e in ENDPOINTS for v in VARIANTS]
    if ft.secondary_budget is None:
        for r in results:
            if r["endpoint"] == "secondary":
                r.update(status="not fit", reason=ft.notes[0])
    t = ft.table
    summary = {
        "test": "protocol 9.5 confirmatory early-signal test",
        "runs": [str(d) for d in dirs],
        "signals": [str(p) for p in paths],
        "labels": str(labels),
        "forecast_token": forecast_token,
        "cells": {
            "labelled": len(label_frame),
            "included": len(t),
            "included_by_split": {s: int((t["split"] == s).sum()) for s in SPLITS},
            "problems": int(t["problem_id"].nunique()),
        },
        "excluded": ft.excluded,
        "splits": {
            "source": ft.split_source,
            "rule": (
                "the cohort rows' `split`"
                if split_seed is None
                else f"problems ordered by sha256('{split_seed}:problem_id'); the first "
                f"round(54/89 n) train, the next round(18/89 n) validation, the "
                f"rest test"
            ),
            "problems": {s: int(t.loc[t["split"] == s, "problem_id"].nunique()) for s in SPLITS},
        },
        "endpoints": {
            "primary": "eventual success of the base run (`correct`)",
            "secondary": (
                None
                if ft.secondary_budget is None
                else f"1{{R({ft.secondary_budget}) >= {SECONDARY_THRESHOLD}}} on "
                f"non-instant cells with R({ft.secondary_budget}) measured"
            ),
            "secondary_restart_budget": ft.secondary_budget,
        },
        "model": {
            "logistic_regression": LOGISTIC,
            "numeric": "median imputation + StandardScaler",
            "categorical": "most-frequent imputation + one-hot",
            "calibration": None,
        },
        "seeds": {"oof_folds": PLAN_SEED, "refit": REFIT_SEED, "bootstrap": REFIT_SEED},
        "oof": {
            "folds": N_FOLDS,
            "grouped_by": "problem_id",
            "power_gate_problems_per_class": MIN_GROUPS_PER_CLASS,
        },
        "bootstrap": {"draws": draws, "clustered_by": "problem_id", "interval": "percentile 95%"},
        "notes": found.notes + ft.notes,
        "results": results,
    }
    out_dir = make_folder(out)
    json_path, csv_path = out_dir / JSON_NAME, out_dir / CSV_NAME
    write_json(json_path, summary)
    write_csv(CONFIRM, results_frame(results), csv_path)
    if signal_frames is None:  # one forecast point: its forest figure beside its results
        from breakthrough.signals.confirm_figures import forest_figure

        forest_figure(results, forecast_token, out_dir / FIGURES_DIR / "confirmatory_forest.png")
    return ConfirmReport(results=results, summary=summary, json_path=json_path, csv_path=csv_path)


# ------------------------------------------------------------------ the forecast-point sweep


def base_signals(run: Path, window: int) -> pd.DataFrame:
    """The summaries of RUN's base trajectories over their first `window` tokens, computed from
    the store as `bt signals RUN --window window` computes them (only base rows: the test reads
    nothing else)."""
    from breakthrough.signals.run_signals import ID_COLUMNS, summary_rows

    with RunStore(run, readonly=True) as store:
        frame = store.samples_frame(kind="base", signals=True)
    return pd.DataFrame(
        summary_rows(frame, window), columns=[*ID_COLUMNS, "window", *FROZEN_SUMMARIES]
    )


def _signals_at(path: Path, run: Path, t: int) -> tuple[pd.DataFrame, str]:
    """RUN's summaries at forecast point t for a sweep: its signals table when that holds
    window t, else computed from the store; (frame, where they came from)."""
    if path.is_file():
        frame = pd.read_parquet(path)
        windows = sorted(set(int(w) for w in frame.get("window", pd.Series(dtype=float)).dropna()))
        if windows == [t]:
            return _read_signals(path, run, t), str(path)
    return base_signals(run, t), f"{run} (store, window {t})"


@dataclass
class SweepReport:
    """What `bt confirm --forecast-token t1,t2,...` computed and wrote."""

    reports: dict[int, ConfirmReport]  # t → that forecast point's report (OUT/t_<t>/)
    table: pd.DataFrame  # one row per t
    json_path: Path
    csv_path: Path
    figures: dict[str, Path]


def run_confirm_sweep(
    runs: Sequence[Path | str],
    labels: Path | str,
    out: Path | str,
    *,
    tokens: Sequence[int],
    signals: Sequence[Path | str] | None = None,
    split_seed: int | None = None,
    draws: int = DEFAULT_DRAWS,
) -> SweepReport:
    """`bt confirm RUN... --forecast-token t1,t2,...`: the unchanged pipeline at every t (each
    run's signals table when it holds window t, else the summaries computed from its store),
    each t's confirm.json / confirm.csv under OUT/t_<t>/, the pre-registered t = 512's also at
    OUT/confirm.{json,csv}; OUT/sweep.{json,csv} with one row per t; the sweep figure and the
    confirmatory forest (at 512, else the first t) under OUT/figures/."""
    from breakthrough.signals.confirm_figures import forest_figure, sweep_figure

    for t in tokens:
        check_options(int(t), draws)
    dirs = find_runs(runs, study=True).runs
    paths = [Path(p) for p in signals] if signals else [d / SIGNALS_NAME for d in dirs]
    if len(paths) != len(dirs):
        raise BtError(
            f"--signals: {len(paths)} given for {len(dirs)} runs (give one table per "
            f"run, in the runs' order)"
        )
    _read_labels(Path(labels), run_names(dirs))  # refused before any work
    out_dir = Path(out)
    reports: dict[int, ConfirmReport] = {}
    sources: dict[int, list[str]] = {}
    for t in sorted(int(x) for x in tokens):
        got = [_signals_at(p, d, t) for p, d in zip(paths, dirs, strict=True)]
        sources[t] = [src for _, src in got]
        reports[t] = run_confirm(
            runs,
            labels,
            out_dir / f"t_{t}",
            forecast_token=t,
            split_seed=split_seed,
            draws=draws,
            signal_frames=[f for f, _ in got],
        )
    table = pd.DataFrame([sweep_row(t, r.results) for t, r in reports.items()])
    main = DEFAULT_FORECAST if DEFAULT_FORECAST in reports else min(reports)
    for name in (JSON_NAME, CSV_NAME):
        src = getattr(reports[main], "json_path" if name == JSON_NAME else "csv_path")

        def copy(path: Path, source: Path = src) -> None:
            path.write_bytes(source.read_bytes())

        write_atomic(out_dir / name, copy)
    json_path, csv_path = out_dir / SWEEP_JSON, out_dir / SWEEP_CSV
    negative = int(
        sum((table[f"{e}_delta"].dropna() < 0).sum() for e in ENDPOINTS if f"{e}_delta" in table)
    )
    estimates = int(
        sum(table[f"{e}_delta"].notna().sum() for e in ENDPOINTS if f"{e}_delta" in table)
    )
    doc = {
        "test": "protocol 9.5 post-hoc forecast-point sweep (same pipeline at every t)",
        "forecast_tokens": list(reports),
        "preregistered": DEFAULT_FORECAST,
        "variant": "main",
        "signals": {str(t): s for t, s in sources.items()},
        "negative_estimates": negative,
        "estimates": estimates,
        "ci_including_zero": int(
            sum(
                ((table[f"{e}_ci_low"] <= 0) & (table[f"{e}_ci_high"] >= 0)).sum()
                for e in ENDPOINTS
                if f"{e}_ci_low" in table
            )
        ),
        "rows": table.to_dict(orient="records"),
        "reports": {str(t): str(r.json_path) for t, r in reports.items()},
    }
    write_json(json_path, doc)
    write_csv(SWEEP, table, csv_path)
    figs = {
        "prefix_sweep": sweep_figure(table, out_dir / FIGURES_DIR / "prefix_sweep.png"),
        "confirmatory_forest": forest_figure(
            reports[main].results, main, out_dir / FIGURES_DIR / "confirmatory_forest.png"
        ),
    }
    return SweepReport(
        reports=reports, table=table, json_path=json_path, csv_path=csv_path, figures=figs
    )
