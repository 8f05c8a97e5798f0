"""The hidden-state probe dissection of protocol 9.8, as a pure pipeline: anchor features in,
the study's table out (no model, no files, no mlx).

Why it is shaped this way: a probe's pooled AUROC mixes two things, telling easy problems from
hard ones (between problems) and telling a problem's good attempts from its bad ones (within a
problem). The study's finding was that hidden-state probes do the first and not the second; so
each anchor t reports the pooled AUROC on a pooled set (a few attempts of every problem) beside
the within-problem AUROC on the mid-band problems (both classes present), each with its
problem-clustered bootstrap interval, and the leave-one-out pass rate as the reference a score
that knows only the problem reaches. Every AUROC, decomposition and bootstrap is
`breakthrough.stats`; the probe is scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from breakthrough import stats

PROBE_SEED = 20260831  # folds, PCA, pooled-set draw, pooled bootstrap (protocol 9.8)
WITHIN_BOOT_SEED = 20260832  # within-problem bootstrap (protocol 9.8)
DEFAULT_ANCHORS = (4, 8, 16, 32, 64, 128, 192, 256, 384, 512)
ANCHOR_WINDOW = 4  # anchor vector at t: mean of the states of generated tokens t-4 .. t-1
POOLED_PER_PROBLEM = 8  # pooled set: this many attempts of every problem
MID_BAND = (0.05, 0.95)  # within set: problems whose pass rate lies in [lo, hi)
N_FOLDS = 5
MAX_PCA = 128
N_BOOT = 2000

TABLE_COLUMNS = (
    "score", "t", "pooled", "pooled_lo", "pooled_hi",
    "within_failure_weighted", "within_failure_weighted_lo", "within_failure_weighted_hi",
    "within_pair_weighted", "within_pair_weighted_lo", "within_pair_weighted_hi",
    "rows", "pooled_rows", "within_rows", "within_problems",
)


def anchor_vectors(hidden: np.ndarray, anchors: Sequence[int]) -> dict[int, np.ndarray]:
    """Anchor vector at each t the trajectory reaches: the mean of the hidden states of its
    generated tokens t-4 .. t-1 (rows of `hidden`); anchors beyond its length are left out."""
    out = {}
    for t in anchors:
        if t >= ANCHOR_WINDOW and hidden.shape[0] >= t:
            out[int(t)] = hidden[t - ANCHOR_WINDOW: t].astype(np.float64).mean(axis=0)
    return out


@dataclass
class ProbeData:
    """One row per trajectory: its problem, its outcome and its anchor vectors.

    features[t] is [n, d] with NaN rows for trajectories shorter than t; `top1` holds each
    trajectory's teacher-forcing top-1 agreement (NaN where unknown)."""

    problem_id: np.ndarray
    correct: np.ndarray
    features: dict[int, np.ndarray]
    top1: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def from_rows(cls, problem_id: Sequence, correct: Sequence[bool],
                  vectors: Sequence[Mapping[int, np.ndarray]], anchors: Sequence[int],
                  top1: Sequence[float] | None = None) -> ProbeData:
        """Stack per-trajectory anchor vectors (as `anchor_vectors` returns them)."""
        n = len(problem_id)
        dims = {v.shape[0] for row in vectors for v in row.values()}
        if len(dims) > 1:
            raise ValueError(f"anchor vectors of different widths: {sorted(dims)}")
        d = dims.pop() if dims else 0
        feats = {}
        for t in anchors:
            x = np.full((n, d), np.nan)
            for i, row in enumerate(vectors):
                if t in row:
                    x[i] = row[t]
            feats[int(t)] = x
        return cls(np.asarray(problem_id, dtype=object), np.asarray(correct, dtype=bool), feats,
                   np.asarray(top1 if top1 is not None else np.full(n, np.nan), dtype=np.float64))


def select_sets(problem_id: np.ndarray, correct: np.ndarray, seed: int = PROBE_SEED,
                per_problem: int = POOLED_PER_PROBLEM,
                band: tuple[float, float] = MID_BAND) -> tuple[np.ndarray, np.ndarray]:
    """(pooled mask, within mask): `per_problem` attempts of every problem drawn without
    replacement (numpy default_rng(seed), problems in sorted order), and every attempt of the
    problems whose pass rate lies in the band."""
    rng = np.random.default_rng(seed)
    pooled = np.zeros(problem_id.size, dtype=bool)
    within = np.zeros(problem_id.size, dtype=bool)
    for p in sorted(set(problem_id.tolist()), key=str):
        rows = np.flatnonzero(problem_id == p)
        take = rows if rows.size <= per_problem else np.sort(rng.choice(rows, per_problem, replace=False))
        pooled[take] = True
        rate = correct[rows].mean()
        if band[0] <= rate < band[1]:
            within[rows] = True
    return pooled, within


