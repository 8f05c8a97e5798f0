"""What `bt classify` writes: tables, summary, plans, figures and the HTML report.

Most checks run on a real classified run (the `classified` fixture of tests/report/conftest.py:
the tiny model continued through `bt continue`, then the installed `bt classify`). The figure
rules are checked on the matplotlib figures themselves."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from classify_fixture import SMALL, cell_spec, frames, small_spec, write_store

from breakthrough.analyses.classify_run import classify_runs
from breakthrough.classify.frames import classify_frames
from breakthrough.classify.regimes import FIGURE_CLASSES
from breakthrough.classify.settings import ClassifySettings
from breakthrough.report import figures as F
from breakthrough.report.cell_details import cell_details, cut_offset
from breakthrough.report.cell_figure import cell_svg
from breakthrough.report.classify_outputs import write_outputs
from breakthrough.report.names import field_name
from breakthrough.store import RunStore


def slug(cell_id: str) -> str:
    return "{}-{:08d}".format(
        re.sub(r"[^A-Za-z0-9_.-]+", "_", cell_id), zlib.crc32(cell_id.encode()) % 10**8
    )


class Tables(HTMLParser):
    """The tables of a page: [(class, [[cell text, ...], ...])], headers included."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.order: list[str] = []  # "h1:...", "h2:...", "table:class" in page order
        self._cell: list[str] | None = None
        self._heading: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append((a.get("class") or "", []))
            self.order.append(f"table:{a.get('class') or ''}")
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("h1", "h2"):
            self._heading = tag

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag in ("h1", "h2"):
            self._heading = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._heading:
            self.order.append(f"{self._heading}:{data.strip()}")

    def table(self, cls: str) -> list[list[str]]:
        return next(rows for c, rows in self.tables if cls in c.split())


def _cell(classified, pid: str) -> str:
    return (classified[1] / "cells" / f"{slug('tiny-llama:' + pid)}.html").read_text()


# ---------------------------------------------------------------------------------------------
# the cell page


def test_cell_page_shows_problem_answer_and_the_trace_cut_at_every_anchor(classified):
    page = _cell(classified, "pA")
    facts = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", page))
    assert facts["Problem"] == "What is 3+4?" and facts["Reference answer"] == "7"
    assert facts["Regime"] == "prefix-limited"
    trace = re.search(r'<pre class="trace">(.*?)</pre>', page, re.S).group(1)
    cuts = re.findall(r'<mark class="cut[^"]*" id="cut-(\d+)"', trace)
    assert sorted(map(int, cuts)) == [64, 96, 112, 128, 256]
    # the box sits between anchors 96 and 112: before the cut at 112, after the one at 96
    before = {
        int(a): trace[: m.start()]
        for a, m in (
            (int(m.group(1)), m)
            for m in re.finditer(r'<mark class="cut[^"]*" id="cut-(\d+)"', trace)
        )
    }
    assert "boxed{7}" not in before[96] and "boxed{7}" in before[112]
    assert re.search(r'id="cut-112"[^>]*>✂ t=112 · 4/4</mark>', trace)


def store_items(classified):
    with RunStore(classified[0]) as store:
        return store.items()


def test_cut_points_are_where_the_continuations_leave_the_base_text(classified, tiny_model):
    """The mark of anchor t sits exactly at the end of the decoded prefix (prefix_len tokens)
    as bt continue stores it; for runs without it, the estimate is later only by characters
    that every continuation of t repeats from the base trace."""
    from breakthrough.models.tokens import decode

    with RunStore(classified[0]) as store:
        samples = store.samples_frame()
        details = cell_details(samples.drop(columns=["token_ids"]), store.items())
    estimated = cell_details(samples.drop(columns=["token_ids", "extra"]), store_items(classified))
    exact = 0
    for cid, g in samples.groupby("cell_id"):
        base = g[g["kind"] == "base"].iloc[0]
        for anchor, p in g[g["kind"] == "probe"].groupby("anchor"):
            prefix = decode(tiny_model.tokenizer, base["token_ids"][: int(p["prefix_len"].iloc[0])])
            assert details[cid].cuts[anchor] == len(prefix), (cid, anchor)  # stored: exact
            cut = estimated[cid].cuts[anchor]  # older runs: estimated from the texts
            assert base["text"].startswith(prefix) and cut >= len(prefix), (cid, anchor)
            shared = base["text"][len(prefix) : cut]
            assert all(t[len(prefix) :].startswith(shared) for t in p["text"]), (cid, anchor)
            exact += cut == len(prefix)
    assert exact >= 1
    assert cut_offset("abcdef", []) == 0 and cut_offset("abcdef", ["abcX", "abQ"]) == 2


