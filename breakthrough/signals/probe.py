"""The probe dissection of protocol 9.8, as a pure pipeline: anchor features in, the study's
table out (no model, no files, no mlx).

Why it is shaped this way: a probe's pooled AUROC mixes two things, telling easy problems from
hard ones (between problems) and telling a problem's good attempts from its bad ones (within a
problem). The study's finding was that hidden-state probes do the first and not the second; so
each anchor t reports the pooled AUROC on a pooled set (a few attempts of every problem) beside
the within-problem AUROC on the mid-band problems (both classes present), each with its
problem-clustered bootstrap interval, and the leave-one-out pass rate as the reference a score
that knows only the problem reaches. Two arms are probed: the hidden-state arm (anchor vectors)
and 9.8's stream-summary arm (the 8 `summaries.STREAM_SUMMARIES` of the entropy, surprisal and
top-1 probability streams over the first t generated tokens), each through the same pipeline,
on the same rows, with the same folds, so the two arms' AUROCs differ only by their features.
Every AUROC, decomposition and bootstrap is `breakthrough.stats`; the probe is scikit-learn.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from breakthrough import stats
from breakthrough.signals.summaries import STREAM_SUMMARIES, summarize

PROBE_SEED = 20260831  # folds, PCA, pooled-set draw, pooled bootstrap (protocol 9.8)
WITHIN_BOOT_SEED = 20260832  # within-problem bootstrap (protocol 9.8)
DEFAULT_ANCHORS = (4, 8, 16, 32, 64, 128, 192, 256, 384, 512)
ANCHOR_WINDOW = 4  # anchor vector at t: mean of the states of generated tokens t-4 .. t-1
POOLED_PER_PROBLEM = 8  # pooled set: this many attempts of every problem
MID_BAND = (0.05, 0.95)  # within set: problems whose pass rate lies in [lo, hi)
N_FOLDS = 5
MAX_PCA = 128
N_BOOT = 2000

ARMS = ("hidden", "stream")  # the probe arms, in table order; the LOO row's arm is "loo"

TABLE_COLUMNS = (
    "arm",
    "score",
    "t",
    "pooled",
    "pooled_lo",
    "pooled_hi",
    "within_failure_weighted",
    "within_failure_weighted_lo",
    "within_failure_weighted_hi",
    "within_pair_weighted",
    "within_pair_weighted_lo",
    "within_pair_weighted_hi",
    "rows",
    "pooled_rows",
    "within_rows",
    "within_problems",
)


def anchor_vectors(hidden: np.ndarray, anchors: Sequence[int]) -> dict[int, np.ndarray]:
    """Anchor vector at each t the trajectory reaches: the mean of the hidden states of its
    generated tokens t-4 .. t-1 (rows of `hidden`); anchors beyond its length are left out."""
    out = {}
    for t in anchors:
        if t >= ANCHOR_WINDOW and hidden.shape[0] >= t:
            out[int(t)] = hidden[t - ANCHOR_WINDOW : t].astype(np.float64).mean(axis=0)
    return out


def stream_summaries(
    entropy: np.ndarray, surprisal: np.ndarray, top1_probability: np.ndarray, anchors: Sequence[int]
) -> dict[int, np.ndarray]:
    """Stream-summary features at each t the trajectory reaches: the 8 `STREAM_SUMMARIES` of its
    per-generated-token streams over the first t tokens (`summaries.summarize` with window t,
    so a slope or a rise means exactly what it means in bt signals); anchors beyond its length
    are left out, as `anchor_vectors` leaves them out."""
    series = {
        "entropy": np.asarray(entropy),
        "surprisal": np.asarray(surprisal),
        "top1_probability": np.asarray(top1_probability),
    }
    n = min(len(v) for v in series.values())
    out = {}
    for t in anchors:
        if t >= ANCHOR_WINDOW and n >= t:
            summary = summarize(series, window=int(t))
            out[int(t)] = np.array([summary[k] for k in STREAM_SUMMARIES], dtype=np.float64)
    return out


def _stack(
    rows: Sequence[Mapping[int, np.ndarray]], n: int, anchors: Sequence[int], what: str
) -> dict[int, np.ndarray]:
    """{t: [n, d]} from per-trajectory {t: vector}, NaN rows where a trajectory lacks t."""
    dims = {v.shape[0] for row in rows for v in row.values()}
    if len(dims) > 1:
        raise ValueError(f"{what} of different widths: {sorted(dims)}")
    d = dims.pop() if dims else 0
    feats = {}
    for t in anchors:
        x = np.full((n, d), np.nan)
        for i, row in enumerate(rows):
            if t in row:
                x[i] = row[t]
        feats[int(t)] = x
    return feats


@dataclass
class ProbeData:
    """One row per trajectory: its problem, its outcome and its features per anchor t.

    features[t] is [n, d] (hidden arm: anchor vectors) and streams[t] is [n, 8] (stream arm:
    `STREAM_SUMMARIES` in order), with NaN rows for trajectories shorter than t; an empty
    `streams` runs the hidden arm alone. `top1` holds each trajectory's teacher-forcing top-1
    agreement (NaN where unknown)."""

    problem_id: np.ndarray
    correct: np.ndarray
    features: dict[int, np.ndarray]
    top1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    streams: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_rows(
        cls,
        problem_id: Sequence,
        correct: Sequence[bool],
        vectors: Sequence[Mapping[int, np.ndarray]],
        anchors: Sequence[int],
        top1: Sequence[float] | None = None,
        streams: Sequence[Mapping[int, np.ndarray]] | None = None,
    ) -> ProbeData:
        """Stack per-trajectory anchor vectors (as `anchor_vectors` returns them) and, when
        given, stream summaries (as `stream_summaries` returns them)."""
        n = len(problem_id)
        if streams is not None and len(streams) != n:
            raise ValueError(f"{len(streams)} stream-summary rows for {n} trajectories")
        return cls(
            np.asarray(problem_id, dtype=object),
            np.asarray(correct, dtype=bool),
            _stack(vectors, n, anchors, "anchor vectors"),
            np.asarray(top1 if top1 is not None else np.full(n, np.nan), dtype=np.float64),
            _stack(streams, n, anchors, "stream summaries") if streams is not None else {},
        )

    def arms(self) -> dict[str, dict[int, np.ndarray]]:
        """The arms that have features, in table order: {arm: {t: [n, d]}}."""
        present = {"hidden": self.features, "stream": self.streams}
        return {
            a: present[a]
            for a in ARMS
            if any(x.ndim == 2 and x.shape[1] > 0 for x in present[a].values())
        }


def select_sets(
    problem_id: np.ndarray,
    correct: np.ndarray,
    seed: int = PROBE_SEED,
    per_problem: int = POOLED_PER_PROBLEM,
    band: tuple[float, float] = MID_BAND,
) -> tuple[np.ndarray, np.ndarray]:
    """(pooled mask, within mask): `per_problem` attempts of every problem drawn without
    replacement (numpy default_rng(seed), problems in sorted order), and every attempt of the
    problems whose pass rate lies in the band."""
    rng = np.random.default_rng(seed)
    pooled = np.zeros(problem_id.size, dtype=bool)
    within = np.zeros(problem_id.size, dtype=bool)
    for p in sorted(set(problem_id.tolist()), key=str):
        rows = np.flatnonzero(problem_id == p)
        take = (
            rows
            if rows.size <= per_problem
            else np.sort(rng.choice(rows, per_problem, replace=False))
        )
        pooled[take] = True
        rate = correct[rows].mean()
        if band[0] <= rate < band[1]:
            within[rows] = True
    return pooled, within


def oof_scores(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int = PROBE_SEED
) -> np.ndarray:
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
    with warnings.catch_warnings():
        # Folds by problem cannot all hold both classes when one class is rare; that case is
        # handled below and reported once by bt probe, not as sklearn's per-split warning.
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        splits = list(folds.split(x, y, codes))
    for train, test in splits:
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


def _decomposition_row(
    arm: str,
    score_name: str,
    t: int | None,
    group: np.ndarray,
    y: np.ndarray,
    s: np.ndarray,
    pooled: np.ndarray,
    within: np.ndarray,
    n_boot: int,
) -> dict:
    """One table row: pooled AUROC on the pooled set, within AUROCs on the within set, CIs."""
    row: dict = {
        "arm": arm,
        "score": score_name,
        "t": t,
        "rows": int(y.size),
        "pooled_rows": int(pooled.sum()),
        "within_rows": int(within.sum()),
        "within_problems": len(set(group[within].tolist())),
    }
    for mask, stat_names, seed in (
        (pooled, ("pooled",), PROBE_SEED),
        (within, ("within_failure_weighted", "within_pair_weighted"), WITHIN_BOOT_SEED),
    ):
        for name in stat_names:
            row[name] = row[f"{name}_lo"] = row[f"{name}_hi"] = np.nan
        if not mask.any():
            continue
        point = stats.decompose(group[mask], s[mask], y[mask])
        boot = (
            stats.bootstrap_decomposition(
                group[mask], y[mask], {"s": s[mask]}, n_boot=n_boot, seed=seed
            )
            if n_boot
            else None
        )
        for name in stat_names:
            row[name] = getattr(point, name)
            if boot is not None:
                row[f"{name}_lo"], row[f"{name}_hi"] = boot.interval("s", name)
    return row


@dataclass
class ProbeTable:
    """The study's table (per arm one row per anchor, then the LOO reference) and the fidelity."""

    table: Any  # pandas DataFrame with TABLE_COLUMNS
    top1_mean: float
    top1_p10: float
    scores: dict[int, np.ndarray]  # hidden arm: out-of-fold score per anchor (NaN: not scored)
    stream_scores: dict[int, np.ndarray] = field(default_factory=dict)  # the same, stream arm


