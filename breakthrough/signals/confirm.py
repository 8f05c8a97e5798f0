"""Protocol 9.5's confirmatory early-signal test, as frozen before it was run: pure (frames in,
results out). `breakthrough.analyses.confirm` reads the runs for it and writes what it finds
(`bt confirm`).

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
from typing import Any

import numpy as np
import pandas as pd

from breakthrough.errors import BtError
from breakthrough.protocol import (
    CONFIRM_FORECAST_TOKEN,
    CONFIRM_SECONDARY_BUDGET,
    CONFIRM_SECONDARY_THRESHOLD,
)
from breakthrough.signals.summaries import FROZEN_SUMMARIES
from breakthrough.stats import auroc, bootstrap_decomposition, percentile_interval
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


# ------------------------------------------------------------------ the forecast-point sweep


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
