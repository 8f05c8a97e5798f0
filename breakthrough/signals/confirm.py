"""`bt confirm`: protocol 9.5's confirmatory early-signal test, as frozen before it was run.

Question: do the 15 frozen summaries of a base trajectory's first 512 tokens (`bt signals`)
forecast a cell's outcome beyond what is known about the problem before it is attempted? One
row per cell (its base run's summaries at the forecast point, joined by cell with the labels
of `bt classify` and the cohort row the cell was made from); two logistic models fitted on
train + validation and scored once on test:

* `baseline`: the difficulty columns {dataset, level, category, problem_character_count,
  problem_token_proxy_count, problem_numeric_count, problem_operator_count,
  problem_equation_count} and what is known at the forecast point {model_key,
  observed_token_count, forecast_token};
* `early_blocks`: baseline + the 15 frozen summaries (`summaries.FROZEN_SUMMARIES`).

The statistic is ΔAUROC = AUROC(early_blocks) − AUROC(baseline) on the same test rows, with a
95% percentile interval over problem-clustered bootstrap draws (all cells of a problem, both
models', travel together; a draw holding one class has no AUROC: it is skipped and counted);
the test succeeds iff the interval's lower end is above 0. Why so rigid: the plan was registered
before the test split was scored; every hyper-parameter and seed below is the registered one, and
the post-hoc sweep over forecast points (`--forecast-token`) reuses the pipeline unchanged.

Endpoints: `primary` = eventual success of the base run (`correct`); `secondary` =
1{R(4096) ≥ 0.75} on non-instant cells whose R(4096) was measured (a run without a 4,096-token
restart uses its largest restart length, named in the output). Each has a `level-free` variant
without `level`. An endpoint that cannot be fitted (fewer than 5 problems of a class in
train + validation, a one-class test set) is reported "not fit" with the reason, never an error.

Problem-text counts (the difficulty columns read from the cohort row's `problem`; NaN, then
median-imputed, where a row has no text):

* problem_character_count: `len(text)`, every character;
* problem_token_proxy_count: whitespace-separated pieces, `len(text.split())`;
* problem_numeric_count: matches of `-?\\d+(?:\\.\\d+)?` (integers and decimals, an optional
  leading minus);
* problem_operator_count: matches of `[+\\-*/=<>]` (one per character);
* problem_equation_count: the number of `=` characters.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from breakthrough.errors import BtError
from breakthrough.outputs import make_folder, write_atomic, write_json
from breakthrough.protocol import (
    CONFIRM_FORECAST_TOKEN,
    CONFIRM_SECONDARY_BUDGET,
    CONFIRM_SECONDARY_THRESHOLD,
)
from breakthrough.signals.run_signals import OUTPUT_NAME as SIGNALS_NAME
from breakthrough.signals.summaries import FROZEN_SUMMARIES
from breakthrough.stats import auroc, bootstrap_decomposition, percentile_interval
from breakthrough.store import RunStore, find_runs, run_names
from breakthrough.tasks.cohorts import SPLITS

# ------------------------------------------------------------------ the registered constants
PLAN_SEED = 20260827  # StratifiedGroupKFold of the train-side OOF sanity check
REFIT_SEED = PLAN_SEED + 10_000  # the final refit and the bootstrap ("where a seed applies")
N_FOLDS = 5
MIN_GROUPS_PER_CLASS = 5  # power gate: problems per class in train + validation
DEFAULT_FORECAST = CONFIRM_FORECAST_TOKEN
DEFAULT_DRAWS = 2000
SECONDARY_BUDGET = CONFIRM_SECONDARY_BUDGET
SECONDARY_THRESHOLD = CONFIRM_SECONDARY_THRESHOLD
LOGISTIC = {"C": 0.1, "solver": "liblinear", "max_iter": 5000, "class_weight": "balanced"}

# --split-seed: 54 train / 18 validation / 17 test of 89 problems (protocol 6.4), as shares.
SPLIT_COUNTS = {"train": 54, "validation": 18, "test": 17}

DIFFICULTY_COLUMNS = (
    "dataset",
    "level",
    "category",
    "problem_character_count",
    "problem_token_proxy_count",
    "problem_numeric_count",
    "problem_operator_count",
    "problem_equation_count",
)
KNOWN_AT_FORECAST = ("model_key", "observed_token_count", "forecast_token")
CATEGORICAL = ("dataset", "category", "model_key")  # one-hot; the others are numeric
ENDPOINTS = ("primary", "secondary")
VARIANTS = ("main", "level-free")
LABELS_NAME = "labels.parquet"
JSON_NAME, CSV_NAME = "confirm.json", "confirm.csv"

_NUMERIC = r"-?\d+(?:\.\d+)?"
_OPERATOR = r"[+\-*/=<>]"


def problem_text_counts(text: str | None) -> dict[str, float]:
    """The five problem-text difficulty columns of one problem (definitions in the module
    docstring); NaN for every column when there is no text."""
    import re

    if not isinstance(text, str):
        return {k: float("nan") for k in DIFFICULTY_COLUMNS[3:]}
    return {
        "problem_character_count": float(len(text)),
        "problem_token_proxy_count": float(len(text.split())),
        "problem_numeric_count": float(len(re.findall(_NUMERIC, text))),
        "problem_operator_count": float(len(re.findall(_OPERATOR, text))),
        "problem_equation_count": float(text.count("=")),
    }


def feature_columns(variant: str = "main") -> tuple[list[str], list[str]]:
    """(baseline, early_blocks) columns of a variant; `level-free` drops `level` from both."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    base = [
        c
        for c in (*DIFFICULTY_COLUMNS, *KNOWN_AT_FORECAST)
        if not (variant == "level-free" and c == "level")
    ]
    return base, base + list(FROZEN_SUMMARIES)


