"""Which mlx-lm versions bt's MLX engine supports, checked without importing mlx-lm (a command
refuses an untested one before it writes anything: `contract.EngineSpec`; `mlx_compat` refuses
it again when it is imported)."""

from __future__ import annotations

import re
from importlib import metadata

from breakthrough.errors import BtError

# The mlx-lm versions bt's engine was tested with: [lowest, first untested) (pyproject.toml pins
# the same range).
SUPPORTED: tuple[tuple[int, ...], tuple[int, ...]] = ((0, 32, 2), (0, 33))


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string ("0.32.2" -> (0, 32, 2); "0.33.0rc1" -> (0, 33,
    0))."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def supported_range() -> str:
    lo, hi = (".".join(map(str, v)) for v in SUPPORTED)
    return f">={lo},<{hi}"


def check_mlx_lm(version: str | None = None) -> str:
    """The installed mlx-lm's version (or `version`), when bt supports it; else BtError in one
    line naming the supported range and how to get it."""
    if version is None:
        try:
            version = metadata.version("mlx-lm")
        except metadata.PackageNotFoundError:
            raise BtError(
                f"mlx-lm is not installed; bt's MLX engine needs mlx-lm{supported_range()} "
                f'(pip install "mlx-lm{supported_range()}")'
            ) from None
    lo, hi = SUPPORTED
    if not lo <= _release(version) < hi:
        raise BtError(
            f"mlx-lm {version} is installed; bt's MLX engine supports mlx-lm{supported_range()} "
            f"(it extends mlx-lm internals that change between versions): pip install "
            f'"mlx-lm{supported_range()}"'
        )
    return version
