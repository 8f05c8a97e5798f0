"""The tables of `bt report uoo`: `uoo_tables` turns a graded frame (`breakthrough.analyses.uoo`
regrades the runs) into the report's tables (leaderboard, exact-count accuracy by bin and kind,
by size, count errors, thinking arms, run-vs-run tests, run-to-run agreement) as plain
`TextTable`s, which the command prints and `report.uoo_page` draws as a page. The metrics
themselves are the pure functions of `breakthrough.report.uoo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import pandas as pd

from breakthrough.report.uoo import (
    RESOLUTION_NOTE,
    by_size,
    check_accuracy,
    count_agreement,
    count_errors,
    fisher_compare,
    leaderboard,
    mcnemar_compare,
)

CI_METHODS = {"wilson": "Wilson", "exact": "Clopper-Pearson"}


@dataclass
class TextTable:
    """A titled table of strings; `left` names the left-aligned columns (others align right)."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    left: tuple[str, ...] = ()
    note: str | None = None  # printed after the table
    key: str = ""  # the page's anchor for the table (report.uoo_page)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return str(x)


def _fixed29(df: pd.DataFrame) -> bool:
    """Whether the published leaderboard's 29 items are among the answers: the leaderboard and
    Fisher's test are over them; a cohort without them (uoo-large) is scored over every item."""
    return bool(df["fixed29"].astype(bool).any())


def _leaderboard(df: pd.DataFrame, run_names: list[str], meta: pd.DataFrame, ci: str) -> TextTable:
    over = "fixed29" if _fixed29(df) else "all items: the cohort has no fixed29 item"
    lb = leaderboard(df if _fixed29(df) else df.assign(fixed29=True), by=("run",), method=ci)
    t = TextTable(
        f"UoO leaderboard ({over}; {CI_METHODS[ci]} 95% CI)",
        ("run", "model", "variant", "k/n", "score", "95% CI", "samples", "exact count (all)"),
        left=("run", "model", "variant"),
        note=RESOLUTION_NOTE if _fixed29(df) else None,
        key="leaderboard",
    )
    for r in lb.to_dict("records"):
        d = df[df["run"] == r["run"]]
        m = meta.loc[r["run"]]
        t.rows.append((
            str(r["run"]), str(m["model"]), str(m["variant"]), f"{r['k']}/{r['n']}",
            _fmt(r["score"]), f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]", str(len(d)),
            f"{int(d['count_ok'].sum())}/{len(d)}",
        ))  # fmt: skip
    for name in run_names:
        if name not in set(lb["run"]):
            t.rows.append((name, str(meta.loc[name, "model"]), str(meta.loc[name, "variant"]),
                           "0/0", "-", "-", str(int((df["run"] == name).sum())), "-"))  # fmt: skip
    return t


def _accuracy(df: pd.DataFrame, run_names: list[str], by: str) -> TextTable:
    acc = check_accuracy(df, ["run", by])
    keys = list(dict.fromkeys(acc[by]))
    heads = [
        str(acc.loc[acc[by] == key, "bin_label"].iloc[0]) if by == "bin" else str(key)
        for key in keys
    ]
    t = TextTable(
        f"Exact-count accuracy by {by}", ("run", *heads), left=("run",), key=f"accuracy-by-{by}"
    )
    for name in run_names:
        sub = acc[acc["run"] == name].set_index(by)
        t.rows.append((name, *[
            f"{sub.loc[k, 'k']}/{sub.loc[k, 'n']}" if k in sub.index else "-" for k in keys
        ]))  # fmt: skip
    return t


def _count_errors(df: pd.DataFrame, run_names: list[str]) -> TextTable:
    cols = ("parsed", "exact", "wrong", "under", "over", "sign p", "within x2 (all)",
            "within x2 (wrong)", "mean log2", "count acc | optimal", "labels")  # fmt: skip
    t = TextTable(
        "Count errors (parsed answers)", ("run", *cols), left=("run", "labels"), key="count-errors"
    )
    for name in run_names:
        d = df[df["run"] == name]
        ce = count_errors(d)
        labels = ", ".join(f"{k} {v}" for k, v in d["label"].value_counts().items())
        t.rows.append((
            name, f"{ce['n_parsed']}/{ce['n']}", str(ce["n_count_exact"]), str(ce["n_count_wrong"]),
            str(ce["under"]), str(ce["over"]), _fmt(ce["sign_test_p"]), _fmt(ce["within_x2_rate"]),
            _fmt(ce["within_x2_among_wrong"]), _fmt(ce["mean_log2_ratio"]),
            _fmt(ce["count_acc_given_optimal"]), labels,
        ))  # fmt: skip
    return t


def _run_vs_run(df: pd.DataFrame, run_names: list[str]) -> TextTable:
    fixed = _fixed29(df)
    t = TextTable(
        f"Run vs run (Fisher exact on {'fixed29' if fixed else 'every item'}'s score; exact "
        "McNemar on shared items)",
        (
            "A",
            "B",
            "Fisher k_A/n_A vs k_B/n_B",
            "Fisher p",
            "McNemar score b/c",
            "p",
            "McNemar count b/c",
            "p",
        ),
        left=("A", "B"),
        key="run-vs-run",
    )
    for a, b in combinations(run_names, 2):
        f = fisher_compare(df, a, b, by="run", fixed29_only=fixed)
        ms = mcnemar_compare(df, a, b, by="run", check="score")
        mc = mcnemar_compare(df, a, b, by="run", check="count_ok")
        t.rows.append((
            a, b, f"{f['k_a']}/{f['n_a']} vs {f['k_b']}/{f['n_b']}", _fmt(f["p"]),
            f"{ms['b_n']}/{ms['c_n']} (n={ms['n_pairs']})", _fmt(ms["p"]),
            f"{mc['b_n']}/{mc['c_n']}", _fmt(mc["p"]),
        ))  # fmt: skip
    return t


