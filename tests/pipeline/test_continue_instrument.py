"""What continuations store (issue 22): log-probs and entropies only unless `bt continue
--instrument`, with the same tokens either way; the choice is the run's identity field
`continuation`; `bt signals` says what a run holds and lacks; a rerun with nothing to do says
so before any model is loaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from bt_cli import assert_one_line_error, run_bt

from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS
from breakthrough.models.loading import load_model
from breakthrough.pipeline import cell_loop
from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run, continue_runs
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore

SETTINGS = dict(budget=8, answer_budget=4, restart_budgets=(8,), anchors=(64, 128))


def _frame(run: Path):
    with RunStore(run, readonly=True) as s:
        df = s.samples_frame(signals=True)
        man = s.manifest()
    key = ["cell_id", "kind", "anchor", "budget", "branch"]
    return df.sort_values(key).reset_index(drop=True), man


def test_continuations_instrument_only_when_asked(
    fixture_run: Path, tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    full = tmp_path / "full"
    shutil.copytree(fixture_run, full)
    proto = DEFAULT.with_overrides(**SETTINGS)
    loaded = load_model(str(tiny_model_dir), family="qwen")
    continue_run(fixture_run, loaded, ContinueOptions(protocol=proto, topup=()))
    continue_run(full, loaded, ContinueOptions(protocol=proto, topup=(), instrument=True))
    light, light_man = _frame(fixture_run)
    heavy, heavy_man = _frame(full)
    assert len(light) == len(heavy) and (light["kind"] != "base").sum() > 0
    for a, b in zip(
        light.itertuples(), heavy.itertuples(), strict=True
    ):  # the same tokens and statistics
        assert np.array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.logprobs, b.logprobs)
        np.testing.assert_array_equal(a.entropies, b.entropies)
        if a.kind == "base":
            continue
        assert a.signals == {}  # log-probs + entropies only
        assert set(b.signals) == set(SIGNAL_FIELDS + HIDDEN_FIELDS)
        assert all(len(v) == len(b.logprobs) for v in b.signals.values())
    assert light_man["continuation"]["signals"] == "logprobs+entropy"
    assert heavy_man["continuation"]["signals"] == "full"

    # bt signals says what the light run holds and lacks
    said = run_bt("signals", fixture_run)
    assert said.returncode == 0, said.stderr
    probe_line = next(
        line for line in said.stdout.splitlines() if line.strip().startswith("probe:")
    )
    assert "protocol 2.2 token signals in 0" in probe_line and "--instrument" in probe_line
    full_said = run_bt("signals", full)
    assert "hold log-probs and entropies only" not in full_said.stdout.split("probe:")[1]

    # a run never mixes the two: refused with one line, before any model is loaded
    refused = run_bt("continue", fixture_run, "--instrument")  # the run's own settings otherwise
    assert_one_line_error(refused, 2, "continuation.signals", "logprobs+entropy", "full")

    # nothing left to do: said before any model is loaded
    def no_load(*a, **k):
        raise AssertionError("a model was loaded for a run with nothing to do")

    monkeypatch.setattr(cell_loop, "load_model", no_load)
    settings = dict(SETTINGS, samples=4, restart_samples=4, topup_samples=8)
    (rep,) = continue_runs([fixture_run], settings, ContinueOptions(topup=()))
    assert rep.nothing_to_do and rep.generated_tokens == 0
