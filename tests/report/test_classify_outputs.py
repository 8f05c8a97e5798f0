"""What `bt classify` writes: tables, summary, plans, figures and the HTML report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
import zlib

import pandas as pd

from breakthrough.classify.frames import classify_frames
from breakthrough.classify.regimes import FIGURE_CLASSES
from breakthrough.report import figures as F
from breakthrough.report.classify_outputs import write_outputs
from classify_fixture import frames


def test_write_outputs(tmp_path):
    samples, cells = frames()
    res = classify_frames(samples, cells, draws=5)
    paths = write_outputs({"run1": res}, tmp_path / "out")
    out = tmp_path / "out"
    for name in ("labels.parquet", "labels.csv", "summary.json", "plan.json", "plan.csv",
                 "probe_cells.csv", "restart_cells.csv", "curves.csv", "index.html",
                 "run1/index.html"):
        assert (out / name).is_file(), name
    for fig in ("regime_map", "dose_response", "matched_compute", "topup_resolution", "swimmer"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
        assert (out / "run1" / "figures" / f"{fig}.png").is_file()
    assert len(list((out / "run1" / "cells").glob("*.html"))) == 5
    page = (out / "run1" / "cells" / "g_p1-{:08d}.html".format(
        zlib.crc32(b"g:p1") % 10**8)).read_text()
    assert "<svg" in page and "prefix_limited" in page
    table = pd.read_parquet(out / "labels.parquet")
    need = {"model", "stage", "problem_id", "level", "t_f", "event_observed", "interval_lower",
            "interval_upper", "instant", "regime", "regime_class", "R_1024", "R_2048",
            "R_4096", "R_8192", "max_advantage", "t_v_d025", "t_v_d050", "t_v_d075",
            "t_v_cons_d050", "conservative_agrees", "terminal_a1_anchor",
            "terminal_a1_advantage", "run"}
    assert need <= set(table.columns)
    assert set(table["regime_class"]) <= set(FIGURE_CLASSES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["regime_counts"]["m"]["terminal_A1"] == 1
    assert summary["plans"]["terminal,ambiguous"]["items"] == len(res.plans["terminal,ambiguous"])
    assert summary["protocol"]["budget"] == 1024 and summary["topup"] == "terminal,ambiguous"
    plan = json.loads((out / "plan.json").read_text())
    assert plan["topup"] == "terminal,ambiguous" and len(plan["items"]) == len(res.plan)
    assert set(plan["other_rules"]) == {"terminal,posterior"}
    html = (out / "run1" / "index.html").read_text()
    assert "prefix_limited" in html and "cells/" in html
    assert paths["index"] == out / "index.html"


def test_cell_plot_png_and_svg(tmp_path):
    samples, cells = frames()
    res = classify_frames(samples, cells, draws=2)
    for cid in ("g:p1", "m:p2"):
        row = res.labels.set_index("cell_id").loc[cid].to_dict() | {"cell_id": cid}
        curve = res.curves[res.curves["cell_id"] == cid]
        ET.fromstring(F.cell_svg(curve, row))  # well-formed
    png = F.cell_plot(curve, row, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ET.fromstring(F.cell_svg(curve.iloc[0:0], row))


def test_every_figure_class_has_a_colour():
    assert list(F.CLASS_COLORS) == list(FIGURE_CLASSES)
