"""The report as a reader sees it: a real headless Chromium (Debian's `chromium` package, driven
by playwright's Python client without any browser download) loads the pages of a real
classified run from a loopback HTTP server this test starts, and checks that each page renders
with no console error and no failed request, that every figure and the per-cell plot are
visible with content, and that the plot's legend is not cut off; and what issue 30 asks of every
page: the glossary in plain view, no table wider than its box (tables scroll inside it, the
page never scrolls sideways at 1,400 px), no empty figure (a "no data because …" line
instead), and math drawn as MathML with no raw LaTeX; and what issue 40 asks of the layout: a
cells table wider than a 1,400 × 900 window scrolls in its own box with a visible sign (a
shaded edge, a hint, the cell column kept), and on a 390 × 844 phone the first screen shows
the headline results (the glossary after them) and every figure is nearly the screen's width.
Screenshots go to the test's tmp_path (never into the repository), and also to
$BT_SCREENSHOTS when set. Skipped when chromium or
playwright is missing (.ci/run installs both when it can)."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (test extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install -y chromium)"
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def slug(cell_id: str) -> str:
    return "{}-{:08d}".format(
        re.sub(r"[^A-Za-z0-9_.-]+", "_", cell_id), zlib.crc32(cell_id.encode()) % 10**8
    )


@pytest.fixture(scope="module")
def server(classified):
    """http://127.0.0.1:PORT serving the report of the real classified run (conftest.py);
    stopped by its PID."""
    yield from _serve(classified[1])


@pytest.fixture(scope="module")
def study_server(studied):
    """http://127.0.0.1:PORT serving the `bt report study` folder of the real run."""
    yield from _serve(studied[1])


