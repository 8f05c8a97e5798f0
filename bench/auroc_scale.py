"""Scale check for the AUROC decomposition: a 200,000-row synthetic table.

Times, in this run and on these rows:
  * the baseline: scikit-learn's roc_auc_score (pooled AUROC only);
  * breakthrough.stats.auroc (rank-based pooled AUROC) and decompose (pooled, within with both
    weightings, between, lambda), each as a ratio to the baseline;
  * the clustered bootstrap (score + LOO reference, paired draws);
  * `bt auroc` end to end on the table written as parquet (read, checks, bootstrap, JSON),
    through `breakthrough.analyses.auroc.auroc_table`, the function the command calls.
Prints wall-clock seconds (best of 3 for the point estimates) and, for the long steps, this
process's CPU seconds, which shared cores inflate less. Nothing is asserted about timing.

    .venv/bin/python bench/auroc_scale.py [--rows 200000] [--groups 20000] [--bootstrap 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def synthetic(rows: int, groups: int, seed: int) -> pd.DataFrame:
    """Problems with a latent pass rate; the score sees that rate plus noise (many ties)."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, rows)
    rate = rng.beta(0.7, 0.5, groups)
    correct = rng.random(rows) < rate[g]
    score = np.round(rate[g] + rng.normal(0.0, 0.35, rows) + 0.1 * correct, 3)
    return pd.DataFrame({"problem_id": g, "correct": correct, "score": score})


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=20_000)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-cli", action="store_true", help="skip the end-to-end `bt auroc` run")
    args = ap.parse_args()

    from sklearn.metrics import roc_auc_score

    from breakthrough import stats as S

    df = synthetic(args.rows, args.groups, args.seed)
    df = df[df.groupby("problem_id")["problem_id"].transform("size") > 1]  # LOO needs 2+
    g = df["problem_id"].to_numpy()
    y = df["correct"].to_numpy()
    s = df["score"].to_numpy()
    print(f"rows {len(df):,}, groups {np.unique(g).size:,}, success rate {y.mean():.3f}")

    t_base, ref = best_of(lambda: roc_auc_score(y, s))
    t_auc, auc = best_of(lambda: S.auroc(s, y))
    t_dec, d = best_of(lambda: S.decompose(g, s, y))
    print(f"baseline sklearn roc_auc_score   {t_base:8.3f} s   pooled {ref:.6f}")
    print(
        f"stats.auroc (rank-based pooled)  {t_auc:8.3f} s   pooled {auc:.6f}   "
        f"ratio {t_auc / t_base:.2f}x baseline"
    )
    print(f"stats.decompose (all statistics) {t_dec:8.3f} s   ratio {t_dec / t_base:.2f}x baseline")
    print(
        f"  pooled {d.pooled:.4f} = {d.lam:.2e} x within {d.within:.4f} + "
        f"(1 - lam) x between {d.between:.4f}; within failure-w. {d.within_failure_weighted:.4f}"
    )
    assert abs(d.pooled - ref) < 1e-9, "pooled AUROC disagrees with scikit-learn"

    loo = S.loo_score(g, y)
    t, c = time.perf_counter(), time.process_time()
    boot = S.bootstrap_decomposition(g, y, {"score": s, "loo": loo}, n_boot=args.bootstrap, seed=1)
    t_boot, c_boot = time.perf_counter() - t, time.process_time() - c
    lo, hi = boot.interval("score", "pooled")
    print(
        f"bootstrap {args.bootstrap:,} draws (score + LOO, paired) {t_boot:8.3f} s   "
        f"(cpu {c_boot:.3f} s)   pooled [{lo:.4f}, {hi:.4f}]   "
        f"({t_boot / t_base:.0f}x one baseline AUROC)"
    )

    if not args.skip_cli:
        from breakthrough.analyses.auroc import auroc_table

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "table.parquet"
            df.to_parquet(path)
            t, c = time.perf_counter(), time.process_time()
            auroc_table(
                path,
                group=["problem_id"],
                score=["score"],
                label="correct",
                bootstrap=args.bootstrap,
            )
            t_cli, c_cli = time.perf_counter() - t, time.process_time() - c
        print(
            f"bt auroc end to end ({args.bootstrap:,} draws)   {t_cli:8.3f} s (cpu {c_cli:.3f} s)"
        )


if __name__ == "__main__":
    main()
