"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from continue_fixture import two_cell_copy


@pytest.fixture()
def fixture_run(tmp_path: Path, tmp_path_factory, tiny_model_dir: Path) -> Path:
    """A fresh two-cell run (continue_fixture.TWO_CELLS) with its base traces stored, at
    TMP/runs/fx: this test's own copy of one build per session (it generates nothing, so every
    build was the same)."""
    return two_cell_copy(tmp_path_factory, tiny_model_dir, tmp_path)
