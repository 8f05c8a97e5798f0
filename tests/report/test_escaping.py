"""Every report page escapes what it shows (issue 39 item 6): a problem text, reference answer,
model name, cell id, run name, branch text, figure name or hint holding `<script>`, an `onerror`
attribute or `&` comes out as that text, never as markup. Each page is written by its real
writer (Jinja2 templates with autoescape) and parsed: no script element, no event-handler
attribute, no `javascript:` link, and the hostile strings are on the page escaped. Math is no
way round it: LaTeX whose `\\text{…}` holds a tag or whose `\\href` is a script link is shown
as text, not passed through by the MathML converter."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from markupsafe import escape

from breakthrough.protocol import DEFAULT
from breakthrough.report import headlines as HL
from breakthrough.report import html as H
from breakthrough.report.cell_details import CellDetail
from breakthrough.report.cell_figure import cell_svg
from breakthrough.report.mathtext import answer_html, latex_to_mathml, math_html
from breakthrough.report.study import Missing, write_page

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
HOSTILE = f"{SCRIPT} & {IMG}"
MATH = r"Find $\text{<script>alert(3)</script>}$ and $\href{javascript:alert(4)}{x}$ & $x<y$."


class Markup(HTMLParser):
    """The elements and attributes of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]


def assert_escaped(text: str, *shown: str) -> None:
    """No markup came from the data, and each of `shown` is on the page as escaped text."""
    page = Markup(text)
    assert "script" not in page.tags
    assert not [k for k, _ in page.attrs if k.startswith("on")]
    assert not [v for k, v in page.attrs if v.strip().lower().startswith("javascript:")]
    assert page.tags.count("img") == text.count('<img src="')  # only the report's figures
    for s in shown:
        assert str(escape(s)) in text, s


def test_math_converter_output_is_sanitized():
    out = math_html(MATH)
    assert out.count("<math") == 3
    assert_escaped(out, "<script>alert(3)</script>")
    assert "href" not in out and "&lt;" in out  # x<y: the operator as an entity, escaped
    assert_escaped(answer_html(r"\text{<script>alert(5)</script>}"), "<script>alert(5)</script>")
    assert_escaped(answer_html(HOSTILE), HOSTILE)


def test_a_stray_math_end_tag_in_text_stays_inside_the_math():
    """Issue 52: the converter copies `\\text{…}` verbatim, and the sanitiser let its
    `</math>` through: the math closed early (the script stayed escaped, outside it)."""
    out = math_html(r"$\text{</math><script>alert(6)</script>}$ after")
    assert_escaped(out, "</math><script>alert(6)</script>")
    assert out.count("<math") == out.count("</math>") == 1 and out.endswith("</math> after")
    inner = answer_html(r"\text{</mtext></mrow></math>x}")
    assert inner.count("</math>") == 1 and inner.endswith("</mtext></mrow></math>")


# End tags that close what the converter has open around a copied argument: the text element,
# then a box or style element where the command makes one, then the row and the math.
CLOSERS = (
    "</mtext></mrow></math>",
    "</mtext></menclose></mrow></math>",
    "</mtext></mstyle></mrow></math>",
    "</mtext></mrow></menclose></mrow></math>",
)


