"""How much memory the MLX engine's KV caches may use, and how many rows that admits.

`--memory-gb auto` (the default): on Apple silicon the GPU's recommended working set
(what Metal lets a process keep resident; MLX reports it), elsewhere the RAM the OS reports as
available, minus the loaded weights and a margin for activations, logits and the Python side.
A number is taken as given. `rows_admitted` is the rule `MlxEngine.plan` applies to a budget
(`prefix_cache.CacheBytes`: rows hold their own tokens, allocated once, plus a decode step's
transient)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

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
        return (
            f"auto: {self.budget_bytes / GiB:.1f} GB for the KV cache = {self.source} "
            f"{self.offered_bytes / GiB:.1f} GB - weights {self.weights_bytes / GiB:.2f} GB "
            f"- margin {self.margin_bytes / GiB:.1f} GB"
        )


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

    leaves = cast(list[tuple[str, Any]], tree_flatten(model.parameters()))  # (path, array) pairs
    return int(sum(v.nbytes for _, v in leaves))


def auto_budget(model: Any, offered: tuple[int, str] | None = None) -> AutoBudget:
    """The `--memory-gb auto` budget for `model` on this machine. On Apple silicon the
    recommended working set includes the weights (unified memory); available RAM was measured
    after they were loaded, so only the margin comes off it."""
    size, source = offered if offered is not None else offered_bytes()
    return _auto(size, source, weights_bytes(model), loaded=True)


def _auto(size: int, source: str, weights: int, *, loaded: bool) -> AutoBudget:
    """`offered` bytes less the weights (unless they were loaded before available RAM was read)
    and the margin."""
    margin = max(MARGIN_MIN, int(MARGIN_SHARE * size))
    taken = weights if source.startswith("Metal") or not loaded else 0
    return AutoBudget(max(MIN_BUDGET, size - taken - margin), source, size, weights, margin)


SHARED_PREFIXES = (
    8  # cells' prefixes an MLX engine keeps at most (the scheduler sorts their probes)
)
MIN_PREFIX_SLOTS = 1  # a budget that holds one row of the deepest anchor is never refused
PREFIX_SHARE = 0.5  # shared prefixes take at most this share while several cells probe


@dataclass(frozen=True)
class Admission:
    """What a budget admits: `rows` (0: not one) and the shared prefixes kept (`slots`)."""

    rows: int
    slots: int
    need_bytes: float  # one prefix + one row + one step's transient


def admission(
    layout: Any,
    budget: float,
    row_tokens: int,
    shared_tokens: int,
    *,
    batch_size: int,
    max_prefixes: int,
    snapshots: int,
) -> Admission:
    """The rule of `MlxEngine.plan`: rows of `row_tokens` positions whose first
    `shared_tokens` are a prefix held once per cell. Up to `max_prefixes` cells' prefixes are
    kept while they take at most PREFIX_SHARE of the budget, fewer (down to MIN_PREFIX_SLOTS)
    before fewer rows; each row holds its own tokens (allocated once) and adds its share of a
    decode step's transient (`rows_admitted`)."""
    tokens = max(int(row_tokens), 1)
    shared = min(max(int(shared_tokens), 0), tokens - 1)
    per_prefix = layout.prefix_cache(shared, snapshots) if shared else 0.0
    slots = max(1, int(max_prefixes))
    while slots > MIN_PREFIX_SLOTS and slots * per_prefix > PREFIX_SHARE * budget:
        slots -= 1
    rows = rows_admitted(layout, budget - slots * per_prefix, tokens - shared, tokens, batch_size)
    while rows < 1 and slots > MIN_PREFIX_SLOTS:
        slots -= 1
        rows = rows_admitted(
            layout, budget - slots * per_prefix, tokens - shared, tokens, batch_size
        )
    need = per_prefix + layout.own_row(tokens - shared) + layout.step_transient(1, tokens)
    return Admission(rows, slots, need)