def test_cell_page_lists_every_branch_with_its_extracted_answer_and_verdict(classified):
    page = Tables(_cell(classified, "pA"))
    probes = page.table("probe")
    assert probes[0][:6] == ["anchor t", "B", "branch", "extracted answer", "verdict", "finish"]
    assert {r[5] for r in probes[1:]} == {"answer window used up"}
    assert {r[1] for r in probes[1:]} == {"8"}  # the probe arm's budget
    by_anchor: dict[str, list] = {}
    for row in probes[1:]:
        by_anchor.setdefault(row[0], []).append(row)
    assert sorted(by_anchor, key=int) == ["64", "96", "112", "128", "256"]
    assert all(r[3] == "7" and r[4] == "correct" for r in by_anchor["112"])
    # cut off by the answer window before any answer: one rendering (issue 30)
    assert all(r[3] == "— (cut off)" and r[4] == "no answer (cut off)" for r in by_anchor["64"])
    assert all(r[6].endswith("[cut off: answer window used up]") for r in by_anchor["64"])
    restarts = page.table("restart")
    assert restarts[0][0] == "budget C" and len(restarts) - 1 == 8  # 2 budgets x 4
    with RunStore(classified[0]) as store:
        n = len(store.samples_frame(arrays=False, cell_id="tiny-llama:pA").query("kind=='probe'"))
    assert len(probes) - 1 == n


def test_cell_page_labels_have_human_names(classified):
    page = Tables(_cell(classified, "pA"))
    labels = page.table("labels")[1:]
    raw = {r[2] for r in labels}
    assert {"t_f", "interval_lower", "R_8", "R_16", "t_v_d050"} <= raw
    for name, _value, _column in labels:
        # no raw field name (snake_case) left; T_F and T_V are the protocol's own symbols
        assert "_" not in name.replace("T_F", "").replace("T_V", ""), name
    named = {r[2]: r[0] for r in labels}
    assert named["R_16"] == "restart solve rate R(C) at C = 16 reasoning tokens"
    assert named["t_v_d025"] == "prefix-value time T_V at δ = 0.25"
    anchors = page.table("anchors")  # human headers
    assert "p(t; B)" in anchors[0] and "R̂(t + B)" in anchors[0] and "adv(t)" in anchors[0]


def test_cell_plot_is_large_with_a_full_legend(classified):
    page = _cell(classified, "pA")
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    root = ET.fromstring(svg)
    assert int(root.get("width")) >= 900 and int(root.get("height")) >= 400
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for needle in (
        "p(t; B = 8)",
        "R̂(t + B)",
        "R̂ conservative",
        "adv(t)",
        "τ = 0.75",
        "δ = 0.5",
        "T_F interval (96, 112]",
        "T_V(δ) = 112",
    ):
        assert needle in text, needle
    for cls in ("tf-band", "tau", "delta", "tv", "series-p", "series-r_hat", "series-adv"):
        assert root.find(f".//*[@class='{cls}']") is not None, cls
    censored = re.search(r"<svg.*?</svg>", _cell(classified, "pB"), re.S).group(0)
    assert "T_F: no event (censored at 256)" in censored and "T_V(δ): none" in censored


def test_cell_svg_y_range_follows_the_data():
    samples, cells = frames()
    res = classify_frames(samples, cells, settings=ClassifySettings(draws=2))
    for cid in ("g:p1", "m:p1", "m:p2"):
        row = res.labels.set_index("cell_id").loc[cid].to_dict() | {"cell_id": cid}
        curve = res.curves[res.curves["cell_id"] == cid]
        root = ET.fromstring(cell_svg(curve, row))
        ticks = [
            float(t.text)
            for t in root.iter("{http://www.w3.org/2000/svg}text")
            if t.get("text-anchor") == "end"
        ]
        assert max(ticks) == 1 and min(ticks) == min(0.0, np.floor(curve["adv"].min() * 4) / 4)
    ET.fromstring(cell_svg(curve.iloc[0:0], row))


# ---------------------------------------------------------------------------------------------
# the index


