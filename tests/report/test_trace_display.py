"""How traces and cells are displayed (issue 23): the swimmer axis starts at the first probed
anchor (a run probed from t = 32), special tokens are hidden from displayed traces (kept in the
store), and the run index names each cell's problem."""

from __future__ import annotations

import pandas as pd

from breakthrough.report import figures as F
from breakthrough.report import html as H
from breakthrough.report.cell_details import CellDetail, problem_line, shown_text


def _censored(cell, final, rate, model="m"):
    return {
        "cell_id": cell,
        "model": model,
        "event_observed": False,
        "instant": False,
        "interval_lower": final,
        "interval_upper": None,
        "censoring_time": final,
        "final_anchor": final,
        "final_rate": rate,
        "level": 2,
    }


def test_swimmer_starts_at_the_first_anchor_and_arrows_start_there():
    labels = pd.DataFrame([_censored("m:a", 256, 0.0), _censored("m:b", 512, 1.0)])
    fig = F.swimmer(labels, first_anchor=32)
    ax = fig.axes[0]
    assert ax.get_xlim() == (16.0, 1024.0)  # not 128: the run was probed from t = 32
    starts = sorted(a.xyann[0] for a in ax.texts if hasattr(a, "xyann"))
    assert starts == [32.0, 32.0]
    ends = sorted(a.xy[0] for a in ax.texts if hasattr(a, "xyann"))
    assert ends == [256.0, 512.0]
    # without the first anchor: the labels' own range, as before
    assert F.swimmer(labels).axes[0].get_xlim() == (128.0, 1024.0)  # the old behaviour


def test_special_tokens_are_hidden_from_the_displayed_trace(tmp_path):
    text = "<think>\nso x = 7</think>\n\\boxed{7}<|im_end|><|endoftext|>"
    assert shown_text(text) == "<think>\nso x = 7</think>\n\\boxed{7}"
    assert shown_text("a<end_of_turn>b</s><eos>") == "ab"
    assert shown_text("x < y and y > z") == "x < y and y > z"
    detail = CellDetail(base_text=text, cuts={64: 10})
    curve = pd.DataFrame({"anchor": [64], "n": [4], "k": [4]})
    page = H.write_cell_page(
        tmp_path / "a.html", row={"cell_id": "m:p"}, curve=curve, svg="", detail=detail
    ).read_text()
    assert "im_end" not in page and "endoftext" not in page
    assert "&lt;think&gt;" in page and "t=64" in page
    branches = pd.DataFrame(
        [
            {
                "kind": "probe",
                "anchor": 64,
                "budget": 8,
                "branch": 0,
                "extracted": "7",
                "verdict": "correct",
                "correct": True,
                "finish_reason": "eos",
                "continuation": "done<|im_end|>",
            }
        ]
    )
    page = H.write_cell_page(
        tmp_path / "b.html",
        row={"cell_id": "m:p"},
        curve=curve,
        svg="",
        detail=CellDetail(branches=branches),
    ).read_text()
    assert "im_end" not in page and "done" in page


def test_problem_line_is_one_short_line():
    assert problem_line("What is\n 3+4?") == "What is 3+4?"
    long = problem_line("x" * 200)
    assert len(long) == 90 and long.endswith("…")
    assert problem_line(None) is None
