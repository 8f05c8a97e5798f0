"""Option checks and wording shared by the commands (`bt base`, `bt continue`, ...): each refusal is
one line naming the option, raised before any store is opened or model loaded."""

from __future__ import annotations

from breakthrough.errors import BtError


def count(n: int, noun: str) -> str:
    """"1 problem", "2 problems": counts in messages agree with their nouns."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def check_engine_options(backend: str, batch_size: int, memory_gb: float | None = None) -> None:
    """--backend is known, --batch-size is a positive row count, --memory-gb is positive."""
    from breakthrough.engine.contract import BACKENDS  # numpy: not at `bt` start-up

    if backend not in BACKENDS:
        raise BtError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if batch_size < 1:
        raise BtError(f"--batch-size: expected a positive integer, got {batch_size}")
    if memory_gb is not None and not memory_gb > 0:
        raise BtError(f"--memory-gb: expected a positive number, got {memory_gb}")
