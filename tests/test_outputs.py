"""The shared helpers of breakthrough/outputs.py, breakthrough/plotting.py and `stats.missing`:
strict JSON from any number bt computes (issue 31: a NumPy float32 NaN or ±inf was written as
`NaN` / `Infinity` into classify's summary.json and plan.json and the study's headlines.json),
one atomic write, one figure setup and one rule for a missing value."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from classify_fixture import frames

from breakthrough.classify.frames import classify_frames
from breakthrough.classify.settings import ClassifySettings
from breakthrough.errors import BtError
from breakthrough.outputs import json_ready, replace_atomic, write_atomic, write_json
from breakthrough.plotting import DPI, new_figure, save_png
from breakthrough.report.classify_outputs import write_outputs
from breakthrough.stats import missing
from breakthrough.store import run_names


def _strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (what every other JSON parser does)."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


NON_FINITE = {
    "f32_nan": np.float32("nan"),
    "f32_inf": np.float32("inf"),
    "f32_ninf": np.float32("-inf"),
    "f64_nan": np.float64("nan"),
    "f64_inf": np.float64("inf"),
    "py_ninf": float("-inf"),
    "f16_nan": np.float16("nan"),
}


def test_write_json_writes_every_non_finite_float_as_null(tmp_path):
    doc = {
        **NON_FINITE,
        "nested": [np.float32("nan"), {"deep": (np.float32("inf"), 1.5)}, [np.float64("-inf")]],
        "array": np.array([1.0, np.nan, np.inf], dtype=np.float32),
        "ints": [np.int64(3), np.int32(-2), np.bool_(True)],
        "fine": np.float32(0.25),
        "na": pd.NA,
        7: "key as str",
        "set": {2},
    }
    path = write_json(tmp_path / "out.json", doc)
    got = _strict(path.read_text())
    assert all(got[k] is None for k in NON_FINITE)
    assert got["nested"] == [None, {"deep": [None, 1.5]}, [None]]
    assert got["array"] == [1.0, None, None]
    assert got["ints"] == [3, -2, True] and got["fine"] == 0.25
    assert got["na"] is None and got["7"] == "key as str" and got["set"] == [2]
    assert json_ready(np.float32("nan")) is None and json_ready(float("inf")) is None


def test_classify_summary_and_plan_are_strict_json_with_float32_nan(tmp_path):
    """The defect, through classify's own writer: NumPy float32 NaN / ±inf in what the summary
    and plan carry from a result used to reach summary.json and plan.json as NaN / Infinity."""
    samples, cells = frames()
    res = classify_frames(samples, cells, settings=ClassifySettings(draws=5))
    res.summary["posterior_band"] = [np.float32("nan"), np.float32("inf")]
    res.summary["survival_seed"] = {"lo": np.float32("-inf"), "hi": [np.float64("nan")]}
    out = tmp_path / "out"
    write_outputs({"run1": res}, out, cell_pages=False)
    summary = _strict((out / "summary.json").read_text())
    assert summary["posterior_band"] == [None, None]
    assert summary["survival_seed"] == {"lo": None, "hi": [None]}
    _strict((out / "plan.json").read_text())


def test_replace_atomic_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def fail(tmp):
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        replace_atomic(path, fail, durable=True)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]
    replace_atomic(path, lambda tmp: tmp.write_bytes(b"new"), durable=True)
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["f.bin"]


def test_write_atomic_names_the_file_on_an_os_error(tmp_path):
    with pytest.raises(BtError, match=r"^/proc/x\.json: cannot write \("):
        write_atomic("/proc/x.json", lambda tmp: tmp.write_text("{}"))


def test_one_figure_setup(tmp_path):
    fig = new_figure(4, 3)
    assert fig.get_dpi() == DPI and tuple(fig.get_size_inches()) == (4, 3)
    fig.subplots().plot([0, 1], [0, 1])
    path = save_png(fig, tmp_path / "figs" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(path.parent) == ["a.png"]


def test_missing():
    for v in (None, pd.NA, float("nan"), np.float32("nan"), np.float64("nan")):
        assert missing(v), v
    for v in (0, 0.0, "", "x", np.float32(1.5), False, math.inf):
        assert not missing(v), v


def test_run_names_number_repeated_folders(tmp_path):
    dirs = [tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "x", tmp_path / "c" / "run"]
    assert run_names(dirs) == ["run", "run-2", "x", "run-3"]