# ---------------------------------------------------------------------------------- splits


def hash_splits(problem_ids: Sequence[str], seed: int) -> dict[str, str]:
    """--split-seed: problem → split, problem-wise and deterministic. Problems are ordered by
    sha256(f"{seed}:{problem_id}") and the first round(54/89 · n) are train, the next
    round(18/89 · n) validation, the rest test (protocol 6.4's 54/18/17 of 89, exact at
    n = 89). The order of the ids given does not matter; every cell of a problem (both models)
    shares its split."""
    ids = sorted(
        set(map(str, problem_ids)),
        key=lambda p: (hashlib.sha256(f"{seed}:{p}".encode()).hexdigest(), p),
    )
    total = sum(SPLIT_COUNTS.values())
    n_train = round(len(ids) * SPLIT_COUNTS["train"] / total)
    n_val = round(len(ids) * SPLIT_COUNTS["validation"] / total)
    return {
        p: ("train" if i < n_train else "validation" if i < n_train + n_val else "test")
        for i, p in enumerate(ids)
    }


def cohort_splits(cells: pd.DataFrame) -> dict[str, str]:
    """problem → split from the cohort rows' `split` field (column `split` of `cells`); every
    cell needs one and a problem's cells must agree, else a BtError saying what to pass."""
    missing = cells["split"].isna()
    if missing.any():
        some = (
            "no cell has"
            if missing.all()
            else f"{int(missing.sum())} of {len(cells)} cells have no"
        )
        raise BtError(
            f"{some} `split` in its cohort row: pass --split-seed N to assign "
            f"train/validation/test by hashing problem ids"
        )
    out: dict[str, str] = {}
    for pid, split in zip(cells["problem_id"], cells["split"], strict=True):
        if out.setdefault(str(pid), str(split)) != split:
            raise BtError(
                f"problem {pid}: its cells' cohort rows disagree on `split` "
                f"({out[str(pid)]} vs {split}); pass --split-seed N to reassign"
            )
    return out


# --------------------------------------------------------------------------- feature table


@dataclass
class FeatureTable:
    """The cells of the test: one row each (ids, split, endpoints, features) and what was left
    out on the way."""

    table: pd.DataFrame
    excluded: dict[str, Any]  # short base runs (total and per split), cells without a base run
    secondary_budget: int | None  # the restart length the secondary endpoint reads
    split_source: str  # "cohort" or "hash seed N"
    notes: list[str] = field(default_factory=list)


def _base_rows(signals: pd.DataFrame) -> pd.DataFrame:
    """Each cell's base trajectory: kind base, not an error row, the first by sample id."""
    base = signals[signals["kind"] == "base"]
    if "finish_reason" in base.columns:
        base = base[base["finish_reason"] != "error"]
    return base.sort_values("sample_id").drop_duplicates(["run", "cell_id"], keep="first")


