"""`completeness.owed_grid` (issue 40, item 4): the anchors a cell's probes must cover, read
from its stored segment codes without NumPy, are the scheduler's grid (`plan_cell`) short of
at most the anchors at the total cap's edge (`FORCED_MARGIN`)."""

from __future__ import annotations

import numpy as np

from breakthrough.classify import completeness
from breakthrough.models import segments
from breakthrough.pipeline.cells import plan_cell
from breakthrough.protocol import DEFAULT


def test_the_segment_codes_are_the_models_own():
    assert (completeness.THINKING, completeness.SOLUTION) == (
        segments.THINKING,
        segments.SOLUTION,
    )


def test_owed_grid_is_the_schedulers_grid_away_from_the_cap():
    p = DEFAULT.with_overrides(anchors=(4, 8, 16), budget=4, answer_budget=4)
    for codes in (
        [1] + [0] * 10 + [1] + [2] * 5,  # thinking: 10 reasoning tokens
        [2] * 20,  # no thinking: solution tokens count
        [1, 0, 0, 1, 2, 2],  # shorter than the first anchor
    ):
        seg = np.asarray(codes, np.uint8)
        base = {"segments": seg, "token_ids": np.zeros(len(codes), np.int32)}
        want = tuple(plan_cell("c", {}, [], base, p).grid)
        assert completeness.owed_grid(seg.tobytes(), p) == want, codes
    # at the cap's edge the scheduler's grid may hold an anchor owed_grid does not claim
    edge = DEFAULT.with_overrides(anchors=(4,), budget=4, answer_budget=4, total_cap=20)
    seg = np.asarray([0] * 10, np.uint8)
    base = {"segments": seg, "token_ids": np.zeros(10, np.int32)}
    assert tuple(plan_cell("c", {}, [], base, edge).grid) == (4,)
    assert completeness.owed_grid(seg.tobytes(), edge) == ()
