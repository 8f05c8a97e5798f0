"""Generation backends behind one contract (`contract.Engine`); `make_engine` picks one."""

from __future__ import annotations

from typing import Any

from breakthrough.engine.contract import BACKENDS, Engine, EngineSpec
from breakthrough.errors import BtError

__all__ = ["BACKENDS", "Engine", "EngineSpec", "make_engine"]


def make_engine(spec: EngineSpec, loaded: Any) -> Engine:
    """The backend `spec` names, for the model `loaded` (a `models.loading.LoadedModel`)."""
    if spec.backend not in BACKENDS:
        raise BtError(f"--backend: expected one of {', '.join(BACKENDS)}, got {spec.backend!r}")
    if spec.batch_size < 1:
        raise BtError("--batch-size must be >= 1")
    # Imported here, not at the top: the contract must stay importable without mlx (HTTP
    # backends, analysis code).
    from breakthrough.engine.mlx_backend import MlxEngine

    return MlxEngine(loaded.model, loaded.eos_ids, batch_size=spec.batch_size,
                     memory_budget_bytes=spec.memory_budget_bytes,
                     reuse_prefixes=spec.backend == "mlx")
