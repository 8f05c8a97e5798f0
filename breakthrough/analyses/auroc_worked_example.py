"""The pooled / within / between AUROC decomposition: the study's worked example, then a run.

1. Worked example (protocol 9.8): problem A has 3 correct and 1 wrong attempt, problem C has 1
   correct and 3 wrong; every attempt of A scores 0.75 and every attempt of C 0.25 (a score
   that knows only the problem). Pooled AUROC = 12/16, within = 0.5, 6 of the 16
   success/failure pairs lie inside a problem (lambda = 6/16), between = 9/10, and
   pooled = lambda * within + (1 - lambda) * between. The leave-one-out pass rate gets within 0.

2. Given run directories, the same decomposition for their base samples, with the score
   -(mean entropy of the first N generated tokens) (default N = 256; low entropy read as
   "predicts correct", so AUROC of +entropy is 1 - each number), the LOO pass-rate reference,
   and problem-clustered percentile bootstrap intervals. Groups default to problem_id, so with
   several runs (models) a problem's base samples form one group; with a single base sample per
   problem every group has one row and lambda = 0 (all pairs are between problems).

    python -m breakthrough.analyses.auroc_worked_example [RUN_DIR ...] [--tokens 256]
        [--group problem_id] [--bootstrap 2000] [--seed 20260831] [--include-short]

A module of the package (not a script of the clone), so the installed wheel runs it from any
folder, as the README's pipeline does; `bt auroc` is the same decomposition on any table.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any

import numpy as np

from breakthrough import stats as S

STATS = (
    ("pooled", "pooled"),
    ("within_pair_weighted", "within (pair-weighted)"),
    ("within_failure_weighted", "within (failure-weighted)"),
    ("between", "between"),
    ("lam", "lambda"),
)


def worked_example() -> dict[str, Any]:
    """The study's two-problem example; returns the decompositions of the score and of LOO."""
    group = ["A"] * 4 + ["C"] * 4
    correct = [1, 1, 1, 0, 1, 0, 0, 0]
    score = np.array([{"A": 0.75, "C": 0.25}[g] for g in group])  # a question-only score
    d = S.decompose(group, score, correct)
    loo = S.loo_score(group, correct)
    return {
        "group": group,
        "correct": correct,
        "score": score,
        "decomposition": d,
        "loo": loo,
        "loo_decomposition": S.decompose(group, loo, correct),
    }


def _frac(x: float) -> str:
    return str(Fraction(x).limit_denominator(1000))


def print_worked_example() -> dict[str, Any]:
    ex = worked_example()
    d: S.Decomposition = ex["decomposition"]
    print("Worked example (protocol 9.8)")
    print("  problem  correct  score")
    for g, y, s in zip(ex["group"], ex["correct"], ex["score"], strict=True):
        print(f"  {g:<8} {y:<8} {s:.2f}")
    print(
        f"  success/failure pairs {d.n_pairs}: {d.n_within_pairs} inside a problem, "
        f"{d.n_between_pairs} across problems"
    )
    print(f"  pooled  = {round(d.pooled * d.n_pairs)}/{d.n_pairs} = {d.pooled:.4f}")
    print(f"  within  = {_frac(d.within)} (a score that knows only the problem ties within pairs)")
    print(f"  between = {_frac(d.between)}")
    print(f"  lambda  = {d.n_within_pairs}/{d.n_pairs} = {_frac(d.lam)}")
    check = d.lam * d.within + (1 - d.lam) * d.between
    print(
        f"  lambda*within + (1-lambda)*between = {_frac(d.lam)}*{_frac(d.within)} + "
        f"{_frac(1 - d.lam)}*{_frac(d.between)} = {_frac(check)} (pooled {_frac(d.pooled)})"
    )
    ld: S.Decomposition = ex["loo_decomposition"]
    loo = ", ".join(_frac(v) for v in ex["loo"])
    print(f"  LOO pass rate per row: {loo}")
    print(
        f"  LOO: pooled {_frac(ld.pooled)}, within {_frac(ld.within)} (0 by construction), "
        f"between {_frac(ld.between)}"
    )
    return ex


def early_entropy_score(entropies: Any, tokens: int, include_short: bool) -> np.ndarray:
    """-(mean entropy of the first ``tokens`` generated tokens) per row; NaN when unavailable."""
    out = np.full(len(entropies), np.nan)
    for i, e in enumerate(entropies):
        e = np.asarray(e, dtype=np.float64)
        if e.size == 0 or (e.size < tokens and not include_short):
            continue
        out[i] = -float(np.mean(e[:tokens]))
    return out


def _line(name: str, d: S.Decomposition, boot: S.BootstrapResult | None, key: str) -> str:
    cells = []
    for stat, _ in STATS:
        v = getattr(d, stat)
        text = "n/a" if not np.isfinite(v) else f"{v:.4f}"
        if boot is not None and np.isfinite(v):
            lo, hi = boot.interval(key, stat)
            if np.isfinite(lo):
                text += f" [{lo:.4f}, {hi:.4f}]"
        cells.append(text.ljust(28))
    return f"  {name:<22}" + "".join(cells).rstrip()