def test_one_report_per_call_with_the_cells_table_first(classified):
    out = classified[1]
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
    assert pages == [
        "cells/" + slug("tiny-llama:pA") + ".html",
        "cells/" + slug("tiny-llama:pB") + ".html",
        "index.html",
    ]
    page = Tables((out / "index.html").read_text())
    # the cells table first (issue 30), the glossary after it (issue 40: results first)
    assert page.order[:4] == ["h1:bt classify: fx", "h2:Cells", "table:cells", "h2:Glossary"]
    head, *rows = page.table("cells")
    # R(C) from the run's stored protocol (restarts 8 and 16), not the study's 1,024-8,192
    assert [h for h in head if h.startswith("R(")] == ["R(8)", "R(16)"]
    assert "R(1,024)" not in (out / "index.html").read_text()
    assert {r[0] for r in rows} == {"tiny-llama:pA", "tiny-llama:pB"}
    assert head[4] == "regime" and {r[4] for r in rows} == {
        "prefix-limited",
        "terminal (A1 replication)",
    }
    # the run index names the problem of each cell (issue 23)
    assert head[1] == "problem" and {r[1] for r in rows} == {"What is 3+4?"}
    html = (out / "index.html").read_text()
    assert f'href="cells/{slug("tiny-llama:pA")}.html"' in html
    assert 'href="../index.html"' in _cell(classified, "pA")


def test_write_outputs(tmp_path):
    samples, cells = frames()
    res = classify_frames(samples, cells, settings=ClassifySettings(draws=5))
    paths = write_outputs({"run1": res}, tmp_path / "out")
    out = tmp_path / "out"
    for name in (
        "labels.parquet",
        "labels.csv",
        "summary.json",
        "plan.json",
        "plan.csv",
        "probe_cells.csv",
        "restart_cells.csv",
        "curves.csv",
        "index.html",
    ):
        assert (out / name).is_file(), name
    assert not (out / "run1").exists()
    for fig in F.FIGURES:
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
    assert len(list((out / "cells").glob("*.html"))) == 5
    page = (out / "cells" / f"{slug('g:p1')}.html").read_text()
    assert "<svg" in page and "prefix-limited" in page
    table = pd.read_parquet(out / "labels.parquet")
    need = {
        "model",
        "stage",
        "problem_id",
        "level",
        "t_f",
        "event_observed",
        "interval_lower",
        "interval_upper",
        "instant",
        "regime",
        "regime_class",
        "R_1024",
        "R_2048",
        "R_4096",
        "R_8192",
        "max_advantage",
        "t_v_d025",
        "t_v_d050",
        "t_v_d075",
        "t_v_cons_d050",
        "conservative_agrees",
        "terminal_a1_anchor",
        "terminal_a1_advantage",
        "run",
    }
    assert need <= set(table.columns)
    assert set(table["regime_class"]) <= set(FIGURE_CLASSES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["regime_counts"]["m"]["terminal_A1"] == 1
    assert summary["plans"]["terminal,ambiguous"]["items"] == len(res.plans["terminal,ambiguous"])
    assert summary["protocol"]["budget"] == 1024 and summary["topup"] == "terminal,ambiguous"
    plan = json.loads((out / "plan.json").read_text())
    assert plan["topup"] == "terminal,ambiguous" and len(plan["items"]) == len(res.plan)
    assert set(plan["other_rules"]) == {"terminal,posterior"}
    html = (out / "index.html").read_text()
    assert "prefix-limited" in html and "cells/" in html
    assert paths["index"] == out / "index.html"


def test_several_runs_share_one_report(tmp_path):
    """Two runs (one at the study's budgets, one small): one index with a table per run, R(C)
    columns for every restart budget of either, cell pages per run."""
    write_store(
        tmp_path / "runs" / "big", {c: s for c, s in cell_spec().items() if c.startswith("g:")}
    )
    write_store(tmp_path / "runs" / "small", small_spec(), SMALL)
    classify_runs([tmp_path / "runs"], settings=ClassifySettings(draws=2))
    out = tmp_path / "runs" / "classify"
    assert sorted(p.name for p in out.glob("**/index.html")) == ["index.html"]
    page = Tables((out / "index.html").read_text())
    cells = [rows for c, rows in page.tables if c == "cells"]
    assert len(cells) == 2
    assert [h for h in cells[0][0] if h.startswith("R(")] == [
        "R(64)",
        "R(128)",
        "R(256)",
        "R(512)",
        "R(1,024)",
        "R(2,048)",
        "R(4,096)",
        "R(8,192)",
    ]
    assert (out / "cells" / "big" / f"{slug('g:p1')}.html").is_file()
    assert (out / "cells" / "small" / f"{slug('g:p1')}.html").is_file()


# ---------------------------------------------------------------------------------------------
# figures


@pytest.fixture(scope="module")
def labelled():
    """Labels and probe cells of the five known cells (two models, g and m)."""
    samples, cells = frames()
    return classify_frames(samples, cells, settings=ClassifySettings(draws=2))


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _integers(ticks) -> bool:
    return all(float(t) == int(t) for t in ticks)


def test_counts_have_integer_ticks(labelled):
    fig = F.regime_map(labelled.labels)
    bottom = fig.axes[1]
    _drawn(fig)
    assert _integers([t for t in bottom.get_xticks() if 0 <= t <= bottom.get_xlim()[1]])
    fig = F.topup_resolution(labelled.probe_cells, target=8)
    _drawn(fig)
    for ax in fig.axes:
        assert _integers(ax.get_yticks()) and _integers(ax.get_xticks())


def test_swimmer_range_follows_the_anchors(labelled, classified):
    fig = F.swimmer(labelled.labels)
    assert fig.axes[0].get_xlim() == (8.0, 16384.0)  # anchors 16 ... 8,192
    labels = pd.read_parquet(classified[1] / "labels.parquet")
    fig = F.swimmer(labels)
    assert fig.axes[0].get_xlim() == (32.0, 512.0)  # anchors 64 ... 256, not 2^14


def test_legends_do_not_cover_the_data(labelled):
    figs = [
        F.regime_map(labelled.labels),
        F.dose_response(labelled.labels, (1024, 2048, 4096, 8192)),
        F.matched_compute(labelled.labels, (1024, 2048, 4096, 8192)),
        F.swimmer(labelled.labels),
    ]
    for fig in figs:
        r = _drawn(fig)
        legends = [a.get_legend() for a in fig.axes if a.get_legend()] + list(fig.legends)
        assert legends
        for leg in legends:
            box = leg.get_window_extent(r)
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent(r)), fig.axes[0].get_title()


