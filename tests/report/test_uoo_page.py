"""`bt report uoo --out` writes the report as a page (no browser here; test_pages_browser.py
loads it in Chromium): every table the terminal report prints, the by-size table holding the
numbers the answers imply, the thinking arms compared, the figure when some answer claimed a
count and one "no data because" line when none did, every run's name escaped, nothing written
into the runs."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt, snapshot
from uoo_fake_runs import cohort_rows, write_uoo_run

ROWS = cohort_rows("uoo-large")


def on_claims(it: dict) -> int:
    """Exact up to 50 optima, a quarter of the count above."""
    return it["n_optima"] if it["n_optima"] <= 50 else it["n_optima"] // 4


def off_claims(it: dict) -> int:
    """Half the count (at least 1) from n = 40 on, exact below."""
    return max(1, it["n_optima"] // 2) if it["size"] >= 40 else it["n_optima"]


class Tables(HTMLParser):
    """table class -> rows of cell texts; img srcs; text of p.no-data."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.imgs: list[str] = []
        self.no_data: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_no_data = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("class", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "img":
            self.imgs.append(a["src"])
        elif tag == "p" and a.get("class") == "no-data":
            self._in_no_data = True
            self.no_data.append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "p":
            self._in_no_data = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_no_data:
            self.no_data[-1] += data


def _parse(page: Path) -> Tables:
    t = Tables()
    t.feed(page.read_text(encoding="utf-8"))
    return t


@pytest.fixture(scope="module")
def two_arms(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("uoo-page")
    on = write_uoo_run(root / "on", ROWS, on_claims, model="m", thinking="on")
    off = write_uoo_run(root / "off", ROWS, off_claims, model="m", thinking="off")
    return on, off


def test_page_holds_every_table_the_figure_and_the_right_numbers(two_arms, tmp_path) -> None:
    on, off = two_arms
    before = snapshot(on), snapshot(off)
    out = tmp_path / "page"
    proc = run_bt("report", "uoo", on, off, "--cohort", "uoo-large", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out / 'index.html'}" in proc.stdout
    assert (snapshot(on), snapshot(off)) == before
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "<title>UoO report: 2 runs</title>" in html
    for key in ("leaderboard", "figure", "accuracy-by-bin", "accuracy-by-kind", "by-size",
                "count-errors", "thinking", "run-vs-run"):  # fmt: skip
        assert f'id="{key}"' in html, key
    assert "undercount share" in html and "within 2x" in html  # the page's own glossary
    page = _parse(out / "index.html")
    assert page.imgs == ["figures/claimed_vs_true.png"] and page.no_data == []
    assert (out / "figures" / "claimed_vs_true.png").read_bytes()[:4] == b"\x89PNG"

    head, *body = page.tables["uoo by-size"]
    assert head == ["run", "kind", "n", "items", "accuracy", "exact count",
                    "undercount share", "within 2x"]  # fmt: skip
    want = []
    for run, claims in (("on", on_claims), ("off", off_claims)):
        kinds = dict.fromkeys(r["kind"] for r in ROWS)
        for kind in kinds:
            for size in sorted({r["size"] for r in ROWS if r["kind"] == kind}):
                cell = [r for r in ROWS if (r["kind"], r["size"]) == (kind, size)]
                exact = sum(claims(r) == r["n_optima"] for r in cell)
                wrong = len(cell) - exact
                within = sum(r["n_optima"] / 2 <= claims(r) <= 2 * r["n_optima"] for r in cell)
                want.append([run, kind, str(size), str(len(cell)), f"{exact / len(cell):.3f}",
                             f"{exact / len(cell):.3f}", "1.000" if wrong else "-",
                             f"{within / len(cell):.3f}"])  # fmt: skip
    assert body == want  # every wrong count here is low: undercount share 1

    (head, row) = page.tables["uoo thinking"]
    both = [(on_claims(r) == r["n_optima"], off_claims(r) == r["n_optima"]) for r in ROWS]
    b = sum(x and not y for x, y in both)
    c = sum(y and not x for x, y in both)
    got = dict(zip(head, row, strict=True))
    assert (got["on"], got["off"], got["pairs"]) == ("on", "off", str(len(ROWS)))
    assert got["count b/c"] == f"{b}/{c}" and b > 0 and c > 0  # the arms disagree both ways


def test_no_claimed_count_is_one_line_not_an_empty_figure(tmp_path) -> None:
    from breakthrough.analyses.uoo import uoo_report

    run = write_uoo_run(tmp_path / "mute", ROWS[:6], lambda it: None)
    out = tmp_path / "page"
    uoo_report([run], cohort="uoo-large", out=out)
    page = _parse(out / "index.html")
    assert page.imgs == [] and not (out / "figures").exists()
    assert len(page.no_data) == 1 and "no data because none of the 6 answers" in page.no_data[0]


def test_run_names_are_escaped(tmp_path) -> None:
    name = "<img src=x onerror=alert(1)>"
    run = write_uoo_run(tmp_path / name, ROWS[:4], on_claims, model="<b>m</b>")
    out = tmp_path / "page"
    from breakthrough.analyses.uoo import uoo_report

    uoo_report([run], cohort="uoo-large", out=out)
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<b>m</b>" not in html and "&lt;b&gt;m&lt;/b&gt;" in html


def test_out_that_is_a_file_is_one_line(two_arms, tmp_path) -> None:
    afile = tmp_path / "page"
    afile.write_text("x")
    proc = run_bt("report", "uoo", two_arms[0], "--cohort", "uoo-large", "--out", afile)
    assert_one_line_error(proc, 2, "--out", str(afile))
    assert afile.read_text() == "x"
