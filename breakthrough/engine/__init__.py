"""Generation backends behind one contract (`contract.Engine`); `make_engine` picks one.

An `EngineSpec` checks its own settings when it is made; the command-line options that fill it
are parsed in `breakthrough.commands` (`engine_options`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from breakthrough.errors import BtError

if TYPE_CHECKING:
    from breakthrough.engine.contract import BACKENDS, HTTP_BACKENDS, Engine, EngineSpec

__all__ = ["BACKENDS", "HTTP_BACKENDS", "Engine", "EngineSpec", "make_engine"]

_CONTRACT_NAMES = ("BACKENDS", "HTTP_BACKENDS", "Engine", "EngineSpec")


def __getattr__(name: str) -> Any:
    """The contract's names, imported on first use: `import breakthrough` runs this package's
    `blas` module, and the contract needs NumPy, which a command that never generates (`bt
    --help`, `bt status`) should not pay for at start-up."""
    if name in _CONTRACT_NAMES:
        from breakthrough.engine import contract

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(spec: EngineSpec, loaded: Any) -> Engine:
    """The backend `spec` names, for the model `loaded` (a `models.loading.LoadedModel`)."""
    from breakthrough.engine.contract import HTTP_BACKENDS

    if spec.backend in HTTP_BACKENDS:
        if spec.kv_bits:
            raise BtError(
                f"--kv-bits applies to the MLX backends, not --backend {spec.backend} "
                "(a server quantizes its KV cache by its own settings)"
            )
        return _http_engine(spec, loaded)
    # Imported here, not at the top: the contract must stay importable without mlx (HTTP
    # backends, analysis code).
    from breakthrough.engine.mlx_backend import MlxEngine

    return MlxEngine(
        loaded.model,
        loaded.eos_ids,
        batch_size=spec.batch_size,
        memory_budget_bytes=spec.memory_budget_bytes,
        reuse_prefixes=spec.backend == "mlx",
        instrument=spec.instrument,
        kv_bits=spec.kv_bits,
        attention=spec.attention,
    )


def _http_engine(spec: EngineSpec, loaded: Any) -> Engine:
    """An HTTP backend over `spec.endpoints`; connects (and checks the servers) now, so a run
    fails with one line before it writes anything."""
    from breakthrough.engine.http_backend import HttpEngine
    from breakthrough.engine.http_client import RetryPolicy

    vocab = int((getattr(loaded, "config", None) or {}).get("vocab_size") or len(loaded.tokenizer))
    return HttpEngine(
        spec.backend,
        spec.endpoints,
        loaded.eos_ids,
        vocab,
        max_inflight=spec.max_inflight,
        accept_processed_logprobs=spec.accept_processed_logprobs,
        policy=RetryPolicy(attempts=spec.retries + 1, timeout_s=spec.request_timeout_s),
        api_key=spec.api_key,
    )
