"""`bt report ...`: reports over finished runs. `bt report uoo RUN...` prints the
Uniqueness-of-Optimum leaderboard and count metrics (logic in breakthrough.report.uoo)."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any, Optional

import typer

VARIANT_KEYS = ("prompt_variant", "variant", "uoo_variant")


def _console():
    from rich.console import Console

    return Console(width=160)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return str(x)


def _sample_variant(extra: Any) -> str | None:
    if isinstance(extra, str) and extra:
        try:
            extra = json.loads(extra)
        except ValueError:
            return None
    if isinstance(extra, dict):
        for key in VARIANT_KEYS:
            if isinstance(extra.get(key), str):
                return extra[key]
    return None


def manifest_variant(manifest: dict[str, Any]) -> str | None:
    """The prompt variant a run was made with: an explicit manifest key, or the suffix of
    `prompt_version` ("v1/explicit", as the scheduler writes it for optimum cohorts)."""
    for key in VARIANT_KEYS:
        if isinstance(manifest.get(key), str):
            return manifest[key]
    pv = manifest.get("prompt_version")
    if isinstance(pv, str) and "/" in pv:
        return pv.rsplit("/", 1)[1]
    return None


def load_graded(runs: list[Path], cohort: str, variant: str | None):
    """One graded frame over all runs (regraded from the stored text)."""
    import pandas as pd

    from breakthrough.tasks.cohorts import load_cohort
    from breakthrough.errors import BtError
    from breakthrough.report.uoo import graded_frame, summarize_runs
    from breakthrough.store import RunStore, run_dirs

    items = {r["id"]: r for r in load_cohort(cohort) if r.get("family") == "optimum"}
    if not items:
        raise BtError(f"cohort {cohort!r} has no optimum rows")
    frames = []
    labels: set[str] = set()
    for run_dir in run_dirs(runs):
        label = run_dir.name
        while label in labels:
            label += "'"
        labels.add(label)
        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
            samples = store.samples_frame(arrays=False, kind="base")
        finally:
            store.close()
        run_variant = variant or manifest_variant(manifest)
        if "extra" in samples:
            per_sample = samples["extra"].map(_sample_variant)
            samples = samples.assign(variant=per_sample.where(per_sample.notna(), run_variant))
        frames.append(graded_frame(samples, items, run=label, variant=run_variant))
    df = summarize_runs(frames)
    if df.empty:
        raise BtError(
            f"no samples of cohort {cohort!r} in {', '.join(map(str, runs))} "
            "(run e.g. `bt base --cohort uoo29 ...` first)"
        )
    return pd.DataFrame(df)


def uoo(
    runs: list[Path] = typer.Argument(..., help="Run directories (or folders of run dirs)."),
    cohort: str = typer.Option(
        "uoo87", "--cohort", help="Cohort holding the items (uoo87 covers uoo29)."
    ),
    variant: Optional[str] = typer.Option(
        None, "--variant", help="Prompt variant label for runs that do not record one."
    ),
    ci: str = typer.Option("wilson", "--ci", help="Leaderboard interval: wilson | exact."),
) -> None:
    """Uniqueness-of-Optimum report: leaderboard over the 29, count accuracy by bin and kind,
    under/over-counts, Fisher / exact McNemar between runs, run-to-run count agreement."""
    from rich.table import Table

    from breakthrough.errors import BtError
    from breakthrough.report.uoo import (
        RESOLUTION_NOTE,
        check_accuracy,
        count_agreement,
        count_errors,
        fisher_compare,
        leaderboard,
        mcnemar_compare,
    )

    if ci not in ("wilson", "exact"):
        raise BtError(f"--ci: expected wilson or exact, got {ci!r}")
    df = load_graded(runs, cohort, variant)
    df["variant"] = df["variant"].fillna("plain")
    console = _console()
    run_names = list(dict.fromkeys(df["run"]))
    meta = df.groupby("run", sort=False).agg(model=("model", "first"), variant=("variant", "first"))

    lb = leaderboard(df, by=("run",), method=ci)
    ci_name = "Wilson" if ci == "wilson" else "Clopper-Pearson"
    t = Table(title=f"UoO leaderboard (fixed29; {ci_name} 95% CI)")
    cols = ("run", "model", "variant", "k/n", "score", "95% CI", "samples", "exact count (all)")
    for col in cols:
        t.add_column(col, justify="left" if col in ("run", "model", "variant") else "right")
    for r in lb.to_dict("records"):
        d = df[df["run"] == r["run"]]
        m = meta.loc[r["run"]]
        t.add_row(
            str(r["run"]), str(m["model"]), str(m["variant"]), f"{r['k']}/{r['n']}",
            _fmt(r["score"]), f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]", str(len(d)),
            f"{int(d['count_ok'].sum())}/{len(d)}",
        )  # fmt: skip
    for name in run_names:
        if name not in set(lb["run"]):
            t.add_row(name, str(meta.loc[name, "model"]), str(meta.loc[name, "variant"]),
                      "0/0", "-", "-", str(int((df["run"] == name).sum())), "-")  # fmt: skip
    console.print(t)
    console.print(RESOLUTION_NOTE)

    for by in ("bin", "kind"):
        title = f"Exact-count accuracy by {by}"
        acc = check_accuracy(df, ["run", by])
        keys = list(dict.fromkeys(acc[by]))
        t = Table(title=title)
        t.add_column("run")
        for key in keys:
            label = acc.loc[acc[by] == key, "bin_label"].iloc[0] if by == "bin" else key
            t.add_column(str(label), justify="right")
        for name in run_names:
            sub = acc[acc["run"] == name].set_index(by)
            t.add_row(name, *[
                f"{sub.loc[k, 'k']}/{sub.loc[k, 'n']}" if k in sub.index else "-" for k in keys
            ])  # fmt: skip
        console.print(t)

    t = Table(title="Count errors (parsed answers)")
    cols = ("parsed", "exact", "wrong", "under", "over", "sign p", "within x2 (all)",
            "within x2 (wrong)", "mean log2", "count acc | optimal", "labels")  # fmt: skip
    t.add_column("run")
    for col in cols:
        t.add_column(col, justify="right" if col != "labels" else "left")
    for name in run_names:
        d = df[df["run"] == name]
        ce = count_errors(d)
        labels = ", ".join(f"{k} {v}" for k, v in d["label"].value_counts().items())
        t.add_row(
            name, f"{ce['n_parsed']}/{ce['n']}", str(ce["n_count_exact"]), str(ce["n_count_wrong"]),
            str(ce["under"]), str(ce["over"]), _fmt(ce["sign_test_p"]), _fmt(ce["within_x2_rate"]),
            _fmt(ce["within_x2_among_wrong"]), _fmt(ce["mean_log2_ratio"]),
            _fmt(ce["count_acc_given_optimal"]), labels,
        )  # fmt: skip
    console.print(t)

    if len(run_names) >= 2:
        t = Table(title="Run vs run (Fisher exact on fixed29 score; exact McNemar on shared items)")
        for col in ("A", "B", "Fisher k_A/n_A vs k_B/n_B", "Fisher p", "McNemar score b/c",
                    "p", "McNemar count b/c", "p"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("A", "B") else "right")
        for a, b in combinations(run_names, 2):
            f = fisher_compare(df, a, b, by="run")
            ms = mcnemar_compare(df, a, b, by="run", check="score")
            mc = mcnemar_compare(df, a, b, by="run", check="count_ok")
            t.add_row(
                a, b, f"{f['k_a']}/{f['n_a']} vs {f['k_b']}/{f['n_b']}", _fmt(f["p"]),
                f"{ms['b_n']}/{ms['c_n']} (n={ms['n_pairs']})", _fmt(ms["p"]),
                f"{mc['b_n']}/{mc['c_n']}", _fmt(mc["p"]),
            )  # fmt: skip
        console.print(t)
        groups = df.groupby(["model", "variant"], sort=False)["run"].unique()
        t = Table(title="Run-to-run agreement of claimed counts (repeated runs of one model+variant)")
        for col in ("model", "variant", "runs", "items", "identical", "differ",
                    "pairwise agree", "score mean", "sd", "pass@R", "pass^R", "majority"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("model", "variant") else "right")
        shown = False
        for (model, var), names in groups.items():
            if len(names) < 2:
                continue
            ag = count_agreement(df[df["run"].isin(names)], by="run")
            t.add_row(
                str(model), str(var), str(ag["runs"]), str(ag["n_items"]), str(ag["n_identical"]),
                str(ag["n_differ"]), _fmt(ag["mean_pairwise_agreement"]), _fmt(ag["score_mean"]),
                _fmt(ag["score_sd"]), _fmt(ag["pass_at_r"]), _fmt(ag["pass_all_r"]),
                _fmt(ag["majority_vote"]),
            )  # fmt: skip
            shown = True
        if shown:
            console.print(t)


def register(app: typer.Typer) -> None:
    report_app = typer.Typer(
        help="Reports over finished runs.", no_args_is_help=True, add_completion=False
    )
    report_app.command("uoo")(uoo)
    app.add_typer(report_app, name="report")