def _scored_rows(
    arms: Mapping[str, Mapping[int, np.ndarray]], t: int, keep: np.ndarray
) -> np.ndarray:
    """The rows every arm scores at t: analysed (pooled or within set) and with finite features
    in each arm, so the arms share rows and therefore folds (the split depends on rows only)."""
    have = keep.copy()
    for feats in arms.values():
        x = feats.get(t)
        if x is not None and x.ndim == 2 and x.shape[1] > 0:
            have &= np.isfinite(x).all(axis=1)
    return have


def probe_table(
    data: ProbeData, n_boot: int = N_BOOT, progress: Callable[[str], None] | None = None
) -> ProbeTable:
    """Run each arm's probe at every anchor of `data` and decompose its out-of-fold scores."""
    import pandas as pd

    pid, y = data.problem_id, data.correct.astype(np.int8)
    pooled, within = select_sets(pid, data.correct)
    keep = pooled | within
    arms = data.arms()
    anchors = sorted(set(data.features) | set(data.streams))
    rows: list[dict] = []
    scores: dict[str, dict[int, np.ndarray]] = {arm: {} for arm in ARMS}
    for arm, feats in (("hidden", data.features), ("stream", data.streams)):
        if arm == "stream" and arm not in arms:
            continue  # no streams given: the hidden arm alone
        for t in anchors:
            scores[arm][t] = np.full(y.size, np.nan)
            x = feats.get(t)
            have = (
                _scored_rows(arms, t, keep)
                if arm in arms and x is not None
                else np.zeros(y.size, dtype=bool)
            )
            if have.sum() < 2 or len(set(pid[have].tolist())) < 2 or np.unique(y[have]).size < 2:
                if progress:
                    progress(
                        f"t={t} {arm}: {int(have.sum())} rows reach it, too few to fit a "
                        "probe; skipped"
                    )
                continue
            assert x is not None  # `have` holds no row when the arm has no features at t
            s = oof_scores(x[have], y[have], pid[have])
            scores[arm][t][have] = s
            rows.append(
                _decomposition_row(
                    arm, "probe", t, pid[have], y[have], s, pooled[have], within[have], n_boot
                )
            )
            if progress:
                r = rows[-1]
                progress(
                    f"t={t} {arm}: pooled {r['pooled']:.3f}, "
                    f"within {r['within_failure_weighted']:.3f}"
                )
    loo = stats.loo_score(pid, y)
    ok = keep & np.isfinite(loo)
    if ok.any():
        rows.append(
            _decomposition_row(
                "loo", "loo", None, pid[ok], y[ok], loo[ok], pooled[ok], within[ok], n_boot
            )
        )
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    table["t"] = table["t"].astype("Int64")
    top1 = data.top1[np.isfinite(data.top1)] if data.top1.size else np.zeros(0)
    return ProbeTable(
        table=table,
        top1_mean=float(top1.mean()) if top1.size else float("nan"),
        top1_p10=float(np.quantile(top1, 0.10)) if top1.size else float("nan"),
        scores=scores["hidden"],
        stream_scores=scores["stream"],
    )


def format_table(table) -> list[str]:  # table: pd.DataFrame
    """The table as the study prints it: t, arm, pooled [CI], within failure-w. [CI], pair-w.
    [CI], rows (the hidden arm's rows, then the stream arm's, then the LOO reference)."""

    def cell(r, name: str) -> str:
        v, lo, hi = r[name], r.get(f"{name}_lo"), r.get(f"{name}_hi")
        if not np.isfinite(v):
            return "n/a"
        ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and np.isfinite(lo) else ""
        return f"{v:.3f}{ci}"

    head = (
        f"{'t':>6}  {'arm':<8}{'pooled [95% CI]':<24}{'within, failure-w. [CI]':<26}"
        f"{'within, pair-w. [CI]':<26}{'rows':>6}"
    )
    lines = [head]
    for _, r in table.iterrows():
        t = "LOO" if r["score"] == "loo" else str(int(r["t"]))
        lines.append(
            f"{t:>6}  {r['arm']:<8}{cell(r, 'pooled'):<24}"
            f"{cell(r, 'within_failure_weighted'):<26}"
            f"{cell(r, 'within_pair_weighted'):<26}{int(r['rows']):>6}"
        )
    return lines
