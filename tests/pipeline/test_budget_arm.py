"""`bt continue --add-budget`: refusals before anything is read or written. The arm itself, on
the tiny model's real run, is tested in tests/report/test_budget_arm_run.py (it shares the
report tests' continued run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from classify_fixture import cell_spec, write_store
from rich.console import Console

from breakthrough.commands.continue_ import _add_budget
from breakthrough.commands.engine_options import HttpOptions
from breakthrough.errors import BtError
from breakthrough.pipeline.budget_arm import arm_protocol
from breakthrough.store import RunStore


def test_add_budget_option_refusals_before_any_read(tmp_path: Path) -> None:
    http = HttpOptions("mlx", None, 0, False, 600.0, 2)
    args = (http, 8, 1.0, 0.0)  # engine options, batch size, memory GB, lock wait
    with pytest.raises(BtError, match="--add-budget: expected a positive"):
        _add_budget(Console(), [tmp_path], 0, False, *args)
    with pytest.raises(BtError, match="--add-budget: expected a positive"):
        _add_budget(Console(), [tmp_path], 0, True, *args)  # --dry-run refuses it alike


def test_an_arm_needs_primary_probes_and_another_budget(tmp_path: Path) -> None:
    bare = write_store(tmp_path / "bare", {c: s | {"probes": {}} for c, s in cell_spec().items()})
    with RunStore(bare, readonly=True) as store, pytest.raises(BtError, match="bt continue"):
        arm_protocol(store, 4096)
    run = write_store(tmp_path / "run", cell_spec())
    with RunStore(run, readonly=True) as store:
        with pytest.raises(BtError, match="run's own B"):
            arm_protocol(store, 1024)
        with pytest.raises(BtError, match="--add-budget"):
            arm_protocol(store, 20000)  # no room within the total cap
        assert arm_protocol(store, 4096).budget == 4096
        assert "probe_arms" not in store.manifest()