def test_one_model_order_and_colour_across_panels(labelled):
    models = F.model_order(labelled.labels)
    assert models == ["g", "m"]
    fig = F.regime_map(labelled.labels)
    _drawn(fig)
    top, bottom = fig.axes[:2]

    def top_to_bottom(ax):
        pairs = [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels()]
        return [
            name for _, name in sorted(pairs, key=lambda p: p[0], reverse=not ax.yaxis_inverted())
        ]

    assert top_to_bottom(top) == top_to_bottom(bottom) == models
    colors = F.model_colors(models)
    fig = F.dose_response(labelled.labels, (1024, 2048, 4096, 8192))
    right = fig.axes[1]
    names = [t.get_text().split(" ")[0] for t in right.get_legend().get_texts()]
    assert names == [m for m in models if m in names]
    for line in right.get_lines():
        model = line.get_label().split(" ")[0]
        assert line.get_color() == colors[model]
    only_m = F.dose_response(
        labelled.labels[labelled.labels["model"] == "m"], (1024, 2048, 4096, 8192), models=models
    )
    assert only_m.axes[1].get_lines()[0].get_color() == colors["m"]
    titles = [ax.get_title().split(":")[0] for ax in F.swimmer(labelled.labels).axes]
    assert titles == models


def test_restart_rates_are_drawn_at_their_value(labelled):
    """m:p1 has R(8,192) = 1 and R(1,024) = 0: its line ends at exactly 1 and starts at 0."""
    fig = F.dose_response(labelled.labels, (1024, 2048, 4096, 8192))
    ys = [tuple(line.get_ydata()) for line in fig.axes[0].get_lines() if len(line.get_ydata()) == 4]
    assert (0.0, 0.25, 0.75, 1.0) in ys
    assert all(0.0 <= y <= 1.0 for line in ys for y in line)


def test_dose_response_uses_the_run_budgets():
    samples, cells = frames(small_spec(), budget=64)
    res = classify_frames(samples, cells, protocol=SMALL, settings=ClassifySettings(draws=2))
    fig = F.dose_response(res.labels, SMALL.restart_budgets)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["64", "128", "256", "512"]


def test_every_figure_class_has_a_colour():
    assert list(F.CLASS_COLORS) == list(FIGURE_CLASSES)


def test_every_label_column_has_a_human_name(labelled):
    cols = [*labelled.labels.columns, *labelled.curves.columns, *labelled.restart_cells.columns]
    unnamed = [
        c
        for c in cols
        if field_name(c) == c
        and field_name(c, long=True) == c
        and c
        not in (
            "model",
            "stage",
            "level",
            "subject",
            "instant",
            "run",
            "n",
            "proxy",
            "rate",
            "kind",
            "budget",
            "position",
            "reason",
        )
    ]
    assert unnamed == []
