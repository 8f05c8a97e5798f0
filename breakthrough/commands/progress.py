"""Progress-bar pieces shared by the long-running commands (`bt base`, `bt continue`)."""

from __future__ import annotations

import time
from typing import Any

from rich.progress import ProgressColumn
from rich.text import Text


class TokensPerSecond(ProgressColumn):
    """Live generated tokens/s, read from the engine's running counter (`attach` it once the
    engine exists; rich's refresh thread renders it between results)."""

    def __init__(self) -> None:
        super().__init__()
        self.engine: Any = None
        self.t0 = time.perf_counter()

    def attach(self, engine: Any) -> None:
        self.engine, self.t0 = engine, time.perf_counter()

    def render(self, task) -> Text:
        if self.engine is None:
            return Text("")
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return Text(f"{self.engine.generated_tokens / dt:6.1f} tok/s")
