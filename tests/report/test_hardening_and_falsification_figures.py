"""The label-hardening and budget-falsification figures (issue 23), drawn from known counts:
label hardening (stacked bars before vs after, integer ticks, the study's display names, legend
outside) and the A2 budget falsification (ring at B1, dot at B2, rows "index (L level)", a
cross without a B2 crossing)."""

from __future__ import annotations

import pandas as pd

from breakthrough.report import figures as F


def _outside(fig) -> None:
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend()] + list(fig.legends)
    assert legends
    for leg in legends:
        for ax in fig.axes:
            assert not leg.get_window_extent(r).overlaps(ax.get_window_extent(r))


def test_label_hardening_bars_hold_the_counts():
    # the reference figure's hard-coded counts (protocol 10), now an input
    rows = []
    for m, before, after in (
        ("ministral3-3b", (7, 8, 13, 21), (7, 4, 12, 26)),
        ("gemma4-e4b", (10, 5, 0, 34), (9, 5, 0, 35)),
    ):
        for when, c in (("before top-ups", before), ("after top-ups", after)):
            rows.append(
                {
                    "model": m,
                    "when": when,
                    **dict(zip(("instant", "interior", "A1 event", "censored"), c, strict=True)),
                    "total": sum(c),
                }
            )
    fig = F.label_hardening(F.shown(pd.DataFrame(rows)))
    assert [ax.get_title() for ax in fig.axes] == ["Gemma-4 E4B", "Ministral-3 3B"]
    ministral = fig.axes[1]
    heights = [(round(p.get_x() + p.get_width() / 2), p.get_height()) for p in ministral.patches]
    assert [h for x, h in heights if x == 0] == [7, 8, 13, 21]
    assert [h for x, h in heights if x == 1] == [7, 4, 12, 26]
    assert ministral.get_ylim()[1] >= 49
    _outside(fig)
    for ax in fig.axes:
        assert all(float(t).is_integer() for t in ax.get_yticks())


def test_budget_falsification_rings_dots_and_rows():
    a2 = pd.DataFrame(
        [
            {
                "model": "gemma4-e4b",
                "level": 4,
                "budget_1": 1024,
                "budget_2": 4096,
                "first_crossing_1": 256,
                "first_crossing_2": 256,
            },
            {
                "model": "ministral3-3b",
                "level": 2,
                "budget_1": 1024,
                "budget_2": 4096,
                "first_crossing_1": 768,
                "first_crossing_2": 16,
            },
            {
                "model": "ministral3-3b",
                "level": 5,
                "budget_1": 1024,
                "budget_2": 4096,
                "first_crossing_1": 512,
                "first_crossing_2": None,
                "last_anchor_2": 1024,
            },
        ]
    )
    fig = F.budget_falsification(F.shown(a2))
    gemma, ministral = fig.axes[:2]
    assert [t.get_text() for t in gemma.get_yticklabels()] == ["1 (L4)"]
    assert [t.get_text() for t in ministral.get_yticklabels()] == ["2 (L2)", "3 (L5)"]
    pts = [(tuple(c.get_offsets()[0]), c.get_sizes()[0]) for c in ministral.collections]
    rings = sorted(xy for xy, s in pts if s > 80)
    assert rings == [(512.0, 1.0), (768.0, 0.0)]
    assert ((16.0, 0.0), 25.0) in [(xy, s) for xy, s in pts]
    assert ((1024.0, 1.0), 60.0) in [(xy, s) for xy, s in pts]  # no crossing: its last anchor
    lo, hi = ministral.get_xlim()
    assert lo <= 8 and hi >= 1536 and hi <= 4096  # from the data, not 16,384
    _outside(fig)
