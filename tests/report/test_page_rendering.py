"""How the report pages show things (issue 30, item 6), checked on what the page writers
produce without a browser: math as MathML (offline, no script), the glossary in plain view,
tables in their own scrolling box, a "no data because …" line instead of an empty figure,
rows, lines and bars named by their problem, one rendering of a cut-off answer, and plurals.
tests/report/test_pages_browser.py checks the same pages in Chromium."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from markupsafe import escape

from breakthrough.report import figures as F
from breakthrough.report import html as H
from breakthrough.report.cell_details import CellDetail, is_cut_off, problem_line
from breakthrough.report.display import plural
from breakthrough.report.mathtext import answer_html, has_raw_latex, math_html
from breakthrough.report.names import GLOSSARY
from breakthrough.report.templating import render

PROBLEM = (
    r"If $f(x) = \frac{3x-2}{x-2}$, what is the value of $f(-2) + f(-1) + f(0)$? "
    r"Express your answer as a common fraction. Also compute \(\sqrt{2}^2\) and"
    r" \[\sum_{i=1}^{n} i.\]"
)


def test_problem_statements_show_math_as_mathml_never_raw_latex():
    page = math_html(PROBLEM)
    assert page.count("<math") == 4 and 'display="block"' in page
    assert "<mfrac>" in page and "<msqrt>" in page
    assert not has_raw_latex(page)
    assert "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/1998/Math/MathML"', ""
    )  # nothing fetched
    # money is not math; text around math is escaped
    assert math_html("It costs $5 and $10 <b>.") == "It costs $5 and $10 &lt;b&gt;."
    # an unclosed span (a cut problem, a cut-off answer) stays text, escaped, never lost
    assert math_html(r"so \(\boxed{(5,") == r"so \(\boxed{(5,"


def test_math_as_math_problems_write_it():
    """What MATH problems hold besides $…$: bare environments, spaced spans, Asymptote."""
    env = math_html(
        "Given that \\begin{align*} \\frac{1}{x}+y&=5,\\\\ x+y&=4 \\end{align*} compute"
    )
    assert env.count("<math") == 1 and 'display="block"' in env and not has_raw_latex(env)
    spaced = math_html(r"Simplify $ \sqrt{x \sqrt{x}}. $ Express it.")
    assert spaced.count("<math") == 1 and not has_raw_latex(spaced)
    asy = math_html(
        r"The graph of $y=f(x)$ is shown. [asy] draw((0,0)--(1,1)); [/asy] "
        r"Find $f(1)$."
    )
    assert asy.count("<math") == 2 and '<details class="asy">' in asy
    assert "draw((0,0)--(1,1));" in asy and not has_raw_latex(asy)  # folded, not lost


def test_answers_bare_latex_is_converted_and_a_fragment_is_not():
    assert answer_html(r"\frac{14}{3}").startswith("<math") and "<mfrac>" in answer_html(
        r"\frac{14}{3}"
    )
    assert answer_html("7") == "7"
    assert answer_html(r"\boxed{(5,") == r"\boxed{(5,"  # a fragment: shown as text


def test_the_run_index_line_never_cuts_a_formula_in_half():
    long = "x " * 40 + r"and $\frac{1}{2}+\frac{3}{4}+\frac{5}{6}$ then more words"
    line = problem_line(long)
    assert line.endswith("…") and "$" not in line and len(line) <= 90
    line = problem_line(r"Let \(f(x) = x^2\) be a function. " * 4)
    assert line.count(r"\(") == line.count(r"\)")
    assert not has_raw_latex(math_html(line))


def cell_page(tmp_path, detail: CellDetail, curve: pd.DataFrame | None = None) -> str:
    """The text of a cell page written for `detail` (and its anchors' `curve`)."""
    row = {"cell_id": "m:p1", "regime": "prefix_limited"}
    curve = pd.DataFrame() if curve is None else curve
    return H.write_cell_page(
        tmp_path / "c.html", row=row, curve=curve, svg="<svg/>", detail=detail
    ).read_text()


def test_a_cut_off_answer_has_one_rendering(tmp_path):
    assert is_cut_off(r"\(\boxed{(5,", "length") and is_cut_off(None, "answer_reserve")
    assert not is_cut_off("7", "length") and not is_cut_off(None, "eos")
    branches = pd.DataFrame(
        [
            {
                "kind": "probe",
                "anchor": 64,
                "budget": 8,
                "branch": b,
                "extracted": ex,
                "verdict": v,
                "correct": False,
                "finish_reason": "length",
                "continuation": "so the pair is \\(\\boxed{(5,",
            }
            for b, (ex, v) in enumerate(
                [(r"\(\boxed{(5,", "malformed answer"), (None, "no answer")]
            )
        ]
    )
    page = cell_page(tmp_path, CellDetail(branches=branches)).split("<h2>Branches</h2>")[1]
    assert page.count("— (cut off)") == 2 and page.count("no answer (cut off)") == 2
    assert r"\boxed{(5," not in page.split('<td class="text">')[0]  # not as an answer
    assert page.count("[cut off: token limit]") == 2


def test_cell_page_problem_and_answer_as_math(tmp_path):
    detail = CellDetail(problem=PROBLEM, answer=r"\frac{14}{3}")
    row = {"cell_id": "m:p1", "regime": "prefix_limited", "t_f": 128, "t_v": 128}
    path = H.write_cell_page(
        tmp_path / "c.html", row=row, curve=pd.DataFrame(), svg="<svg/>", detail=detail
    )
    text = path.read_text()
    facts = text.split('<dl class="facts">')[1].split("</dl>")[0]
    assert facts.count("<math") == 5 and not has_raw_latex(facts)
    assert '<section class="glossary"' in text and "<script" not in text


def test_every_page_has_the_glossary_in_plain_view(tmp_path):
    terms = [t for t, _ in GLOSSARY]
    for need in ("τ", "T_F", "adv", "R(C), R̂", "δ", "T_V", "regimes"):
        assert need in terms
    words = dict(GLOSSARY)
    assert "prefix-limited" in words["regimes"] and "budget-limited" in words["regimes"]
    page = cell_page(tmp_path, CellDetail(problem="What is 3+4?"))
    glossary = page.split('<section class="glossary"')[1].split("</section>")[0]
    assert all(f"<dt>{escape(t)}</dt>" in glossary for t in terms)
    assert "title=" not in glossary  # words on the page, not in a tooltip


def test_tables_sit_in_a_scrolling_box(tmp_path):
    labels = pd.DataFrame(
        {"cell_id": ["m:p1"], "problem_text": [r"What is $\frac12$?"], "regime": ["x"]}
    )
    page = H.write_report(
        tmp_path / "index.html",
        title="t",
        labels=labels,
        restart_budgets=(8,),
        figures={},
        summary={},
    ).read_text()
    assert '<div class="scroll"><table class="cells">' in page
    assert "div.scroll{overflow:auto;max-width:100%" in render("style.css.j2")
    problem = page.split('<td class="l problem">')[1].split("</td>")[0]
    assert problem.startswith("What is <math") and "<mfrac>" in problem


def _labels(rows):
    base = {
        "model": "m",
        "stage": "s",
        "level": 2,
        "instant": False,
        "event_observed": True,
        "interval_lower": 64.0,
        "interval_upper": 128.0,
        "censoring_time": np.nan,
        "final_anchor": 256,
        "final_rate": 1.0,
        "regime": "prefix_limited",
        "terminal_a1_anchor": np.nan,
        "R_8": 0.0,
        "R_16": 0.5,
    }
    return pd.DataFrame([{**base, **r} for r in rows])


def test_swimmer_rows_are_named_by_problem_and_empty_rows_are_not_drawn():
    labels = _labels(
        [
            {"cell_id": "m:pA", "problem_id": "pA"},
            {
                "cell_id": "m:pB",
                "problem_id": "pB",
                "event_observed": False,
                "interval_upper": np.nan,
                "censoring_time": 256.0,
            },
            {
                "cell_id": "m:pC",
                "problem_id": "pC",
                "event_observed": False,
                "interval_upper": np.nan,
                "censoring_time": np.nan,
            },
        ]
    )  # nothing to draw
    fig = F.swimmer(labels, first_anchor=64)
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == ["pA L2", "pB L2"]
    assert ax.get_ylim() == (-0.6, 1.6)  # two rows, no empty row above or below
    # censored at the first anchor: a dot where the arrow would have no length
    first = labels.assign(censoring_time=[np.nan, 64.0, np.nan])
    ax = F.swimmer(first, first_anchor=64).axes[0]
    assert any(
        list(line.get_xdata()) == [64.0] and line.get_marker() == "o" for line in ax.get_lines()
    )


def test_regime_map_names_its_panels_and_problems():
    labels = _labels(
        [
            {"cell_id": "m:pA", "problem_id": "pA"},
            {"cell_id": "m:pB", "problem_id": "pB", "regime": "unsolved_hard"},
        ]
    )
    top, bottom = F.regime_map(labels).axes[:2]
    assert top.get_title().startswith("Class per problem and model (2 problems")
    assert bottom.get_title() == "Cells per class and model"  # not a second, unnamed bar
    assert [t.get_text() for t in top.get_xticklabels()] == ["pA", "pB"]


def test_dose_response_names_its_lines_and_says_what_n_counts():
    labels = _labels(
        [
            {"cell_id": "m:pA", "problem_id": "pA"},
            {"cell_id": "m:pB", "problem_id": "pB", "R_16": 1.0},
            {"cell_id": "m:pC", "problem_id": "pC", "instant": True},
        ]
    )
    fig = F.dose_response(labels, (8, 16))
    left, right = fig.axes[:2]
    assert sorted(t.get_text() for t in left.texts if t.get_text().startswith("p")) == ["pA", "pB"]
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "m (n = 2 non-instant cells measured at every budget)"
    ]
    cells = F.dose_cells(labels, (8, 16))
    assert len(cells["m"][1]) == 2 and cells["m"][2] == {"instant": 1, "missing a budget": 0}


