"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from continue_fixture import two_cell_run


@pytest.fixture()
def fixture_run(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A fresh two-cell run (continue_fixture.TWO_CELLS) with its base traces stored."""
    return two_cell_run(tmp_path, tiny_model_dir)
