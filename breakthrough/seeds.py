"""Per-sample seeds derived from the sample's identity (design decision 4, protocol 1.4).

A sample's randomness depends only on what it is (cell, kind, anchor or budget, branch), never on
the order or company it was generated in; samples 4-7 are new, independent draws because their
branch index differs."""

from __future__ import annotations

import hashlib


def identity_seed(*parts: object) -> int:
    """31-bit seed: the first 4 bytes (big-endian) of sha256 of the ':'-joined parts, masked."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def probe_seed(cell_id: str, anchor: int, branch: int) -> int:
    """Seed of continuation `branch` at anchor t of a cell (protocol: phase04c:{run}:{t}:{b})."""
    return identity_seed("probe", cell_id, anchor, branch)


def restart_seed(cell_id: str, budget: int, branch: int) -> int:
    """Seed of restart attempt `branch` at reasoning budget C (protocol: phase04c-restart:...)."""
    return identity_seed("restart", cell_id, budget, branch)


def attempt_seed(cell_id: str, branch: int) -> int:
    """Seed of independent from-scratch attempt `branch` of a cell (`bt sample`): a function of
    the attempt's identity only, so attempt 7 is the same draw whether asked with --attempts 8
    or 16, and no two attempts of a cell share a seed by construction of their index."""
    return identity_seed("attempt", cell_id, branch)