def _secondary_budget(labels: pd.DataFrame) -> tuple[int | None, str | None]:
    """The restart length of the secondary endpoint: 4096 where measured, else the largest one
    measured (with a note saying so), else None."""
    measured = sorted(
        int(c[2:])
        for c in labels.columns
        if c.startswith("R_") and c[2:].isdigit() and labels[c].notna().any()
    )
    if not measured:
        return None, "no restart rate R(C) in the labels: the secondary endpoint is not fit"
    if SECONDARY_BUDGET in measured:
        return SECONDARY_BUDGET, None
    return measured[-1], (
        f"the runs have no {SECONDARY_BUDGET}-token restart: the secondary "
        f"endpoint reads R({measured[-1]}), their largest restart length"
    )


def feature_table(
    signals: pd.DataFrame,
    labels: pd.DataFrame,
    items: Mapping[tuple[str, str], Mapping[str, Any]],
    *,
    forecast_token: int = DEFAULT_FORECAST,
    split_seed: int | None = None,
) -> FeatureTable:
    """One row per labelled cell whose base run reached `forecast_token` generated tokens.

    signals: `bt signals` rows of every run (column `run` added); labels: `bt classify` labels
    (column `run`); items: (run, cell_id) → the cohort row of the cell (`RunStore.items()`).
    Splits come from the cohort rows, or from `hash_splits(seed)` over every labelled problem
    when `split_seed` is given (assigned before any exclusion). Cells whose base run stopped
    short of the forecast point are dropped and counted per split, as are cells without a base
    run."""
    cells = labels.copy()
    if "run" not in cells.columns:
        raise ValueError("labels need a `run` column")
    rows = [items.get((r, c), {}) for r, c in zip(cells["run"], cells["cell_id"], strict=True)]
    cells["split"] = [row.get("split") for row in rows]
    cells["dataset"] = [row.get("family", "math") for row in rows]
    subject = [row.get("subject") for row in rows]
    if "subject" in cells.columns:
        subject = [
            s if s is not None else lab for s, lab in zip(subject, cells["subject"], strict=True)
        ]
    cells["category"] = pd.Series(subject, index=cells.index, dtype=object)
    counts = pd.DataFrame(
        [problem_text_counts(row.get("problem")) for row in rows], index=cells.index
    )
    cells = pd.concat([cells, counts], axis=1)
    level = cells["level"] if "level" in cells.columns else pd.Series(np.nan, index=cells.index)
    cells["level"] = pd.to_numeric(level, errors="coerce").astype(float)
    if split_seed is None:
        split_of, source = cohort_splits(cells), "cohort"
    else:
        split_of, source = hash_splits(cells["problem_id"], split_seed), f"hash seed {split_seed}"
    cells["split"] = cells["problem_id"].astype(str).map(split_of)

    budget, note = _secondary_budget(cells)
    instant = cells["instant"].eq(True) if "instant" in cells.columns else False
    if budget is None:
        cells["secondary"] = np.nan
    else:
        r = cells[f"R_{budget}"].astype(float)
        cells["secondary"] = np.where(
            instant | r.isna(), np.nan, (r >= SECONDARY_THRESHOLD).astype(float)
        )

    base = _base_rows(signals)[
        ["run", "cell_id", "sample_id", "observed_token_count", "correct", *FROZEN_SUMMARIES]
    ]
    joined = cells.merge(base, on=["run", "cell_id"], how="left", validate="one_to_one")
    no_base = joined["sample_id"].isna()
    short = ~no_base & (joined["observed_token_count"] < forecast_token)
    per_split = Counter(joined.loc[short, "split"])
    excluded = {
        "short_base_run": int(short.sum()),
        "short_base_run_by_split": {s: int(per_split.get(s, 0)) for s in SPLITS},
        "no_base_run": int(no_base.sum()),
        "rule": f"base run reached fewer than {forecast_token} generated tokens",
    }
    table = joined[~no_base & ~short].copy()
    table["model_key"] = table["model"].astype(str).astype(object)
    table["forecast_token"] = float(forecast_token)
    table["observed_token_count"] = table["observed_token_count"].astype(float)
    table["primary"] = pd.to_numeric(
        table["correct"].map(
            lambda v: (
                np.nan if v is None or (isinstance(v, float) and math.isnan(v)) else float(bool(v))
            )
        ),
        errors="coerce",
    )
    for c in CATEGORICAL:
        table[c] = table[c].astype(object).where(table[c].notna(), np.nan)
    keep = [
        "run",
        "cell_id",
        "problem_id",
        "split",
        "primary",
        "secondary",
        *dict.fromkeys(feature_columns("main")[1]),
    ]
    notes = [note] if note else []
    return FeatureTable(
        table=table[keep].reset_index(drop=True),
        excluded=excluded,
        secondary_budget=budget,
        split_source=source,
        notes=notes,
    )


