"""How much memory the MLX engine's KV caches may use, and how many rows that admits.

`--memory-gb auto` (the default, issue 28): on Apple silicon the GPU's recommended working set
(what Metal lets a process keep resident; MLX reports it), elsewhere the RAM the OS reports as
available, minus the loaded weights and a margin for activations, logits and the Python side.
A number is taken as given. `rows_admitted` is the rule `MlxEngine.capacity` applies to a budget
(`prefix_cache.CacheBytes`: rows hold their own tokens, allocated once, plus a decode step's
transient)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

GiB = 2**30
MARGIN_SHARE = 0.10  # of what the machine offers, kept back for everything that is not KV
MARGIN_MIN = 1 * GiB
MIN_BUDGET = 256 * 2**20  # auto never goes below this (a small machine still runs a few rows)


@dataclass(frozen=True)
class AutoBudget:
    """What `auto` chose and from what (printed by `--dry-run` and the closing line)."""

    budget_bytes: int
    source: str  # "Metal recommended working set" or "available RAM"
    offered_bytes: int
    weights_bytes: int
    margin_bytes: int

    def describe(self) -> str:
        return (f"auto: {self.budget_bytes / GiB:.1f} GB for the KV cache = {self.source} "
                f"{self.offered_bytes / GiB:.1f} GB - weights {self.weights_bytes / GiB:.2f} GB "
                f"- margin {self.margin_bytes / GiB:.1f} GB")


def available_ram_bytes() -> int:
    """RAM the OS says a new allocation can get without swapping (Linux: MemAvailable; else
    the free physical pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return 8 * GiB


def offered_bytes() -> tuple[int, str]:
    """(bytes, where from): Metal's recommended working set on Apple silicon, else the RAM
    available now."""
    try:
        import mlx.core as mx

        if mx.metal.is_available():
            info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
            size = int(info.get("max_recommended_working_set_size", 0))
            if size > 0:
                return size, "Metal recommended working set"
    except Exception:  # pragma: no cover - no Metal here; fall back to RAM
        pass
    return available_ram_bytes(), "available RAM"


def weights_bytes(model: Any) -> int:
    """Bytes of the model's parameters (as loaded: 4-bit weights count packed)."""
    from mlx.utils import tree_flatten

    return int(sum(v.nbytes for _, v in tree_flatten(model.parameters())))


def auto_budget(model: Any, offered: tuple[int, str] | None = None) -> AutoBudget:
    """The `--memory-gb auto` budget for `model` on this machine. On Apple silicon the
    recommended working set includes the weights (unified memory); available RAM was measured
    after they were loaded, so only the margin comes off it."""
    size, source = offered if offered is not None else offered_bytes()
    weights = weights_bytes(model)
    margin = max(MARGIN_MIN, int(MARGIN_SHARE * size))
    taken = weights if source.startswith("Metal") else 0
    budget = max(MIN_BUDGET, size - taken - margin)
    return AutoBudget(budget, source, size, weights, margin)


def rows_admitted(layout: Any, budget: float, own_tokens: int, longest: int, batch_size: int) -> int:
    """The most rows (up to `batch_size`) of `own_tokens` own positions each, padded to
    `longest` positions in a decode step, whose buffers and step transient fit `budget` bytes
    (`prefix_cache.CacheBytes.own_row` / `step_transient`); 0 when not one does."""
    per_row = layout.own_row(own_tokens) + layout.step_transient(1, longest)
    if budget <= 0 or per_row <= 0:
        return 0 if budget <= 0 else batch_size
    return max(0, min(batch_size, int(budget // per_row)))
