"""Issue 29, the classifier against the study's own code: the development cohort's enlarged
restart panel (protocol 4: "Dev + supplement use a pooled panel ... Gemma × math_03190 at 8
attempts per budget (3/8, 6/8, 2/8, 4/8)"; section 15: its δ = 0.25 crossing at t = 256, adv
0.42 at 4 attempts, "vanished after enlargement (adv 0.25, stability failed at 512, adv 0.16)",
R(4096) 0.00 at 4 attempts, 2/8 after; final `no_crossing_at_primary_delta`).

The cell is rebuilt from those counts: its first four attempts per budget give the 4-attempt
numbers (1/4, 2/4, 0/4 and 2/4: adv(256) = 0.75 − R̂(1,280) = 0.42), attempts 4–7 bring them to
the published 3/8, 6/8, 2/8, 4/8. Probes: 3/4 at t = 256 and 512, below τ before."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from bt_cli import require_bt, run_bt
from classify_fixture import frames, write_store

from breakthrough.classify.frames import classify_frames
from breakthrough.classify.panels import restart_panel, rows_by_cell
from breakthrough.classify.settings import ClassifySettings

CELL = "gemma:math_03190"


def dev_cell() -> dict:
    y, n = True, False
    return {
        CELL: {
            "probes": {
                64: [n] * 4,
                128: [y, n, n, n],
                256: [y, y, n, y],
                512: [n, y, y, y],
                1024: [y, y, y, n],
            },
            "restarts": {
                1024: [y, n, n, n] + [y, y, n, n],  # 1/4, then 3/8
                2048: [y, y, n, n] + [y, y, y, y],  # 2/4, then 6/8
                4096: [n, n, n, n] + [y, y, n, n],  # 0/4, then 2/8 (no A5.1 rule enlarges it)
                8192: [y, n, y, n] + [n, y, n, y],
            },  # 2/4, then 4/8
            "level": 4,
            "stage": "dev",
        }
    }


def _published(labels: pd.DataFrame, curves: pd.DataFrame) -> None:
    row = labels.set_index("cell_id").loc[CELL]
    assert (row["R_1024"], row["R_2048"], row["R_4096"], row["R_8192"]) == (0.375, 0.75, 0.25, 0.5)
    adv = curves[curves["cell_id"] == CELL].set_index("anchor")["adv"]
    assert round(adv[256], 3) == 0.254 and round(adv[512], 2) == 0.16  # 0.42 and 0.35 at 4
    assert row["max_advantage"] == 0.254
    assert row["t_f"] == 256 and pd.isna(row["t_v_d025"])  # the crossing vanished (256 at 4)
    assert row["regime"] == "no_crossing_at_primary_delta"


@pytest.mark.parametrize("topup", ["terminal", "terminal,ambiguous"])
def test_the_dev_cell_gives_its_published_numbers(topup):
    """`--topup terminal` is how the study labelled its development cohort (pooling.py); its
    restart panel held this cell at 8 attempts per budget, counted whole. Under the wave-3
    rule the three cells at 1-3/4 are pooled as A5.1 asks and the 0/4 one is counted whole."""
    samples, cells = frames(dev_cell())
    res = classify_frames(samples, cells, settings=ClassifySettings(topup=topup, draws=0))
    _published(res.labels, res.curves)
    assert res.restarts_whole == 1  # C = 4,096: 0/4 in its first four, 8 attempts


def test_whole_beyond_rule_counts_only_the_cells_no_rule_enlarges():
    from breakthrough.classify.pooling import enlarges, whole_beyond_rule
    from breakthrough.protocol import DEFAULT

    samples, _ = frames(dev_cell())
    rows = rows_by_cell(restart_panel(samples), "budget")[CELL]

    assert whole_beyond_rule(rows, enlarges("terminal", DEFAULT)[1]) == 1
    assert whole_beyond_rule(rows, enlarges("ambiguous", DEFAULT)[1]) == 1
    four = [(c, 4, k, 4, k) for c, _, k, _, _ in rows]  # wave 3's shape: 4 attempts everywhere
    assert whole_beyond_rule(four, enlarges("ambiguous", DEFAULT)[1]) == 0


@pytest.mark.heavy
def test_bt_classify_reproduces_the_dev_cell_and_says_it_counts_all_8(tmp_path):
    require_bt()
    run = write_store(tmp_path / "dev", dev_cell())
    for topup in ("terminal", "terminal,ambiguous"):
        proc = run_bt("classify", run, "--topup", topup, "--draws", "0", "--no-cell-pages")
        assert proc.returncode == 0, proc.stderr
        out = run / "classify"
        _published(pd.read_csv(out / "labels.csv"), pd.read_csv(out / "curves.csv"))
        said = " ".join(proc.stdout.split())
        notes = [line for line in said.split("note: ")[1:] if "restart cell" in line]
        assert len(notes) == 1, said
        assert (
            notes[0].startswith(
                "1 restart cell holds more than 4 attempts with 0/4 or 4/4 in the first 4"
            )
            and "R counts all of them" in notes[0]
        )
        summary = json.loads((out / "summary.json").read_text())
        assert summary["restart_cells_whole"] == 1
        assert not math.isnan(summary["protocol"]["tau"])