# ----------------------------------------------------------------------------------- models


def make_model(columns: Sequence[str], seed: int):  # -> sklearn Pipeline
    """9.5's model: median imputation + standard scaling of the numeric columns, most-frequent
    imputation + one-hot of the categorical ones, then the registered logistic regression (no
    calibration). An all-missing numeric column (a summary never recorded) is kept as zeros."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    categorical = [c for c in columns if c in CATEGORICAL]
    numeric = [c for c in columns if c not in CATEGORICAL]
    pre = ColumnTransformer(
        [
            (
                "numeric",
                Pipeline(
                    [
                        ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
                        ("scale", StandardScaler()),
                    ]
                ),
                numeric,
            ),
            (
                "categorical",
                Pipeline(
                    [
                        (
                            "impute",
                            SimpleImputer(strategy="most_frequent", keep_empty_features=True),
                        ),
                        ("one_hot", OneHotEncoder(handle_unknown="ignore", sparse_output=False)),
                    ]
                ),
                categorical,
            ),
        ],
        remainder="drop",
    )
    return Pipeline(
        [("preprocess", pre), ("classifier", LogisticRegression(**LOGISTIC, random_state=seed))]
    )


def _fit_score(
    train: pd.DataFrame, y: np.ndarray, test: pd.DataFrame, columns: Sequence[str], seed: int
) -> np.ndarray:
    model = make_model(columns, seed)
    model.fit(train[list(columns)], y)
    return model.predict_proba(test[list(columns)])[:, 1]


def oof_auroc(
    frame: pd.DataFrame, y: np.ndarray, columns: Sequence[str], seed: int = PLAN_SEED
) -> float:
    """Train-side sanity: out-of-fold AUROC over 5-fold StratifiedGroupKFold(shuffle, seed)
    grouped by problem (a problem's cells never train the model that scores them)."""
    from sklearn.model_selection import StratifiedGroupKFold

    folds = StratifiedGroupKFold(n_splits=N_FOLDS, shuffle=True, random_state=seed)
    scores = np.full(len(frame), np.nan)
    for tr, te in folds.split(frame, y, groups=frame["problem_id"].astype(str)):
        if len(np.unique(y[tr])) < 2:
            return float("nan")
        scores[te] = _fit_score(frame.iloc[tr], y[tr], frame.iloc[te], columns, seed)
    return auroc(scores, y)


@dataclass(frozen=True)
class DeltaCI:
    """ΔAUROC draws of a problem-clustered bootstrap: interval over the valid draws, and how
    many draws held one class (no AUROC) and were skipped."""

    low: float
    high: float
    draws: int
    skipped: int


def clustered_delta(
    problem_id: Sequence,
    y: np.ndarray,
    baseline: np.ndarray,
    early: np.ndarray,
    draws: int = DEFAULT_DRAWS,
    seed: int = REFIT_SEED,
) -> DeltaCI:
    """Percentile 95% interval of AUROC(early) − AUROC(baseline) over `draws` resamples of
    problems with replacement (all cells of a drawn problem enter, as a copy per draw; both
    scores see the same resample); single-class draws are skipped and counted."""
    cells = np.arange(len(y))  # each cell its own group; problems are the resampled clusters
    boot = bootstrap_decomposition(
        cells,
        y,
        {"baseline": baseline, "early_blocks": early},
        n_boot=draws,
        seed=seed,
        cluster=np.asarray(problem_id),
    )
    diff = boot.difference("early_blocks", "baseline", "pooled")
    lo, hi = percentile_interval(diff)
    return DeltaCI(low=lo, high=hi, draws=draws, skipped=int((~np.isfinite(diff)).sum()))


def _num(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def _class_groups(frame: pd.DataFrame, y: np.ndarray) -> dict[int, int]:
    """Problems holding at least one cell of each class."""
    return {c: int(frame.loc[y == c, "problem_id"].nunique()) for c in (0, 1)}


def evaluate(
    table: pd.DataFrame, endpoint: str, variant: str = "main", *, draws: int = DEFAULT_DRAWS
) -> dict[str, Any]:
    """One endpoint × variant of the frozen plan on a feature table: the power gate, the OOF
    sanity AUROCs, the refit on train + validation, the single test scoring, ΔAUROC with its
    clustered interval, and per-model descriptive AUROCs. A gate that fails gives
    status "not fit" and its reason."""
    base_cols, early_cols = feature_columns(variant)
    rows = table[table[endpoint].notna()]
    trainval = rows[rows["split"].isin(("train", "validation"))].reset_index(drop=True)
    test = rows[rows["split"] == "test"].reset_index(drop=True)
    y_tv = trainval[endpoint].to_numpy().astype(int)
    y_te = test[endpoint].to_numpy().astype(int)
    out: dict[str, Any] = {
        "endpoint": endpoint,
        "variant": variant,
        "status": "fit",
        "reason": None,
        "trainval_rows": len(trainval),
        "trainval_problems": int(trainval["problem_id"].nunique()),
        "trainval_class_counts": [int((y_tv == 0).sum()), int((y_tv == 1).sum())],
        "test_rows": len(test),
        "test_problems": int(test["problem_id"].nunique()),
        "class_counts": [int((y_te == 0).sum()), int((y_te == 1).sum())],
        "baseline_auroc": None,
        "early_auroc": None,
        "delta_auroc": None,
        "ci": [None, None],
        "success": False,
        "draws": draws,
        "skipped_draws": None,
        "oof_auroc": {"baseline": None, "early_blocks": None},
        "per_model": {},
        "columns": {"baseline": base_cols, "early_blocks": early_cols},
    }
    groups = _class_groups(trainval, y_tv)
    if min(groups.values()) < MIN_GROUPS_PER_CLASS:
        return out | {
            "status": "not fit",
            "reason": (
                f"train+validation has {groups[0]} problems with class 0 and {groups[1]} "
                f"with class 1 "
                f"(the power gate needs {MIN_GROUPS_PER_CLASS} of each)"
            ),
        }
    if len(test) == 0 or len(np.unique(y_te)) < 2:
        return out | {
            "status": "not fit",
            "reason": (
                f"the test split holds {len(test)} rows of classes {sorted(set(y_te.tolist()))}: "
                f"AUROC needs both"
            ),
        }
    out["oof_auroc"] = {
        "baseline": _num(oof_auroc(trainval, y_tv, base_cols)),
        "early_blocks": _num(oof_auroc(trainval, y_tv, early_cols)),
    }
    s_base = _fit_score(trainval, y_tv, test, base_cols, REFIT_SEED)
    s_early = _fit_score(trainval, y_tv, test, early_cols, REFIT_SEED)
    a_base, a_early = auroc(s_base, y_te), auroc(s_early, y_te)
    ci = clustered_delta(
        test["problem_id"].astype(str).to_numpy(), y_te, s_base, s_early, draws=draws
    )
    per_model = {}
    for model, idx in test.groupby("model_key").groups.items():
        i = test.index.get_indexer(idx)
        per_model[str(model)] = {
            "n": len(i),
            "baseline": _num(auroc(s_base[i], y_te[i])),
            "early_blocks": _num(auroc(s_early[i], y_te[i])),
        }
    return out | {
        "baseline_auroc": a_base,
        "early_auroc": a_early,
        "delta_auroc": a_early - a_base,
        "ci": [_num(ci.low), _num(ci.high)],
        "success": bool(np.isfinite(ci.low) and ci.low > 0),
        "skipped_draws": ci.skipped,
        "per_model": per_model,
    }


# ----------------------------------------------------------------------------------- a run


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


def check_options(forecast_token: int, draws: int) -> None:
    """--forecast-token and --draws, before anything is read."""
    if forecast_token < 2:
        raise BtError(f"--forecast-token: expected at least 2 tokens, got {forecast_token}")
    if draws < 1:
        raise BtError(f"--draws: expected a positive number of bootstrap draws, got {draws}")


def results_frame(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The results table (9.5's layout): one row per endpoint × variant."""
    rows = [
        {
            "endpoint": r["endpoint"],
            "variant": r["variant"],
            "status": r["status"],
            "test_rows": r["test_rows"],
            "test_problems": r["test_problems"],
            "class_0": r["class_counts"][0],
            "class_1": r["class_counts"][1],
            "baseline_auroc": r["baseline_auroc"],
            "early_auroc": r["early_auroc"],
            "delta_auroc": r["delta_auroc"],
            "ci_low": r["ci"][0],
            "ci_high": r["ci"][1],
            "success": r["success"],
            "skipped_draws": r["skipped_draws"],
            "oof_baseline": r["oof_auroc"]["baseline"],
            "oof_early_blocks": r["oof_auroc"]["early_blocks"],
            "trainval_rows": r["trainval_rows"],
            "trainval_problems": r["trainval_problems"],
            "reason": r["reason"],
        }
        for r in results
    ]
    return pd.DataFrame(rows)


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
    frame = results_frame(results)
    write_atomic(csv_path, lambda p: frame.to_csv(p, index=False))
    if signal_frames is None:  # one forecast point: its forest figure beside its results
        from breakthrough.signals.confirm_figures import forest_figure

        forest_figure(results, forecast_token, out_dir / FIGURES_DIR / "confirmatory_forest.png")
    return ConfirmReport(results=results, summary=summary, json_path=json_path, csv_path=csv_path)


# ------------------------------------------------------------------ the forecast-point sweep

SWEEP_JSON, SWEEP_CSV = "sweep.json", "sweep.csv"
FIGURES_DIR = "figures"


def parse_forecast_tokens(text: str) -> tuple[int, ...]:
    """--forecast-token: one t or a comma-separated sweep (e.g. 128,256,512,1024,2048), each
    at least 2, no repeats; returned sorted."""
    parts = [x.strip() for x in str(text).split(",")]
    if any(parts) and not all(parts):
        raise BtError(
            f"--forecast-token: element {parts.index('') + 1} of {text!r} is empty; "
            "expected integers separated by commas"
        )
    try:
        vals = [int(x) for x in parts if x]
    except ValueError:
        raise BtError(
            f"--forecast-token: expected integers separated by commas, got {text!r}"
        ) from None
    if not vals:
        raise BtError(f"--forecast-token: expected at least one forecast point, got {text!r}")
    if len(set(vals)) != len(vals):
        raise BtError(f"--forecast-token: a forecast point is repeated in {text!r}")
    for v in vals:
        if v < 2:
            raise BtError(f"--forecast-token: expected at least 2 tokens, got {v}")
    return tuple(sorted(vals))


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


def sweep_row(t: int, results: Sequence[Mapping[str, Any]], variant: str = "main") -> dict:
    """One row of the sweep table (9.5's post-hoc table): per endpoint, Δ, its CI, the test
    rows and the status of the `variant` results at forecast point t."""
    row: dict[str, Any] = {"forecast_token": int(t), "preregistered": int(t) == DEFAULT_FORECAST}
    for r in results:
        if r["variant"] != variant:
            continue
        e = r["endpoint"]
        row |= {
            f"{e}_delta": r["delta_auroc"],
            f"{e}_ci_low": r["ci"][0],
            f"{e}_ci_high": r["ci"][1],
            f"{e}_n": r["test_rows"],
            f"{e}_status": r["status"],
            f"{e}_success": r["success"],
        }
    return row


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
    write_atomic(csv_path, lambda p: table.to_csv(p, index=False))
    figs = {
        "prefix_sweep": sweep_figure(table, out_dir / FIGURES_DIR / "prefix_sweep.png"),
        "confirmatory_forest": forest_figure(
            reports[main].results, main, out_dir / FIGURES_DIR / "confirmatory_forest.png"
        ),
    }
    return SweepReport(
        reports=reports, table=table, json_path=json_path, csv_path=csv_path, figures=figs
    )