def _serve(report):
    """A loopback http.server over `report` (yields its URL; stopped by its PID)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "http.server",
            "0",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(report),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"port (\d+)", line)
            port = int(m.group(1)) if m else None
            if not line and proc.poll() is not None:
                break
        assert port, "http.server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def unfit_server(unfit_study):
    """http://127.0.0.1:PORT serving the study page whose confirmatory test was not fit."""
    yield from _serve(unfit_study[1])


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium with a fresh profile (under the test's temporary folder)."""
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            yield ctx
        finally:
            ctx.close()


def _open(ctx, url: str, size: tuple[int, int] | None = None):
    """The page at url (in a window of `size`, else the context's), with every console
    error, page error, failed request and HTTP error it produced."""
    page = ctx.new_page()
    if size is not None:
        page.set_viewport_size({"width": size[0], "height": size[1]})
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
    page.on(
        "response",
        lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, url
    return page, problems


def _has_content(png: bytes) -> bool:
    """A screenshot that is not blank: more than 1% of its pixels are not near-white."""
    from PIL import Image

    gray = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    return bool((gray < 200).mean() > 0.01)


def _shot(page, path) -> None:
    """A full-page screenshot at path, copied to $BT_SCREENSHOTS when that is set."""
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("BT_SCREENSHOTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copyfile(path, os.path.join(keep, os.path.basename(path)))


def _glossary_visible(page) -> None:
    """The glossary is on the page in plain view, every term with its words."""
    box = page.locator("section.glossary")
    assert box.count() == 1 and box.is_visible()
    text = box.inner_text()
    for term in ("τ", "T_F", "adv", "R̂", "δ", "T_V", "regimes", "prefix-limited"):
        assert term in text, term
    assert box.bounding_box()["height"] > 100


def _tables_fit(page) -> None:
    """No table widens the page: each sits in a box that scrolls sideways, inside the window."""
    rows = page.evaluate("""() => {
        const vw = document.documentElement.clientWidth;
        return {page: document.documentElement.scrollWidth, vw,
                tables: Array.from(document.querySelectorAll('table')).map(t => {
                    const box = t.parentElement, b = box.getBoundingClientRect();
                    return {cls: t.className, box: box.className,
                            overflow: getComputedStyle(box).overflowX, right: b.right,
                            wide: t.scrollWidth > box.clientWidth};
                })};
    }""")
    assert rows["page"] <= rows["vw"], rows["page"]
    for t in rows["tables"]:
        assert t["box"] == "scroll" and t["overflow"] == "auto", t
        assert t["right"] <= rows["vw"], t


def _no_empty_figure(page) -> None:
    """Every figure shown has content; a figure without data is one visible line instead."""
    n = page.locator("img").count()
    for i in range(n):
        assert _has_content(page.locator("img").nth(i).screenshot())
    lines = page.locator("p.no-data")
    for i in range(lines.count()):
        assert lines.nth(i).is_visible() and "no data because" in lines.nth(i).inner_text()


def test_report_page_renders_with_visible_figures(browser, server, tmp_path):
    page, problems = _open(browser, f"{server}/index.html")
    assert page.title() == "bt classify: fx"
    first = page.locator("table").first
    assert "cells" in first.get_attribute("class") and first.is_visible()
    images = page.evaluate("""() => Array.from(document.images).map(i => ({
        src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
        w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height}))""")
    assert len(images) == 6  # the five of protocol 10 and label hardening
    for img in images:
        assert img["ok"] and img["w"] > 200 and img["h"] > 100, img
    _no_empty_figure(page)
    assert "budget falsification: no data because" in page.locator("p.no-data").inner_text()
    _glossary_visible(page)
    _tables_fit(page)
    assert page.locator("table.cells").first.bounding_box()["width"] > 0
    _shot(page, tmp_path / "classify.png")
    page.locator(f"a[href='cells/{slug('tiny-llama:pA')}.html']").click()
    page.wait_for_load_state("load")
    assert page.title() == "cell tiny-llama:pA"
    assert problems == []


@pytest.mark.parametrize("pid", ["pA", "pB"])
def test_cell_page_renders_its_plot_trace_and_branches(browser, server, tmp_path, pid):
    page, problems = _open(browser, f"{server}/cells/{slug('tiny-llama:' + pid)}.html")
    assert page.title() == f"cell tiny-llama:{pid}"
    plot = page.locator("svg.cell-plot")
    box = plot.bounding_box()
    assert box and box["width"] >= 900 and box["height"] >= 400, box
    assert page.locator("svg.cell-plot polyline").count() >= 3
    png = plot.screenshot(path=str(tmp_path / f"plot-{pid}.png"))
    assert _has_content(png)
    # every text of the plot (legend included) lies inside the drawing
    outside = page.evaluate("""() => {
        const svg = document.querySelector('svg.cell-plot').getBoundingClientRect();
        return Array.from(document.querySelectorAll('svg.cell-plot text')).filter(t => {
            const b = t.getBoundingClientRect();
            return b.left < svg.left || b.top < svg.top || b.right > svg.right + 0.5
                || b.bottom > svg.bottom + 0.5;
        }).map(t => t.textContent);
    }""")
    assert outside == []
    marks = page.locator("pre.trace mark.cut")
    assert marks.count() == (5 if pid == "pA" else 3)
    assert all(marks.nth(i).is_visible() for i in range(marks.count()))
    assert page.locator("table.branches.probe tr").count() > 1
    assert page.locator("dl.facts").inner_text().count("What is 3+4?") == 1
    _glossary_visible(page)
    _tables_fit(page)
    _shot(page, tmp_path / f"cell-{pid}.png")
    assert problems == []


def test_study_page_renders_every_image_without_errors(browser, study_server, tmp_path):
    page, problems = _open(browser, f"{study_server}/index.html")
    assert page.title().startswith("Study report: 1 run")
    images = page.evaluate("""() => Array.from(document.images).map(i => ({
        src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
        w: i.getBoundingClientRect().width}))""")
    assert len(images) >= 6 and any(i["src"].endswith("budget_falsification.png") for i in images)
    for img in images:
        assert img["ok"] and img["w"] > 200, img
    assert page.locator("p.sentence").count() >= 8
    assert page.locator("table.missing tr").count() >= 2
    _glossary_visible(page)
    _tables_fit(page)
    _no_empty_figure(page)
    assert "(2 cells)" in page.locator("p.note").first.inner_text()
    _shot(page, tmp_path / "study.png")
    page.locator("a[href='classify/index.html']").first.click()
    page.wait_for_load_state("load")
    assert page.title() == "bt classify: fx"
    assert problems == []


def _cell_page(tmp_path, **detail: str):
    """A folder holding one cell page (`cell.html`, no curve) of a problem text and answer."""
    import pandas as pd

    from breakthrough.report.cell_details import CellDetail
    from breakthrough.report.html import write_cell_page

    folder = tmp_path / "site"
    write_cell_page(
        folder / "cell.html",
        row={"cell_id": "m:p1", "regime": "prefix_limited"},
        curve=pd.DataFrame(),
        svg="<svg class='cell-plot'></svg>",
        detail=CellDetail(**detail),
    )
    return folder


def test_math_is_drawn_as_mathml_without_raw_latex(browser, tmp_path):
    """A cell page whose problem and answer are LaTeX (as MATH problems are): Chromium draws
    every formula (MathML, no script, no network) and no LaTeX command is left in view."""
    problem = (
        r"If $f(x) = \frac{3x-2}{x-2}$, what is $f(-2) + f(0)$? Give "
        r"\(\sqrt{2}^2\) and \[\sum_{i=1}^{n} i.\]"
    )
    folder = _cell_page(tmp_path, problem=problem, answer=r"\frac{14}{3}")
    server = _serve(folder)
    url = next(server)
    try:
        page, problems = _open(browser, f"{url}/cell.html")
        facts = page.locator("dl.facts")
        boxes = page.evaluate("""() => Array.from(document.querySelectorAll('dl.facts math'))
            .map(m => m.getBoundingClientRect()).map(b => [b.width, b.height])""")
        assert len(boxes) == 5 and all(w > 5 and h > 5 for w, h in boxes), boxes
        assert not re.search(r"\\[A-Za-z]+", facts.inner_text())
        assert "what is" in facts.inner_text()
        _glossary_visible(page)
        _shot(page, tmp_path / "math-cell.png")
        assert problems == []
    finally:
        server.close()  # stops the http.server (its finally)


def test_a_wide_cells_table_scrolls_in_its_box_with_a_visible_sign(browser, server, tmp_path):
    page, problems = _open(browser, f"{server}/index.html", (1400, 900))
    info = page.evaluate("""() => {
        const t = document.querySelector('table.cells'), box = t.parentElement;
        const cs = getComputedStyle(box);
        return {page: document.documentElement.scrollWidth,
                vw: document.documentElement.clientWidth, table: t.scrollWidth,
                box: box.clientWidth, scrolls: box.scrollWidth > box.clientWidth,
                overflow: cs.overflowX, shade: cs.backgroundImage,
                sticky: getComputedStyle(t.querySelector('td')).position,
                top: box.getBoundingClientRect().top};
    }""")
    assert info["page"] <= info["vw"], info  # the page itself never scrolls sideways
    assert info["table"] > info["box"] and info["scrolls"], info  # this run's table is wide
    assert info["overflow"] == "auto" and info["shade"].count("radial-gradient") == 2, info
    assert info["sticky"] == "sticky" and info["top"] < 900, info  # in the first screen
    hint = page.locator("p.scroll-hint").first
    assert hint.is_visible() and "scroll the table sideways" in hint.inner_text()
    assert hint.inner_text().startswith(f"{page.locator('table.cells th').count()} columns")
    _shot(page, tmp_path / "classify-1400x900.png")
    # no column is out of reach: scrolled to its end, the last column lies inside the box and
    # the cell column is still in view beside it
    page.evaluate("""() => { const b = document.querySelector('table.cells').parentElement;
        b.scrollLeft = b.scrollWidth; }""")
    box = page.locator("div.scroll:has(table.cells)").first.bounding_box()
    last = page.locator("table.cells th").last.bounding_box()
    first = page.locator("table.cells td").first.bounding_box()
    assert box["x"] <= last["x"] and last["x"] + last["width"] <= box["x"] + box["width"] + 1
    assert box["x"] - 1 <= first["x"] <= box["x"] + 1
    _shot(page, tmp_path / "classify-1400x900-scrolled.png")
    assert problems == []


@pytest.mark.parametrize("which", ["study", "classify"])
def test_on_a_phone_the_results_come_first_and_figures_fill_the_width(
    browser, study_server, server, tmp_path, which
):
    width, height = 390, 844
    url = f"{study_server}/index.html" if which == "study" else f"{server}/index.html"
    page, problems = _open(browser, url, (width, height))
    lead = "ul.headlines li" if which == "study" else "table.cells td"
    first = page.locator(lead).first.bounding_box()
    assert first["y"] + first["height"] <= height, first  # the headline result, on screen
    glossary = page.locator("section.glossary").bounding_box()
    assert glossary["y"] >= first["y"] + first["height"]  # after the results, still in view
    widths = page.evaluate("""() => Array.from(document.images).map(i => ({
        ok: i.complete && i.naturalWidth > 0, w: i.getBoundingClientRect().width}))""")
    assert widths and all(i["ok"] and i["w"] >= 0.9 * width for i in widths), widths
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(tmp_path / f"{which}-390.png"))  # the first screen
    _shot(page, tmp_path / f"{which}-390-full.png")
    assert problems == []


def test_the_unfit_study_page_says_so_and_draws_no_empty_figure(browser, unfit_server, tmp_path):
    page, problems = _open(browser, f"{unfit_server}/index.html", (1400, 900))
    section = page.locator("section#confirmatory")
    assert (
        section.locator("p.sentence")
        .first.inner_text()
        .startswith("The confirmatory early-signal test at forecast token 512 could not be fit:")
    )
    assert section.locator("img").count() == 0
    assert section.locator("p.no-data").count() == 2
    _no_empty_figure(page)
    _tables_fit(page)
    assert "could not be fit" in page.locator("ul.headlines").inner_text()
    section.screenshot(path=str(tmp_path / "study-unfit-confirmatory.png"))
    _shot(page, tmp_path / "study-unfit.png")
    assert problems == []


def test_hostile_text_on_a_cell_page_runs_nothing(browser, tmp_path):
    """A problem, answer and model name holding script tags, an onerror image and MathML that
    latex2mathml would pass through (\\text{<script>…}, \\href{javascript:…}): Chromium
    shows them as text and no script runs (no dialog, no global set)."""
    import pandas as pd

    from breakthrough.report.cell_details import CellDetail
    from breakthrough.report.html import write_cell_page

    hostile = "<script>window.pwned=1;alert(1)</script> & <img src=x onerror=alert(2)>"
    folder = tmp_path / "site"
    write_cell_page(
        folder / "cell.html",
        row={"cell_id": f"m:{hostile}", "model": hostile, "regime": "prefix_limited"},
        curve=pd.DataFrame(),
        svg="<svg class='cell-plot'></svg>",
        detail=CellDetail(
            problem=hostile + r" $\text{<script>window.pwned=2</script>}$"
            r" $\href{javascript:alert(3)}{x}$",
            answer=hostile,
            base_text=hostile,
        ),
    )
    server = _serve(folder)
    url = next(server)
    try:
        page, problems = _open(browser, f"{url}/cell.html")
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.reload(wait_until="load")
        assert page.evaluate("window.pwned") is None and dialogs == []
        assert page.locator("script").count() == 0
        facts = page.locator("dl.facts").inner_text()
        assert "<script>window.pwned=1;alert(1)</script> & <img" in facts
        assert "<script>window.pwned=2</script>" in facts  # drawn as math text, not run
        assert page.title() == f"cell m:{hostile}"
        assert problems == []
    finally:
        server.close()


def test_an_end_tag_typed_in_math_stays_inside_the_drawn_math(browser, tmp_path):
    """Issue 52: `\\emph{</mtext></mrow></math>…}` in a problem closed the math early in the
    page (what followed was drawn outside it). In Chromium the typed tags are the text of the
    one math element, which ends where the formula ends, and no element is made of them."""
    typed = "</mtext></mrow></math><dfn>bt52</dfn>"
    folder = _cell_page(tmp_path, problem=rf"Before $\emph{{{typed}}} x^2$ after.")
    server = _serve(folder)
    url = next(server)
    try:
        page, problems = _open(browser, f"{url}/cell.html")
        maths = page.evaluate("""() => Array.from(document.querySelectorAll('dl.facts math'))
            .map(m => [m.previousSibling.textContent, m.textContent, m.nextSibling.textContent])""")
        assert maths == [["Before ", typed + "x2", " after."]], maths
        assert page.locator("dfn").count() == 0
        assert problems == []
    finally:
        server.close()


@pytest.fixture(scope="module")
def uoo_server(tmp_path_factory):
    """http://127.0.0.1:PORT serving the page `bt report uoo --out` writes over two runs of
    uoo-large answers (thinking on: exact up to 50 optima, a quarter above; off: half the
    count from n = 40 on), written as text and regraded by the real grader
    (tests/uoo_fake_runs.py)."""
    from uoo_fake_runs import cohort_rows, write_uoo_run

    from breakthrough.analyses.uoo import uoo_report

    root = tmp_path_factory.mktemp("uoo-browser")
    rows = cohort_rows("uoo-large")
    on = write_uoo_run(
        root / "on", rows, lambda r: r["n_optima"] if r["n_optima"] <= 50 else r["n_optima"] // 4
    )
    off = write_uoo_run(
        root / "off",
        rows,
        lambda r: max(1, r["n_optima"] // 2) if r["size"] >= 40 else r["n_optima"],
        thinking="off",
    )
    uoo_report([on, off], cohort="uoo-large", out=root / "page")  # bt report uoo --out
    yield from _serve(root / "page")


def test_uoo_page_shows_its_tables_and_figure(browser, uoo_server, tmp_path):
    page, problems = _open(browser, f"{uoo_server}/index.html", (1400, 900))
    assert page.title() == "UoO report: 2 runs"
    assert page.locator("table").first.get_attribute("class") == "uoo leaderboard"
    images = page.evaluate("""() => Array.from(document.images).map(i => ({
        src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
        w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height}))""")
    assert [i["src"] for i in images] == ["figures/claimed_vs_true.png"]
    assert images[0]["ok"] and images[0]["w"] > 400 and images[0]["h"] > 300, images
    _no_empty_figure(page)
    from uoo_fake_runs import cohort_rows

    cells = {(r["kind"], r["size"]) for r in cohort_rows("uoo-large")}
    by_size = page.locator("table.by-size")
    assert by_size.is_visible() and by_size.locator("tr").count() == 1 + 2 * len(cells)
    assert "n = 60" not in by_size.inner_text()  # a table, not the figure's legend
    thinking = page.locator("section#thinking")
    assert thinking.is_visible() and "McNemar" in thinking.locator("h2").inner_text()
    glossary = page.locator("section.glossary")
    assert glossary.is_visible()
    for term in ("optimum", "undercount share", "within 2x", "b/c"):
        assert term in glossary.inner_text(), term
    _tables_fit(page)
    _shot(page, tmp_path / "uoo.png")
    assert problems == []


def test_uoo_page_on_a_phone_leads_with_the_leaderboard(browser, uoo_server, tmp_path):
    width, height = 390, 844
    page, problems = _open(browser, f"{uoo_server}/index.html", (width, height))
    first = page.locator("table.leaderboard td").first.bounding_box()
    assert first["y"] + first["height"] <= height, first
    glossary = page.locator("section.glossary").bounding_box()
    assert glossary["y"] >= first["y"] + first["height"]
    widths = page.evaluate("""() => Array.from(document.images).map(i => ({
        ok: i.complete && i.naturalWidth > 0, w: i.getBoundingClientRect().width}))""")
    assert widths and all(i["ok"] and i["w"] >= 0.9 * width for i in widths), widths
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    _shot(page, tmp_path / "uoo-390.png")
    assert problems == []
