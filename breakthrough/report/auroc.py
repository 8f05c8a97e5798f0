"""The printed form of `bt auroc`'s report: one table per section (all rows, each --by value)
of the pooled / within / between decomposition with its intervals. The computation is
`breakthrough.analyses.auroc`."""

from __future__ import annotations

from typing import Any

LOO_NAME = "LOO reference"


def _fmt(entry: dict[str, Any], signed: bool = False) -> str:
    """`estimate [lo, hi]` with 4 decimals (a leading sign for differences)."""
    spec = "+.4f" if signed else ".4f"
    est = entry.get("estimate")
    if est is None:
        return "n/a"
    text = format(est, spec)
    ci = entry.get("ci")
    if ci is not None:
        lo, hi = ci
        text += " [" + ("n/a" if lo is None else format(lo, spec)) + ", "
        text += ("n/a" if hi is None else format(hi, spec)) + "]"
    return text


_COLUMNS = (
    ("pooled", "pooled"),
    ("within_pair_weighted", "within (pair-w.)"),
    ("within_failure_weighted", "within (failure-w.)"),
    ("between", "between"),
    ("lam", "lambda"),
)


def format_section(title: str, sec: dict[str, Any]) -> list[str]:
    """The printed lines of one section: counts, success rate and a table of the decomposition."""
    lines: list[str] = []
    echo = lines.append
    sr = sec["success_rate"]
    est = sr["estimate"]
    rate = "n/a" if est is None else f"{est:.4f}"
    w, cp = sr["wilson"], sr["clopper_pearson"]
    first = next(iter(sec["scores"].values()))
    echo(
        f"{title}: {sec['n_rows']:,} rows, {sec['n_groups']:,} groups "
        f"({first['n_groups_mixed']:,} with both outcomes); success rate {rate} "
        f"(Wilson [{w[0]:.4f}, {w[1]:.4f}], Clopper-Pearson [{cp[0]:.4f}, {cp[1]:.4f}])"
    )
    echo(
        f"  discordant pairs {first['n_pairs']:,}: within groups {first['n_within_pairs']:,}, "
        f"between {first['n_between_pairs']:,}"
    )
    if "note" in sec:
        echo(f"  note: {sec['note']}")
    rows = [(name, s, False) for name, s in sec["scores"].items()]
    rows.append((LOO_NAME, sec["loo_reference"], False))
    rows += [(f"diff {name}", d, True) for name, d in sec["differences"].items()]
    width = max(len(r[0]) for r in rows) + 2
    cells = [[_fmt(s[key], signed) for key, _ in _COLUMNS] for _, s, signed in rows]
    widths = [
        max(len(head), *(len(c[i]) for c in cells)) + 2 for i, (_, head) in enumerate(_COLUMNS)
    ]
    head = "".join(h.ljust(wd) for (_, h), wd in zip(_COLUMNS, widths, strict=True))
    echo(("  " + "score".ljust(width) + head).rstrip())
    for (name, _, _), c in zip(rows, cells, strict=True):
        echo(
            (
                "  "
                + name.ljust(width)
                + "".join(x.ljust(wd) for x, wd in zip(c, widths, strict=True))
            ).rstrip()
        )
    return lines


def report_lines(rep: dict[str, Any]) -> list[str]:
    """The printed form: one section for all rows, one per --by value, the interval note."""
    out = format_section("all", rep["results"]["all"])
    for value, sec in rep["by_results"].items():
        out += format_section(f"{rep['by']} = {value}", sec)
    if rep["bootstrap"]:
        out.append(
            f"intervals: 95% percentile, {rep['bootstrap']:,} draws resampling "
            f"{rep['bootstrap_unit']}"
        )
    return out