def rows_admitted(
    layout: Any, budget: float, own_tokens: int, longest: int, batch_size: int
) -> int:
    """The most rows (up to `batch_size`) of `own_tokens` own positions each, padded to
    `longest` positions in a decode step, whose buffers and step transient fit `budget` bytes
    (`prefix_cache.CacheBytes.own_row` / `step_transient`); 0 when not one does."""
    per_row = layout.own_row(own_tokens) + layout.step_transient(1, longest)
    if budget <= 0 or per_row <= 0:
        return 0 if budget <= 0 else batch_size
    return max(0, min(batch_size, int(budget // per_row)))


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def layout_from_config(config: dict, kv_bits: int | None = None) -> Any:
    """The `CacheBytes` of a model from its config.json alone (no weights loaded; `--dry-run`):
    every attention layer counted as growing with the sequence (an upper bound for models with
    sliding-window or recurrent layers), keys and values in the config's dtype (bfloat16 for a
    quantized checkpoint, whose activations are)."""
    from breakthrough.engine.prefix_cache import SCORE_TEMPORARIES, CacheBytes

    cfg = config.get("text_config") or config
    layers = int(cfg.get("num_hidden_layers") or config.get("num_hidden_layers") or 0)
    heads = int(cfg.get("num_attention_heads") or 0)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // max(heads, 1)))
    dtype = str(cfg.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    width = DTYPE_BYTES.get(dtype, 2)
    if not (layers and kv_heads and head_dim):
        raise ValueError("config.json does not give the layers, KV heads and head dim")
    from breakthrough.engine.prefix_cache import KV_GROUP_SIZE

    # quantized: packed bits plus a scale and a bias (the model's dtype) per group of values
    per_value = kv_bits / 8 + 2 * width / KV_GROUP_SIZE if kv_bits else width
    per_token = layers * kv_heads * head_dim * 2 * per_value
    return CacheBytes(per_token, 0.0, 0, 0.0, layers, SCORE_TEMPORARIES * 4 * heads)


def folder_weights_bytes(folder: Any) -> int:
    """Bytes of a model folder's weight files (what loading it puts in memory)."""
    from pathlib import Path

    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))


def budget_without_loading(folder: Any, budget_bytes: int | None) -> tuple[int, str]:
    """(bytes, how it was chosen) of `--memory-gb` for the model in `folder`, without loading
    it: a number is taken as given; auto is what `auto_budget` would choose, with the weights'
    size read from their files."""
    if budget_bytes is not None:
        return budget_bytes, f"--memory-gb {budget_bytes / GiB:g}"
    auto = _auto(*offered_bytes(), folder_weights_bytes(folder), loaded=False)
    return auto.budget_bytes, auto.describe()


@dataclass(frozen=True)
class Booking:
    """What one row in flight, or one kept state, holds in an MLX engine's caches.

    nbytes: its own buffers (the positions past the shared prefix it points into), booked at
        their final size when the row is admitted (0 when no budget is kept).
    length: the row's final length (prompt + max tokens + the step ahead): a decode step's
        transient grows with the longest row in flight. 0 for a kept state (not in a step).
    prefix: the key of the shared prefix it points into (that prefix stays alive while it
        does), or None.
    """

    nbytes: float
    length: int = 0
    prefix: str | None = None


class MemoryBook:
    """The bytes an MLX engine's caches hold, booked per row and per kept state, and the rule
    that admits a new row: what is held now, plus what the row adds, plus one decode
    step's transient at the longest row, within the budget.

    A shared prefix counts once, whoever points into it: the engine passes the prefixes it keeps
    (`held`: key -> bytes, None while a prefix cache has not built its buffers); a prefix it has
    released counts, at the size last seen (`prefix_bytes`), while a booking still points into
    it."""

    def __init__(self) -> None:
        self.rows: dict[str, Booking] = {}
        self.kept: dict[str, Booking] = {}
        self.prefix_bytes: dict[str, float] = {}

    def pointed_into(self) -> set[str]:
        """Prefixes a row in flight or a kept state points into."""
        bookings = [*self.rows.values(), *self.kept.values()]
        return {b.prefix for b in bookings if b.prefix is not None}

    def held_bytes(self, held: dict[str, float | None]) -> float:
        """Bytes the caches hold now: every live prefix once, every row's and kept state's own."""
        prefixes = 0.0
        for key in set(held) | self.pointed_into():
            size = held.get(key)
            prefixes += size if size is not None else self.prefix_bytes.get(key, 0.0)
        own = sum(b.nbytes for b in self.rows.values()) + sum(b.nbytes for b in self.kept.values())
        return prefixes + own

    def fits(
        self,
        held: dict[str, float | None],
        adds: float,
        length: int,
        in_flight: int,
        layout: Any,
        budget: float,
    ) -> bool:
        """Whether a row of final `length` that adds `adds` bytes can join `in_flight` rows."""
        longest = max([length, *(b.length for b in self.rows.values())])
        need = self.held_bytes(held) + adds + layout.step_transient(in_flight + 1, longest)
        return need <= budget

    def retire(self, key: str, held: set[str]) -> str | None:
        """Forget a finished row; returns the prefix it pointed into. The sizes of released
        prefixes nothing points into any more are forgotten too (the one it pointed into is
        kept: the row's final state may be kept next, pointing into it)."""
        booking = self.rows.pop(key, None)
        prefix = booking.prefix if booking is not None else None
        live = held | self.pointed_into()
        for k in [k for k in self.prefix_bytes if k not in live and k != prefix]:
            del self.prefix_bytes[k]
        return prefix
