"""CLI-wide tests run the installed console script. A missing script is a broken install, so
every CLI test fails (never skips) with a line saying how to install it."""

from __future__ import annotations

import pytest
from bt_cli import BT


@pytest.fixture(autouse=True)
def _installed_bt():
    if not BT.is_file():
        pytest.fail(
            f"no installed console script at {BT}: a broken install "
            "(pip install -e . puts it there)",
            pytrace=False,
        )
