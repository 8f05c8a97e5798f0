"""CLI-wide tests run the installed console script. A missing script is a broken install, so
every CLI test fails (never skips) with a line saying how to install it."""

from __future__ import annotations

import pytest
from bt_cli import require_bt


@pytest.fixture(autouse=True)
def _installed_bt():
    require_bt()
