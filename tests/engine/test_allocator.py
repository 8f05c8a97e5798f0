"""`engine.allocator`: glibc keeps freed memory, so MLX's per-step buffers are reused."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from breakthrough.engine import allocator
print(allocator.keep_freed_memory(), allocator.keep_freed_memory())
"""


def _run(**env: str) -> str:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, env=full, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_takes_the_settings_once_per_process() -> None:
    assert _run() == "True True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_users_own_malloc_settings_are_kept() -> None:
    assert _run(MALLOC_TRIM_THRESHOLD_="1048576") == "False False"


def test_the_engine_applies_them(tiny_model) -> None:
    from breakthrough.engine import allocator
    from breakthrough.engine.mlx_backend import MlxEngine

    MlxEngine(tiny_model.model, [0])
    assert allocator._applied is not None  # asked (True on glibc unless MALLOC_* is set)
