"""`bt classify`: the frame-level core on hand-built frames, the written outputs, and an
end-to-end run over tiny stores written with the RunStore API."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from breakthrough.commands.classify import classify_frames, write_outputs

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
ALL = (1024, 2048, 4096, 8192)


def _spec():
    """Per cell: probes {anchor: successes list}, restarts {C: successes list}."""
    y, n = True, False
    return {
        # prefix-limited: T_F = T_V = 128 (p = 1, R = 0 everywhere); bisection done (96, 112)
        "g:p1": {"probes": {a: [y] * 4 for a in (128, 256, 512)} | {64: [n] * 4, 96: [n] * 4,
                                                                   112: [n, n, y, n]},
                 "restarts": {c: [n] * 4 for c in ALL}, "level": 4, "stage": "dev"},
        # budget-limited
        "m:p1": {"probes": {a: [n] * 4 for a in GRID[:6]},
                 "restarts": {1024: [n] * 4, 2048: [n, y, n, n], 4096: [y, y, y, n],
                              8192: [y] * 4}, "level": 4, "stage": "dev"},
        # instant scratch-solvable: (0, 16] after two bisection rounds
        "g:p2": {"probes": {a: [y] * 4 for a in (16, 32, 64, 128, 256)},
                 "restarts": {1024: [y, y, y, n]}, "level": 1, "stage": "wave3"},
        # terminal A1 at 6/8, otherwise unsolved
        "m:p2": {"probes": {a: [n] * 4 for a in GRID[:7]} | {8192: [y, y, y, n, y, y, y, n]},
                 "restarts": {c: [n] * 4 for c in ALL}, "level": 5, "stage": "wave3"},
        # unsolved hard with ambiguous probe cells still to top up (1/4, 2/4)
        "g:p3": {"probes": {a: [n] * 4 for a in GRID[:4]} | {1024: [y, n, n, n],
                                                              2048: [y, y, n, n]},
                 "restarts": {c: [n] * 4 for c in ALL}, "level": 3, "stage": "wave3"},
    }


def frames(spec=None):
    spec = spec or _spec()
    rows, cells = [], []
    sid = 0
    for cell, s in spec.items():
        model, pid = cell.split(":")
        cells.append({"cell_id": cell, "problem_id": pid, "model": model, "stage": s["stage"],
                      "level": s["level"], "subject": "Algebra", "answer": "1",
                      "reasoning_tokens": 9000})
        for kind, key in (("probes", "anchor"), ("restarts", "budget")):
            for point, oks in s[kind].items():
                for b, ok in enumerate(oks):
                    sid += 1
                    rows.append({"sample_id": sid, "cell_id": cell, "problem_id": pid,
                                 "model": model, "stage": s["stage"], "level": s["level"],
                                 "kind": kind[:-1], "anchor": point if kind == "probes" else -1,
                                 "budget": 1024 if kind == "probes" else point, "branch": b,
                                 "correct": ok})
    return pd.DataFrame(rows), pd.DataFrame(cells)


def test_classify_frames_labels_plans_summary():
    samples, cells = frames()
    res = classify_frames(samples, cells, draws=20)
    reg = dict(zip(res.labels["cell_id"], res.labels["regime"]))
    assert reg == {"g:p1": "prefix_limited", "m:p1": "budget_limited",
                   "g:p2": "instant_scratch_solvable", "m:p2": "terminal_A1",
                   "g:p3": "unsolved_hard"}
    row = res.labels.set_index("cell_id").loc["g:p1"]
    assert row["t_f"] == 128 and row["interval_lower"] == 112 and row["t_v_d050"] == 128
    assert res.labels["regime_survival"].between(0, 1).all()
    assert res.labels.set_index("cell_id").loc["m:p2", "terminal_a1_anchor"] == 8192
    fixed = {(i.cell_id, i.kind, i.anchor, i.budget, i.reason) for i in res.plans["fixed"]}
    assert ("g:p3", "probe", 1024, 1024, "ambiguity") in fixed
    assert ("g:p3", "probe", 2048, 1024, "ambiguity") in fixed
    assert ("g:p1", "probe", 112, 1024, "ambiguity") in fixed
    assert ("m:p1", "restart", -1, 2048, "ambiguity") in fixed
    assert ("m:p1", "restart", -1, 4096, "ambiguity") in fixed
    assert not any(c == "m:p2" for c, *_ in fixed)  # already replicated to 8
    post = {(i.cell_id, i.anchor, i.budget) for i in res.plans["posterior"]}
    assert ("g:p3", 1024, 1024) not in post  # 1/4: P(rate ≥ .75) ≈ .016, outside the band
    assert res.plan == res.plans["fixed"]
    s = res.summary
    assert s["regime_counts"]["g"]["prefix_limited"] == 1
    assert s["cross_model_agreement"]["compared"] == 2
    assert s["prior"].startswith("jeffreys") and s["topup"] == "fixed"
    assert set(res.probe_cells.columns) >= {"cell_id", "model", "anchor", "n", "k", "p_ge_tau"}
    json.dumps(s)


def test_classify_frames_topup_posterior_and_errors():
    samples, cells = frames()
    res = classify_frames(samples, cells, topup="posterior", draws=5, prior="uniform")
    assert res.plan == res.plans["posterior"] and res.summary["prior"].startswith("uniform")
    from breakthrough.errors import BtError

    with pytest.raises(BtError):
        classify_frames(samples, cells, topup="never")
    with pytest.raises(BtError):
        classify_frames(samples, cells, tau=0)


def test_classify_frames_cells_without_samples():
    samples, cells = frames()
    extra = pd.DataFrame([{"cell_id": "g:p9", "problem_id": "p9", "model": "g", "stage": "dev",
                           "level": 2, "subject": "x", "answer": "1", "reasoning_tokens": 10}])
    res = classify_frames(samples, pd.concat([cells, extra]), draws=5)
    row = res.labels.set_index("cell_id").loc["g:p9"]
    assert row["regime"] == "unsolved_hard" and row["n_anchors"] == 0


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
        __import__("zlib").crc32(b"g:p1") % 10**8)).read_text()
    assert "<svg" in page and "prefix_limited" in page
    table = pd.read_parquet(out / "labels.parquet")
    need = {"model", "stage", "problem_id", "level", "t_f", "event_observed", "interval_lower",
            "interval_upper", "instant", "regime", "R_1024", "R_2048", "R_4096", "R_8192",
            "max_advantage", "t_v_d025", "t_v_d050", "t_v_d075", "t_v_cons_d050",
            "conservative_agrees", "terminal_a1_anchor", "terminal_a1_advantage", "run"}
    assert need <= set(table.columns)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["regime_counts"]["m"]["terminal_A1"] == 1
    assert summary["plans"]["fixed"]["items"] == len(res.plans["fixed"])
    plan = json.loads((out / "plan.json").read_text())
    assert plan["topup"] == "fixed" and len(plan["items"]) == len(res.plan)
    html = (out / "run1" / "index.html").read_text()
    assert "prefix_limited" in html and "cells/" in html
    assert paths["index"] == out / "index.html"


def _store_available():
    try:
        from breakthrough.store import RunStore, SampleRecord  # noqa: F401
        from breakthrough.tasks.grade import Grade  # noqa: F401
    except Exception:
        return False
    return True


def _write_store(run_dir, spec):
    from breakthrough.tasks.grade import Grade
    from breakthrough.store import RunStore, SampleRecord

    with RunStore(run_dir, create=True) as store:
        store.add_cells([{"cell_id": cell, "model": cell.split(":")[0],
                          "item": {"id": cell.split(":")[1], "stage": s["stage"],
                                   "level": s["level"], "answer": "1"},
                          "prompt_ids": [1, 2, 3]} for cell, s in spec.items()])
        recs, grades = [], []
        for cell, s in spec.items():
            for kind, key in (("probes", "anchor"), ("restarts", "budget")):
                for point, oks in s[kind].items():
                    for b, ok in enumerate(oks):
                        recs.append(SampleRecord(
                            cell_id=cell, kind=kind[:-1],
                            anchor=point if kind == "probes" else -1,
                            budget=1024 if kind == "probes" else point, branch=b, seed=b,
                            prefix_len=0, token_ids=np.array([1, 2], np.int32), text="x",
                            finish_reason="eos"))
                        grades.append(Grade(correct=ok, status="correct" if ok else "wrong",
                                            method="numeric", grader="math", version="t"))
        store.add_samples(recs, grades, reasoning_tokens={c: 9000 for c in spec})


@pytest.mark.skipif(not _store_available(), reason="breakthrough.store not available")
def test_bt_classify_end_to_end(tmp_path):
    from typer.testing import CliRunner

    from breakthrough.cli import app

    spec = _spec()
    _write_store(tmp_path / "runs" / "g", {c: s for c, s in spec.items() if c.startswith("g:")})
    _write_store(tmp_path / "runs" / "m", {c: s for c, s in spec.items() if c.startswith("m:")})
    result = CliRunner().invoke(app, ["classify", str(tmp_path / "runs"), "--draws", "5",
                                      "--no-cell-pages"])
    assert result.exit_code == 0, result.output
    assert "prefix_limited" in result.output and "report:" in result.output
    out = tmp_path / "runs" / "classify"
    table = pd.read_csv(out / "labels.csv")
    assert dict(zip(table["cell_id"], table["regime"]))["m:p2"] == "terminal_A1"
    assert set(table["run"]) == {"g", "m"}
    assert (out / "g" / "index.html").is_file() and (out / "m" / "index.html").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cross_model_agreement"]["compared"] == 2


def test_cell_plot_png_and_svg(tmp_path):
    import xml.etree.ElementTree as ET

    from breakthrough.report import figures as F

    samples, cells = frames()
    res = classify_frames(samples, cells, draws=2)
    for cid in ("g:p1", "m:p2"):
        row = res.labels.set_index("cell_id").loc[cid].to_dict() | {"cell_id": cid}
        curve = res.curves[res.curves["cell_id"] == cid]
        ET.fromstring(F.cell_svg(curve, row))  # well-formed
    png = F.cell_plot(curve, row, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ET.fromstring(F.cell_svg(curve.iloc[0:0], row))


def test_resolve_protocol_from_manifest_and_samples():
    from breakthrough.commands.classify import resolve_protocol

    proto, notes = resolve_protocol({"protocol": {"budget": 64, "anchors": [8, 16, 32],
                                                  "restart_budgets": [64, 128, 256, 512],
                                                  "sampling": {"temperature": 0.6}}})
    assert proto.budget == 64 and proto.anchors == (8, 16, 32)
    assert proto.restart_budgets == (64, 128, 256, 512) and notes
    samples, _ = frames()
    proto, notes = resolve_protocol({}, samples)
    assert proto.budget == 1024 and notes == []
    small = samples.assign(budget=samples["budget"].map(
        lambda b: {1024: 64, 2048: 128, 4096: 256, 8192: 512}[b]))
    small.loc[small["kind"] == "probe", "budget"] = 64
    proto, notes = resolve_protocol(None, small)
    assert proto.budget == 64 and proto.restart_budgets == (64, 128, 256, 512)
    assert len(notes) == 2
    # the small-budget run classifies like the full one: 4B = 256 is the budget-limited budget
    res = classify_frames(small, None, protocol=proto, draws=2)
    reg = dict(zip(res.labels["cell_id"], res.labels["regime"]))
    assert reg["m:p1"] == "budget_limited" and reg["g:p2"] == "instant_scratch_solvable"
    assert res.summary["protocol"]["budget_limited_at"] == 256
