"""The pooled / within / between AUROC decomposition of scores on any table (`bt auroc`).

Reads a CSV/TSV (optionally gzipped) or parquet table (e.g. `bt export` output), checks the
group, score and label columns (one-line errors naming the file and column), drops rows with
missing values (with a warning), and computes for each score and for the leave-one-out
pass-rate reference: pooled AUROC, within-group AUROC (pair-weighted and failure-weighted),
between-group AUROC and lambda, with problem-clustered percentile bootstrap intervals
(protocol 9.5). The statistics live in `breakthrough.stats`; this module is the table
handling and the JSON report; its printed form is `breakthrough.report.auroc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from breakthrough import stats as S
from breakthrough.errors import BtError
from breakthrough.outputs import write_json
from breakthrough.report.auroc import LOO_NAME, report_lines

DEFAULT_SEED = 20260831  # the math128 dissection's seed (protocol 9.8)
_TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".csv.gz", ".tsv", ".tsv.gz")
_TRUE = {"true", "1", "1.0", "yes", "t", "y"}
_FALSE = {"false", "0", "0.0", "no", "f", "n"}


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suf in sorted(_TABLE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suf):
            return suf
    return ""


def read_table(path: Path) -> pd.DataFrame:
    """A CSV/TSV (optionally gzipped) or parquet file as a DataFrame; BtError naming the file."""
    if not path.is_file():
        raise BtError(f"{path}: no such file")
    suf = _suffix(path)
    try:
        if suf in (".parquet", ".pq"):
            return pd.read_parquet(path)
        if suf in (".csv", ".csv.gz"):
            return pd.read_csv(path)
        if suf in (".tsv", ".tsv.gz"):
            return pd.read_csv(path, sep="\t")
    except Exception as exc:  # pandas/pyarrow parse errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BtError(f"{path}: cannot read table: {first}") from None
    raise BtError(f"{path}: unknown table format (expected .csv, .tsv or .parquet)")


def default_out(table: Path) -> Path:
    """TABLE's folder, TABLE's name without its table suffix, plus `.auroc.json`."""
    suf = _suffix(table)
    stem = table.name[: -len(suf)] if suf else table.stem
    return table.with_name(f"{stem}.auroc.json")


def _binary_label(series: Any, col: str, table: Path | str) -> Any:
    """Float array: 1.0 success, 0.0 failure, NaN missing. BtError on any other value."""
    s = series
    if pd.api.types.is_bool_dtype(s.dtype):
        return s.astype("float64").to_numpy()
    if pd.api.types.is_numeric_dtype(s.dtype):
        v = s.astype("float64").to_numpy()
        bad = ~np.isnan(v) & (v != 0) & (v != 1)
        if bad.any():
            ex = sorted(set(v[bad].tolist()))[:5]
            raise BtError(
                f"{table}: label column {col!r} is not binary: found {ex} "
                "(expected 0/1 or true/false)"
            )
        return v
    out = np.full(len(s), np.nan)
    bad_vals: list[Any] = []
    for i, x in enumerate(s.tolist()):
        if x is None or (isinstance(x, float) and np.isnan(x)):
            continue
        if isinstance(x, (bool, np.bool_)):
            out[i] = float(x)
            continue
        t = str(x).strip().lower()
        if t in _TRUE:
            out[i] = 1.0
        elif t in _FALSE:
            out[i] = 0.0
        elif t in ("", "nan", "none", "null"):
            continue
        elif len(bad_vals) < 5 and x not in bad_vals:
            bad_vals.append(x)
    if bad_vals:
        raise BtError(
            f"{table}: label column {col!r} is not binary: found {bad_vals} "
            "(expected 0/1 or true/false)"
        )
    return out


def _numeric_score(series: Any, col: str, table: Path | str) -> Any:
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        return series.astype("float64").to_numpy()
    v = pd.to_numeric(series, errors="coerce")
    bad = v.isna() & series.notna()
    if bad.any():
        ex = series[bad].iloc[0]
        raise BtError(f"{table}: score column {col!r} is not numeric (e.g. {ex!r})")
    return v.astype("float64").to_numpy()


def analyse_section(
    codes: Any,
    label: Any,
    scores: dict[str, Any],
    n_boot: int,
    seed: int,
    cluster: Any = None,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Numbers for one set of rows: success rate, each score, LOO reference, differences.

    ``codes``: group of each row; ``cluster``: bootstrap unit of each row (default: group).
    """
    y = np.asarray(label, dtype=np.int8)
    k, n = int(y.sum()), int(y.size)
    section: dict[str, Any] = {
        "n_rows": n,
        "n_groups": int(np.unique(codes).size),
        "success_rate": {
            "estimate": k / n if n else None,
            "successes": k,
            "wilson": list(S.proportion_ci(k, n, confidence, "wilson")),
            "clopper_pearson": list(S.proportion_ci(k, n, confidence, "exact")),
        },
    }
    loo = S.loo_score(codes, y)
    all_scores = dict(scores)
    all_scores[LOO_NAME] = loo
    points = {name: S.decompose(codes, s, y) for name, s in all_scores.items()}
    both = 0 < k < n
    boot = None
    if n_boot > 0 and both:
        boot = S.bootstrap_decomposition(
            codes, y, all_scores, n_boot=n_boot, seed=seed, cluster=cluster
        )
    if not both:
        section["note"] = "only one outcome in these rows: AUROC undefined"
    section["scores"] = {name: S.summarize(points[name], boot, name, confidence) for name in scores}
    section["loo_reference"] = S.summarize(points[LOO_NAME], boot, LOO_NAME, confidence)
    names = list(scores)
    section["differences"] = {
        f"{b} - {names[0]}": S.summarize_difference(
            points[b], points[names[0]], boot, b, names[0], confidence
        )
        for b in names[1:]
    }
    if boot is not None:
        section["bootstrap_draws_skipped_single_class"] = n_boot - boot.n_valid(names[0], "pooled")
    return section