def decompose_frame(df: Any, group_col: str, n_boot: int, seed: int, title: str) -> dict[str, Any]:
    """Print and return the decomposition of ``score`` (and LOO) over the rows of ``df``."""
    g = df[group_col].astype(str).to_numpy()
    y = df["correct"].astype(int).to_numpy()
    s = df["score"].to_numpy(dtype=np.float64)
    d = S.decompose(g, s, y)
    k, n = int(y.sum()), int(y.size)
    w = S.proportion_ci(k, n, method="wilson")
    cp = S.proportion_ci(k, n, method="exact")
    print(
        f"{title}: {n:,} base samples, {d.n_groups:,} groups ({group_col}), "
        f"{d.n_groups_mixed:,} with both outcomes; correct {k:,} = {k / n:.4f} "
        f"(Wilson [{w[0]:.4f}, {w[1]:.4f}], Clopper-Pearson [{cp[0]:.4f}, {cp[1]:.4f}])"
    )
    print(
        f"  success/failure pairs {d.n_pairs:,}: within groups {d.n_within_pairs:,}, "
        f"between {d.n_between_pairs:,}"
    )
    print(f"  {'score':<22}" + "".join(label.ljust(28) for _, label in STATS).rstrip())
    both = 0 < k < n
    boot = None
    if n_boot and both:
        boot = S.bootstrap_decomposition(g, y, {"entropy": s}, n_boot=n_boot, seed=seed)
    print(_line("-mean early entropy", d, boot, "entropy"))
    codes = S.encode_groups(g)[0]
    multi = np.bincount(codes)[codes] > 1
    loo_d = None
    if multi.any() and 0 < y[multi].sum() < multi.sum():
        gm, ym = g[multi], y[multi]
        loo = S.loo_score(gm, ym)
        loo_d = S.decompose(gm, loo, ym)
        lboot = None
        if n_boot:
            lboot = S.bootstrap_decomposition(gm, ym, {"loo": loo}, n_boot=n_boot, seed=seed)
        note = "" if multi.all() else f" ({int(multi.sum()):,} rows in groups of 2+)"
        print(_line("LOO pass rate", loo_d, lboot, "loo") + note)
    else:
        print("  LOO pass rate: undefined (no group with 2+ rows and both outcomes)")
    if d.n_within_pairs == 0:
        print("  lambda = 0: no group holds both a success and a failure; pooled = between")
    return {"decomposition": d, "loo": loo_d}


def analyse_runs(
    run_dirs: list[str],
    tokens: int = 256,
    group_col: str = "problem_id",
    n_boot: int = 2000,
    seed: int = 20260831,
    include_short: bool = False,
) -> dict[str, Any]:
    """Load the runs' base samples and print the decomposition (overall and per model)."""
    import pandas as pd

    from breakthrough.store import RunStore, find_runs  # docs/architecture.md; imported lazily

    found = find_runs(run_dirs, study=True)  # `runs/*/` also names runs/classify, runs/attempts
    for note in found.notes:
        print(f"note: {note}")
    run_dirs = [str(d) for d in found.runs]
    frames = []
    for rd in run_dirs:
        with RunStore(rd, readonly=True) as store:
            f = store.samples_frame()  # the contract's call (docs/architecture.md)
        f = f[f["kind"] == "base"].copy()
        f["run"] = str(rd)
        frames.append(f)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    print(f"\nRuns: {', '.join(map(str, run_dirs))}")
    if df.empty:
        print("  no base samples")
        return {}
    if group_col not in df.columns:
        raise SystemExit(f"no column {group_col!r} in the samples frame")
    n0 = len(df)
    graded = df["correct"].notna()
    df = df[graded].copy()
    df["score"] = early_entropy_score(df["entropies"], tokens, include_short)
    short = df["score"].isna()
    print(
        f"  base samples {n0:,}; ungraded {int((~graded).sum()):,}; "
        f"fewer than {tokens} generated tokens {int(short.sum()):,}"
        + (" (excluded)" if not include_short else " (no entropies; excluded)")
    )
    df = df[~short]
    df["correct"] = df["correct"].astype(bool)
    if df.empty or df["correct"].nunique() < 2:
        print("  need both correct and wrong base samples; nothing to decompose")
        return {}
    print(f"  score: -(mean entropy, nats, of the first {tokens} generated tokens)")
    out = {"all": decompose_frame(df, group_col, n_boot, seed, "all")}
    if df["model"].nunique() > 1:
        for model, sub in df.groupby("model", sort=True):
            if sub["correct"].nunique() == 2:
                out[str(model)] = decompose_frame(sub, group_col, n_boot, seed, f"model {model}")
    if n_boot:
        print(f"  intervals: 95% percentile, {n_boot:,} draws resampling {group_col}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m breakthrough.analyses.auroc_worked_example",
        description=__doc__.splitlines()[0],
    )
    ap.add_argument("runs", nargs="*", help="run directories (each holding store.sqlite)")
    ap.add_argument("--tokens", type=int, default=256, help="early tokens averaged (default 256)")
    ap.add_argument("--group", default="problem_id", help="group column (default problem_id)")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap draws (0: none)")
    ap.add_argument("--seed", type=int, default=20260831)
    ap.add_argument(
        "--include-short",
        action="store_true",
        help="average whatever early tokens a short sample has instead of excluding it",
    )
    args = ap.parse_args(argv)
    print_worked_example()
    if args.runs:
        from breakthrough.errors import BtError

        try:
            analyse_runs(
                args.runs, args.tokens, args.group, args.bootstrap, args.seed, args.include_short
            )
        except BtError as exc:  # one line and exit 2, as bt says a mistake the user can fix
            ap.exit(2, f"error: {exc}\n")


if __name__ == "__main__":
    main()
