"""CLI-wide tests run the installed console script. A missing script is a broken install, so
every CLI test fails (never skips) with a line saying how to install it."""

from __future__ import annotations

import pytest
from bt_cli import require_bt
from shared_runs import build_arith_base


@pytest.fixture(autouse=True)
def _installed_bt():
    require_bt()


@pytest.fixture(scope="session")
def arith_base_run(tmp_path_factory, tiny_model_dir):
    """`bt base` `ARITH_BASE` of the tiny model, the run four test files continue, damage or
    refuse: made once per worker, read-only; a module copies it (`copy_of_arith_base`). Per
    worker, not `build_once`: `bt base` registers the model folder in the worker's own
    `BT_CACHE_DIR`, and a run whose folder is not registered there is refused."""
    folder = tmp_path_factory.mktemp("arith-base")
    build_arith_base(folder, tiny_model_dir)
    return folder / "base"