@dataclass
class AurocReport:
    """What `bt auroc` computed: the JSON report, where it was written, the warnings (dropped
    rows) and the printed summary."""

    report: dict[str, Any]
    out: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The printed form: one section for all rows, one per --by value, the interval note."""
        return report_lines(self.report)


def decompose_table(
    df: pd.DataFrame,
    table: Path | str,
    *,
    group: Sequence[str],
    score: Sequence[str],
    label: str,
    by: str | None = None,
    bootstrap: int = 2000,
    seed: int = DEFAULT_SEED,
    drop_singletons: bool = False,
) -> AurocReport:
    """The decomposition of `score` columns (higher = more likely correct) against the binary
    `label` column, groups keyed on (BY, GROUP...), on a table already read (`table` names it in
    messages). BtError, naming the table, on a missing or non-binary/non-numeric column,
    single-row groups (unless `drop_singletons`) or a single outcome."""
    score, group = list(score), list(group)
    if len(set(score)) != len(score):
        raise BtError(f"--score: column given twice ({', '.join(score)})")
    wanted = [*group, *score, label] + ([by] if by else [])
    missing = [c for c in dict.fromkeys(wanted) if c not in df.columns]
    if missing:
        cols = ", ".join(map(str, df.columns[:30])) + (" ..." if len(df.columns) > 30 else "")
        names = ", ".join(repr(c) for c in missing)
        raise BtError(f"{table}: no column {names} (columns: {cols})")

    warnings: list[str] = []
    y = _binary_label(df[label], label, table)
    svals = {c: _numeric_score(df[c], c, table) for c in score}
    key_cols = ([by] if by else []) + group
    keep = ~np.isnan(y)
    reasons = {label: int(np.isnan(y).sum())}
    for c, v in svals.items():
        reasons[c] = int((np.isnan(v) & keep).sum())
        keep &= ~np.isnan(v)
    for c in dict.fromkeys(key_cols):
        na = df[c].isna().to_numpy()
        reasons[c] = int((na & keep).sum())
        keep &= ~na
    dropped = {c: k for c, k in reasons.items() if k}
    if dropped:
        parts = ", ".join(f"{k:,} missing {c!r}" for c, k in dropped.items())
        warnings.append(f"{table}: dropped {int((~keep).sum()):,} of {len(df):,} rows ({parts})")
    rows_read = int(len(keep))
    df = df.loc[keep]
    y = y[keep]
    svals = {c: v[keep] for c, v in svals.items()}
    if len(df) == 0:
        raise BtError(f"{table}: no rows left with {label!r}, the scores and groups all present")

    codes = df.groupby(key_cols, sort=False, dropna=False).ngroup().to_numpy()
    size = np.bincount(codes)
    single = size[codes] == 1
    n_single_groups = int((size == 1).sum())
    dropped_singletons = 0
    if n_single_groups:
        ex = df.loc[single, key_cols].head(3).astype(str).agg("/".join, axis=1).tolist()
        keys = " x ".join(key_cols)
        msg = (
            f"{n_single_groups:,} of {size.size:,} groups ({keys}) have a single row "
            f"(e.g. {', '.join(ex)})"
        )
        if not drop_singletons:
            raise BtError(
                f"{table}: {msg}; within-group pairs and the LOO score need 2+ rows per group "
                "(pass --drop-singletons to drop them)"
            )
        warnings.append(f"{table}: {msg}; dropped")
        dropped_singletons = int(single.sum())
        df, y, codes = df.loc[~single], y[~single], codes[~single]
        svals = {c: v[~single] for c, v in svals.items()}
        if len(df) == 0:
            raise BtError(f"{table}: no groups with 2+ rows")
    y = y.astype(np.int8)
    if y.min() == y.max():
        which = "correct" if y[0] == 1 else "incorrect"
        raise BtError(
            f"{table}: label column {label!r} has only {which} rows ({len(y):,}): "
            "AUROC needs both outcomes"
        )

    # Groups are keyed on (BY, GROUP...); the bootstrap resamples GROUP... units, so with --by
    # a problem's rows under every BY value travel together (protocol 9.5).
    clusters = df.groupby(group, sort=False, dropna=False).ngroup().to_numpy()
    if bootstrap and np.unique(clusters).size < 2:
        warnings.append(
            f"{table}: a single {' x '.join(group)} group: the group-clustered bootstrap redraws "
            "that one group every time, so its intervals are degenerate (they show no "
            "between-group uncertainty); the between-group AUROC is undefined"
        )
    results: dict[str, Any] = {
        "all": analyse_section(codes, y, svals, bootstrap, seed, cluster=clusters)
    }
    by_results: dict[str, Any] = {}
    if by:
        bv = df[by].to_numpy()
        for value in pd.unique(bv):
            m = bv == value
            by_results[str(value)] = analyse_section(
                codes[m], y[m], {c: v[m] for c, v in svals.items()}, bootstrap, seed, clusters[m]
            )

    report = {
        "table": str(table),
        "group": group,
        "by": by,
        "label": label,
        "scores": score,
        "score_orientation": "higher score = predicts correct",
        "bootstrap": bootstrap,
        "bootstrap_unit": " x ".join(group),
        "seed": seed,
        "confidence": 0.95,
        "rows_read": rows_read,
        "rows_dropped_missing": dropped,
        "rows_dropped_single_row_groups": dropped_singletons,
        "results": results,
        "by_results": by_results,
    }
    return AurocReport(report=report, warnings=warnings)


def auroc_table(
    table: Path | str,
    *,
    group: Sequence[str],
    score: Sequence[str],
    label: str,
    by: str | None = None,
    bootstrap: int = 2000,
    seed: int | None = None,
    out: Path | str | None = None,
    drop_singletons: bool = False,
) -> AurocReport:
    """`bt auroc TABLE`: read the table, decompose (`decompose_table`; seed `DEFAULT_SEED` when
    None) and write the JSON report to `out` (default `default_out(table)`) atomically."""
    table = Path(table)
    result = decompose_table(
        read_table(table),
        table,
        group=group,
        score=score,
        label=label,
        by=by,
        bootstrap=bootstrap,
        seed=DEFAULT_SEED if seed is None else seed,
        drop_singletons=drop_singletons,
    )
    out_path = write_json(Path(out) if out else default_out(table), result.report)
    result.out = out_path
    return result
