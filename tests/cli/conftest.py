"""CLI-wide tests run the installed console script; skip cleanly where it is not installed."""

from __future__ import annotations

import pytest
from bt_cli import BT


@pytest.fixture(autouse=True)
def _installed_bt():
    if not BT.is_file():
        pytest.skip(f"no installed console script at {BT} (pip install -e .)")
