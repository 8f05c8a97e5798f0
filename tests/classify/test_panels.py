"""Probe and restart panels from a samples frame: graded samples only, pooled and canonical
counts, other budgets ignored, row order irrelevant."""

from __future__ import annotations

import numpy as np
import pandas as pd

from breakthrough.classify.panels import probe_panel, restart_panel, rows_by_cell


def _samples():
    rows = []
    sid = 0

    def add(kind, anchor, budget, branch, correct, cell="m:p"):
        nonlocal sid
        sid += 1
        rows.append(
            {
                "sample_id": sid,
                "cell_id": cell,
                "kind": kind,
                "anchor": anchor,
                "budget": budget,
                "branch": branch,
                "correct": correct,
            }
        )

    add("base", -1, 0, 0, True)
    for b in range(8):
        add("probe", 64, 1024, b, b % 2 == 0)  # 4/8, canonical 2/4
    add("probe", 128, 1024, 0, np.nan)  # ungraded: left out
    add("probe", 128, 1024, 1, True)
    add("probe", 128, 4096, 0, True)  # A2 re-probe at another B: ignored
    for b in range(4):
        add("restart", -1, 2048, b, b == 0)
    return pd.DataFrame(rows)


def test_panels_from_samples():
    s = _samples()
    pp = probe_panel(s)
    assert pp.to_dict(orient="records") == [
        {"cell_id": "m:p", "anchor": 64, "n": 8, "k": 4, "n_canon": 4, "k_canon": 2},
        {"cell_id": "m:p", "anchor": 128, "n": 1, "k": 1, "n_canon": 1, "k_canon": 1},
    ]
    rp = restart_panel(s)
    assert rp.to_dict(orient="records") == [
        {"cell_id": "m:p", "budget": 2048, "n": 4, "k": 1, "n_canon": 4, "k_canon": 1}
    ]
    # row order does not matter
    assert probe_panel(s.sample(frac=1, random_state=3)).equals(pp)
    empty = probe_panel(s[s.kind == "base"])
    assert list(empty.columns) == ["cell_id", "anchor", "n", "k", "n_canon", "k_canon"]


def test_rows_by_cell_sorted_and_without_empty_cells():
    s = _samples()
    rows = rows_by_cell(probe_panel(s).iloc[::-1], "anchor")
    assert rows == {"m:p": [(64, 8, 4, 4, 2), (128, 1, 1, 1, 1)]}
    assert rows_by_cell(None, "anchor") == {}