def test_topup_bars_and_a2_rows_name_their_problems():
    probe = pd.DataFrame(
        [
            {"cell_id": "m:pA", "model": "m", "anchor": 256, "n": 8, "k": 8},
            {"cell_id": "m:pB", "model": "m", "anchor": 128, "n": 8, "k": 1},
        ]
    )
    ax = F.topup_resolution(probe, target=8).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["pA t=256", "pB t=128"]
    a2 = pd.DataFrame(
        [
            {
                "cell_id": "m:pA",
                "model": "m",
                "problem_id": "pA",
                "level": 3,
                "budget_1": 8,
                "budget_2": 32,
                "first_crossing_1": 112,
                "first_crossing_2": 112,
                "last_anchor_2": 128,
            }
        ]
    )
    ax = F.budget_falsification(a2).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["pA (L3)"]


def test_a_figure_without_data_is_one_line_not_an_empty_frame(tmp_path):
    labels = _labels([{"cell_id": "m:pA", "problem_id": "pA"}])
    probe = pd.DataFrame([{"cell_id": "m:pA", "model": "m", "anchor": 128, "n": 4, "k": 4}])
    figs = F.all_figures(labels, probe, tmp_path, budgets=(8, 16), target=8)
    gaps = F.figure_gaps(labels, probe, budgets=(8, 16), target=8)
    assert set(figs) == {"regime_map", "dose_response", "swimmer"}
    assert set(gaps) == {
        "matched_compute",
        "topup_resolution",
        "label_hardening",
        "budget_falsification",
    }
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{n}.png" for n in figs)
    page = H.write_report(
        tmp_path / "index.html",
        title="t",
        labels=labels,
        restart_budgets=(8, 16),
        figures=figs,
        summary={},
        figure_gaps=gaps,
    ).read_text()
    assert "matched compute: no data because no cell has an A1 terminal event." in page
    assert page.count('<p class="no-data">') == 4 and page.count("<img") == 3
    empty = F.figure_gaps(labels.iloc[:0], probe.iloc[:0], budgets=(8, 16))
    assert set(empty) == {*F.FIGURES, *F.ARM_FIGURES}


def test_counts_take_the_right_plural(tmp_path):
    assert plural(1, "cell") == "1 cell" and plural(2, "cell") == "2 cells"
    assert plural(1, "trajectory", "trajectories") == "1 trajectory"
    block = H.write_report(
        tmp_path / "index.html",
        title="t",
        labels=pd.DataFrame(),
        restart_budgets=(8,),
        figures={},
        summary={
            "a2": {
                "32": {
                    "trajectories": 1,
                    "earlier_by_2b": 0,
                    "no_crossing_at_b2": 0,
                    "median_shift_steps": 0,
                    "verdict": "v",
                    "rule": "r",
                }
            }
        },
    ).read_text()
    assert "1 trajectory re-probed" in block and not re.search(r"\b1 trajectories", block)
