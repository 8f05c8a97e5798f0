"""Figure setup shared by every figure bt draws (`bt classify`/`bt report`'s in report/figures.py,
`bt confirm`'s in signals/confirm_figures.py): one resolution and one way to make and save a
figure, so figures from different commands match when a reader puts them side by side.

matplotlib's object API on the Agg canvas (no pyplot, no global backend switch): safe to call
from tests and worker processes. matplotlib is imported only when a figure is made."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from breakthrough.outputs import write_atomic

DPI = 100


def new_figure(width: float, height: float) -> Any:
    """A matplotlib Figure of `width` × `height` inches at `DPI`, on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: str | os.PathLike) -> Path:
    """Write `fig` as a PNG atomically (tight bounding box, so legends outside the axes are
    kept); an OS error is one line naming `path`."""
    return write_atomic(
        path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    )
