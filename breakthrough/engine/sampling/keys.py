"""The sampler's randomness: counter-based keys from a row's identity (seed, token index).

The noise for token id v at generated-token index k of a row with seed s is
    h = fmix32(row_key(s, k) ^ v * GOLDEN),  u = ((h >> 9) + 1/2) / 2**23,
    g = -log(-log(u))   (a Gumbel draw)
so a row's draw depends only on (seed, k, its own logits), never on its batch slot. The MLX
path (`mlx_path.gumbel_noise`) and the numpy path (`numpy_draw.draw_np`) both use these."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SAMPLER_ID = "gumbel-fmix32-v2"
"""Names the randomness scheme; part of the engine identity (a run never mixes two schemes)."""

GOLDEN = 0x9E3779B1
"""Multiplier that spreads token ids before they are mixed with the row key."""
_STEP_MUL = 0x85EBCA77
_SEED_SALT = 0x7F4A7C15
U23 = float(2.0**-23)
"""Scale of the uniform draw: it uses the hash's top 23 bits, and (j + 0.5) / 2**23 is exact in
float32 and lies in (0, 1), so the Gumbel draw is always finite."""


def fmix32(x):
    """MurmurHash3's finaliser on uint32 arrays (numpy or MLX: both wrap on overflow)."""
    x = x ^ (x >> 16)
    x = x * 0x85EBCA6B
    x = x ^ (x >> 13)
    x = x * 0xC2B2AE35
    return x ^ (x >> 16)


def row_keys(seeds: Sequence[int], steps: Sequence[int]) -> np.ndarray:
    """uint32 key per row for its token `steps[i]` (host side, n values per step)."""
    s = np.asarray(seeds, dtype=np.uint64).astype(np.uint32)
    k = np.asarray(steps, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):
        return fmix32(fmix32(s ^ np.uint32(_SEED_SALT)) ^ (k * np.uint32(_STEP_MUL)))