def _agreement(df: pd.DataFrame) -> TextTable:
    groups = df.groupby(["model", "variant"], sort=False)["run"].unique()
    t = TextTable(
        "Run-to-run agreement of claimed counts (repeated runs of one model+variant)",
        (
            "model",
            "variant",
            "runs",
            "items",
            "identical",
            "differ",
            "pairwise agree",
            "score mean",
            "sd",
            "pass@R",
            "pass^R",
            "majority",
        ),
        left=("model", "variant"),
        key="agreement",
    )
    for (model, var), names in groups.items():
        if len(names) < 2:
            continue
        ag = count_agreement(df[df["run"].isin(names)], by="run")
        t.rows.append((
            str(model), str(var), str(ag["runs"]), str(ag["n_items"]), str(ag["n_identical"]),
            str(ag["n_differ"]), _fmt(ag["mean_pairwise_agreement"]), _fmt(ag["score_mean"]),
            _fmt(ag["score_sd"]), _fmt(ag["pass_at_r"]), _fmt(ag["pass_all_r"]),
            _fmt(ag["majority_vote"]),
        ))  # fmt: skip
    return t


def _by_size(df: pd.DataFrame) -> TextTable:
    t = TextTable(
        "By problem size n (accuracy, exact count, undercount share of wrong counts, within 2x)",
        ("run", "kind", "n", "items", "accuracy", "exact count", "undercount share", "within 2x"),
        left=("run", "kind"),
        key="by-size",
    )
    for r in by_size(df).to_dict("records"):
        t.rows.append((
            r["run"], r["kind"], str(r["size"]), str(r["n"]), _fmt(r["accuracy"]),
            _fmt(r["exact_count"]), _fmt(r["undercount_share"]), _fmt(r["within_x2"]),
        ))  # fmt: skip
    return t


def _thinking_arms(df: pd.DataFrame) -> TextTable | None:
    """Each run made with `--thinking off` against each run of the same model and prompt
    variant made with it on (or not asked, which renders it on): the paired exact McNemar on
    the items both answered, for the whole score and for the exact count. None when no run
    turned thinking off."""
    if "thinking" not in df.columns or not (df["thinking"] == "off").any():
        return None
    meta = df.groupby("run", sort=False).agg(
        model=("model", "first"), variant=("variant", "first"), thinking=("thinking", "first")
    )
    t = TextTable(
        "Thinking on vs off (exact McNemar on the items both arms answered)",
        (
            "model",
            "variant",
            "on",
            "off",
            "pairs",
            "score on",
            "score off",
            "score b/c",
            "p",
            "count on",
            "count off",
            "count b/c",
            "p",
        ),  # fmt: skip
        left=("model", "variant", "on", "off"),
        note="b: right with thinking on and wrong with it off; c: the reverse. A run made "
        "without --thinking is the on arm (bt renders thinking on wherever the switch exists).",
        key="thinking",
    )
    for (model, variant), g in meta.groupby(["model", "variant"], sort=False, dropna=False):
        ons = [r for r, th in g["thinking"].items() if th != "off"]
        offs = [r for r, th in g["thinking"].items() if th == "off"]
        for on in ons:
            for off in offs:
                ms = mcnemar_compare(df, on, off, by="run", check="score")
                mc = mcnemar_compare(df, on, off, by="run", check="count_ok")
                n = ms["n_pairs"]
                t.rows.append((
                    str(model), str(variant), str(on), str(off), str(n),
                    f"{ms['k_a']}/{n}", f"{ms['k_b']}/{n}", f"{ms['b_n']}/{ms['c_n']}",
                    _fmt(ms["p"]), f"{mc['k_a']}/{n}", f"{mc['k_b']}/{n}",
                    f"{mc['b_n']}/{mc['c_n']}", _fmt(mc["p"]),
                ))  # fmt: skip
    return t


def uoo_tables(df: pd.DataFrame, ci: str = "wilson") -> list[TextTable]:
    """The report's tables over a graded frame: leaderboard, exact-count accuracy by bin and by
    kind, by size, count errors and, with two or more runs, the thinking arms (when a run
    turned thinking off), run-vs-run tests and (for repeated runs of one model + variant)
    run-to-run agreement."""
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {', '.join(CI_METHODS)}, got {ci!r}")
    df = df.assign(variant=df["variant"].fillna("plain"))
    run_names = list(dict.fromkeys(df["run"]))
    meta = df.groupby("run", sort=False).agg(model=("model", "first"), variant=("variant", "first"))
    tables = [
        _leaderboard(df, run_names, meta, ci),
        _accuracy(df, run_names, "bin"),
        _accuracy(df, run_names, "kind"),
        _count_errors(df, run_names),
    ]
    if "size" in df.columns:
        tables.insert(3, _by_size(df))
    if len(run_names) >= 2:
        arms = _thinking_arms(df)
        if arms is not None and arms.rows:
            tables.append(arms)
        tables.append(_run_vs_run(df, run_names))
        agreement = _agreement(df)
        if agreement.rows:
            tables.append(agreement)
    return tables