def oof_scores(x: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int = PROBE_SEED) -> np.ndarray:
    """Out-of-fold success probabilities of StandardScaler -> PCA -> LogisticRegression, from
    StratifiedGroupKFold folds by problem (a problem's attempts never train the model that scores
    them). A fold whose training rows hold one class scores its rows with that class's rate."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise ValueError("the probe needs at least two problems (folds are by problem)")
    folds = StratifiedGroupKFold(n_splits=min(N_FOLDS, n_groups), shuffle=True, random_state=seed)
    out = np.full(y.size, np.nan)
    codes, _ = stats.encode_groups(groups)
    for train, test in folds.split(x, y, codes):
        if np.unique(y[train]).size < 2:
            out[test] = float(y[train].mean())
            continue
        n_comp = max(1, min(MAX_PCA, x.shape[1], train.size - 1))
        model = make_pipeline(
            StandardScaler(),
            PCA(n_components=n_comp, random_state=seed),
            LogisticRegression(max_iter=2000, class_weight="balanced"),
        )
        with np.errstate(all="ignore"):  # near-constant standardised columns (protocol 11)
            model.fit(x[train], y[train])
            out[test] = model.predict_proba(x[test])[:, 1]
    return out


def _decomposition_row(score_name: str, t: int | None, group: np.ndarray, y: np.ndarray,
                       s: np.ndarray, pooled: np.ndarray, within: np.ndarray,
                       n_boot: int) -> dict:
    """One table row: pooled AUROC on the pooled set, within AUROCs on the within set, CIs."""
    row: dict = {"score": score_name, "t": t, "rows": int(y.size),
                 "pooled_rows": int(pooled.sum()), "within_rows": int(within.sum()),
                 "within_problems": len(set(group[within].tolist()))}
    for mask, stat_names, seed in (
        (pooled, ("pooled",), PROBE_SEED),
        (within, ("within_failure_weighted", "within_pair_weighted"), WITHIN_BOOT_SEED),
    ):
        for name in stat_names:
            row[name] = row[f"{name}_lo"] = row[f"{name}_hi"] = np.nan
        if not mask.any():
            continue
        point = stats.decompose(group[mask], s[mask], y[mask])
        boot = (stats.bootstrap_decomposition(group[mask], y[mask], {"s": s[mask]},
                                              n_boot=n_boot, seed=seed) if n_boot else None)
        for name in stat_names:
            row[name] = getattr(point, name)
            if boot is not None:
                row[f"{name}_lo"], row[f"{name}_hi"] = boot.interval("s", name)
    return row


@dataclass
class ProbeTable:
    """The study's table (one row per anchor, then the LOO reference) and the fidelity."""

    table: object  # pandas DataFrame with TABLE_COLUMNS
    top1_mean: float
    top1_p10: float
    scores: dict[int, np.ndarray]  # out-of-fold probe score per anchor (NaN: row not scored)


def probe_table(data: ProbeData, n_boot: int = N_BOOT,
                progress: Callable[[str], None] | None = None) -> ProbeTable:
    """Run the probe at every anchor of `data` and decompose its out-of-fold scores."""
    import pandas as pd

    pid, y = data.problem_id, data.correct.astype(np.int8)
    pooled, within = select_sets(pid, data.correct)
    keep = pooled | within
    rows, scores = [], {}
    for t, x in sorted(data.features.items()):
        have = keep & ~np.isnan(x).any(axis=1) if x.size else np.zeros(y.size, dtype=bool)
        scores[t] = np.full(y.size, np.nan)
        if have.sum() < 2 or len(set(pid[have].tolist())) < 2 or np.unique(y[have]).size < 2:
            if progress:
                progress(f"t={t}: {int(have.sum())} rows reach it, too few to fit a probe; skipped")
            continue
        s = oof_scores(x[have], y[have], pid[have])
        scores[t][have] = s
        rows.append(_decomposition_row("probe", t, pid[have], y[have], s, pooled[have],
                                       within[have], n_boot))
        if progress:
            r = rows[-1]
            progress(f"t={t}: pooled {r['pooled']:.3f}, within {r['within_failure_weighted']:.3f}")
    loo = stats.loo_score(pid, y)
    ok = keep & np.isfinite(loo)
    if ok.any():
        rows.append(_decomposition_row("loo", None, pid[ok], y[ok], loo[ok], pooled[ok],
                                       within[ok], n_boot))
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    table["t"] = table["t"].astype("Int64")
    top1 = data.top1[np.isfinite(data.top1)] if data.top1.size else np.zeros(0)
    return ProbeTable(
        table=table,
        top1_mean=float(top1.mean()) if top1.size else float("nan"),
        top1_p10=float(np.quantile(top1, 0.10)) if top1.size else float("nan"),
        scores=scores,
    )


def format_table(table) -> list[str]:  # table: pd.DataFrame
    """The table as the study prints it: t, pooled [CI], within failure-w. [CI], pair-w. [CI], rows."""

    def cell(r, name: str) -> str:
        v, lo, hi = r[name], r.get(f"{name}_lo"), r.get(f"{name}_hi")
        if not np.isfinite(v):
            return "n/a"
        ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and np.isfinite(lo) else ""
        return f"{v:.3f}{ci}"

    head = f"{'t':>6}  {'pooled [95% CI]':<24}{'within, failure-w. [CI]':<26}{'within, pair-w. [CI]':<26}{'rows':>6}"
    lines = [head]
    for _, r in table.iterrows():
        t = "LOO" if r["score"] == "loo" else str(int(r["t"]))
        lines.append(f"{t:>6}  {cell(r, 'pooled'):<24}{cell(r, 'within_failure_weighted'):<26}"
                     f"{cell(r, 'within_pair_weighted'):<26}{int(r['rows']):>6}")
    return lines