class _Nesting(HTMLParser):
    """The page's elements as a stack: every end tag must close the element open last."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.open: list[str] = []
        self.maths_closed = 0
        self.text = text
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (tag, self.open, self.text)
        self.open.pop()
        self.maths_closed += tag == "math"


@pytest.mark.parametrize("closer", CLOSERS)
@pytest.mark.parametrize(
    "command", [r"\text", r"\emph", r"\textup", r"\fbox", r"\tag", r"\mbox", r"\boxed{\text"]
)
def test_no_end_tag_typed_in_math_closes_the_math(command, closer) -> None:
    """Issue 52: the sanitiser read the converter's string, where the text of any argument it
    copies verbatim (`\\emph`, `\\textup`, `\\fbox`, `\\tag`, not only `\\text`) is raw markup
    again, so `</mtext></mrow></math>` typed there closed the math early and left the rest of
    the formula outside it. Now the one `</math>` is the last thing of the MathML and every
    typed tag is text inside it."""
    typed = closer + "<dfn>bt52</dfn>"  # no space: the converter makes spaces no-break ones
    latex = command + "{" + typed + "}" + ("}" if command.endswith(r"{\text") else "")
    mathml = latex_to_mathml(latex)
    assert mathml is not None
    assert mathml.count("</math>") == 1 and mathml.endswith("</math>"), mathml
    assert str(escape(typed)) in mathml and "<dfn" not in mathml
    nesting = _Nesting(mathml)
    assert nesting.open == [] and nesting.maths_closed == 1
    page = math_html(f"before ${latex}$ after")
    assert page.startswith("before <math") and page.endswith("</math> after"), page


def _labels() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": run,
                "cell_id": f"{IMG}:p&1",
                "model": HOSTILE,
                "problem_text": f"{HOSTILE} {MATH}",
                "stage": SCRIPT,
                "level": 2,
                "regime": "prefix_limited",
                "t_f": 128,
            }
            for run in (f"run{SCRIPT}", "b&c")
        ]
    )


def test_the_classify_report_page_escapes_every_value(tmp_path):
    labels = _labels()
    fig = tmp_path / "figures" / "x.png"
    fig.parent.mkdir()
    fig.write_bytes(b"png")
    page = H.write_report(
        tmp_path / "index.html",
        title=f"bt classify: {HOSTILE}",
        labels=labels,
        restart_budgets=(8,),
        figures={f"fig{SCRIPT}": fig},
        summary={
            "tau": 0.75,
            "prior": HOSTILE,
            "topup": SCRIPT,
            "regime_counts": {HOSTILE: {"prefix_limited": 2}},
            "unfinished_counts": {HOSTILE: {SCRIPT: 1}},
            "delta_sensitivity_counts": {HOSTILE: 1},
            "cross_model_agreement": {"text": HOSTILE},
            "label_hardening": [{"category": HOSTILE, "before": 1, "after": 1}],
            "a2": {
                "32": {
                    "trajectories": 1,
                    "earlier_by_2b": 0,
                    "no_crossing_at_b2": 0,
                    "median_shift_steps": 0,
                    "verdict": HOSTILE,
                    "rule": SCRIPT,
                }
            },
            "plans": {
                HOSTILE: {
                    "items": 1,
                    "probe": 1,
                    "restart": 0,
                    "samples": 4,
                    "by_reason": {SCRIPT: 1},
                }
            },
        },
        cell_pages={(f"run{SCRIPT}", f"{IMG}:p&1"): tmp_path / "cells" / "c.html"},
        plan=pd.DataFrame([{"cell_id": HOSTILE, "reason": SCRIPT}]),
        files=[tmp_path / f"t{SCRIPT}.csv"],
        figure_gaps={f"gap{IMG}": HOSTILE},
    ).read_text()
    assert_escaped(page, HOSTILE, f"run{SCRIPT}", f"{IMG}:p&1", f"t{SCRIPT}.csv")
    assert page.count('<img src="') == 1  # the one figure, named with its escaped name
    assert 'href="cells/c.html"' in page


def test_the_cell_page_escapes_every_value(tmp_path):
    branches = pd.DataFrame(
        [
            {
                "kind": kind,
                "anchor": 64 if kind == "probe" else -1,
                "budget": 8,
                "branch": 0,
                "extracted": HOSTILE,
                "verdict": "wrong",
                "correct": False,
                "finish_reason": "eos",
                "continuation": f"so {HOSTILE} is it",
            }
            for kind in ("probe", "restart")
        ]
    )
    row = {"cell_id": f"{IMG}:p&1", "model": HOSTILE, "regime": "terminal_A1", "t_f": 64}
    curve = pd.DataFrame({"cell_id": [row["cell_id"]], "anchor": [64], "n": [4], "k": [1]})
    detail = CellDetail(
        problem=f"{HOSTILE} {MATH}",
        answer=SCRIPT,
        base_text=f"<think>{HOSTILE} & more</think>",
        cuts={64: 8},
        branches=branches,
    )
    page = H.write_cell_page(
        tmp_path / "c.html",
        row=row,
        curve=curve,
        svg=cell_svg(curve.assign(p=0.25, r_hat=0.0, r_hat_cons=0.0, adv=0.25, position="in"), row),
        detail=detail,
        back=tmp_path / "index.html",
    ).read_text()
    assert_escaped(page, HOSTILE, f"cell {IMG}:p&1", f"so {HOSTILE} is it", "<think>")
    assert page.count("<svg") == 1  # the plot, its title escaped inside it


def test_the_study_page_escapes_every_value(tmp_path: Path):
    head = HL.Headline(
        "k&1",
        f"Title {SCRIPT}",
        [f"Sentence {HOSTILE}."],
        {},
        {"t": pd.DataFrame([{"model": HOSTILE, "n": 1}])},
        (),
    )
    page = write_page(
        tmp_path / "study" / "index.html",
        runs=[tmp_path / "r"],
        summary={"runs": {f"r{SCRIPT}": {"cells": 2}}, "topup": HOSTILE},
        labels=_labels(),
        protocol=DEFAULT,
        budgets=(8,),
        heads=[head],
        figures={},
        gaps={},
        missing=[Missing(HOSTILE, SCRIPT, f"bt x {IMG}")],
        classify_index=tmp_path / "study" / "classify" / "index.html",
        tables=[tmp_path / "study" / "tables" / f"t{SCRIPT}.csv"],
    ).read_text()
    assert_escaped(page, f"Sentence {HOSTILE}.", f"r{SCRIPT}", f"bt x {IMG}", HOSTILE)
