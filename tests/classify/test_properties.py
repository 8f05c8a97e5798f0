"""Property tests: labels never depend on row order; raising every rate never turns a solved
regime into an unsolved one."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from breakthrough.classify import regimes as C
from breakthrough.classify.plan import plan_next

ANCHORS = (16, 32, 64, 96, 128, 256, 512, 768, 896, 1024, 2048, 4096, 7168, 8192)
BUDGETS = (1024, 2048, 4096, 8192)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cell_counts(draw):
    """(kc, extra, ke): canonical successes of 4, extra branches (0 or 4), their successes."""
    kc = draw(st.integers(0, 4))
    extra = draw(st.sampled_from((0, 4)))
    ke = draw(st.integers(0, extra))
    return kc, extra, ke


@st.composite
def trajectory(draw):
    anchors = draw(st.lists(st.sampled_from(ANCHORS), min_size=0, max_size=8, unique=True))
    budgets = draw(st.lists(st.sampled_from(BUDGETS), min_size=0, max_size=4, unique=True))
    return ({a: draw(cell_counts()) for a in anchors}, {c: draw(cell_counts()) for c in budgets})


def _frame(cells: dict, key: str, which: int) -> pd.DataFrame:
    rows = []
    for cell, traj in cells.items():
        for point, (kc, extra, ke) in traj[which].items():
            rows.append({"cell_id": cell, key: point, "n": 4 + extra, "k": kc + ke,
                         "n_canon": 4, "k_canon": kc})
    return pd.DataFrame(rows, columns=["cell_id", key, "n", "k", "n_canon", "k_canon"])


def _panels(cells: dict):
    return _frame(cells, "anchor", 0), _frame(cells, "budget", 1)


cohorts = st.dictionaries(st.sampled_from(["a:1", "a:2", "b:1", "b:2", "c:9"]), trajectory(),
                          min_size=1, max_size=4)


@SETTINGS
@given(cohorts, st.randoms(use_true_random=False))
def test_labels_and_plan_do_not_depend_on_row_order(cells, rnd):
    pp, rp = _panels(cells)
    labels = C.label_panels(pp, rp)
    plan = plan_next(pp, rp)
    pi = list(range(len(pp)))
    ri = list(range(len(rp)))
    rnd.shuffle(pi)
    rnd.shuffle(ri)
    pp2, rp2 = pp.iloc[pi].reset_index(drop=True), rp.iloc[ri].reset_index(drop=True)
    pd.testing.assert_frame_equal(labels, C.label_panels(pp2, rp2))
    assert plan == plan_next(pp2, rp2)


@st.composite
def raised(draw):
    traj = draw(trajectory())

    def up(counts):
        kc, extra, ke = counts
        return draw(st.integers(kc, 4)), extra, draw(st.integers(ke, extra))

    hi = ({a: up(v) for a, v in traj[0].items()}, {c: up(v) for c, v in traj[1].items()})
    return traj, hi


@SETTINGS
@given(raised())
def test_raising_every_rate_never_unsolves(pair):
    lo, hi = pair
    cells = pd.DataFrame({"cell_id": ["m:p"]})
    before = C.label_panels(*_panels({"m:p": lo}), cells).iloc[0]
    after = C.label_panels(*_panels({"m:p": hi}), cells).iloc[0]
    if before["regime"] not in C.UNSOLVED:
        assert after["regime"] not in C.UNSOLVED, (before["regime"], after["regime"])
    # an observed event never disappears either
    if before["event_observed"]:
        assert after["event_observed"]
