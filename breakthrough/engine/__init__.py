"""Generation backends behind one contract (`contract.Engine`); `make_engine` picks one."""

from __future__ import annotations

from typing import Any

from breakthrough.engine.contract import BACKENDS, HTTP_BACKENDS, Engine, EngineSpec
from breakthrough.errors import BtError

__all__ = ["BACKENDS", "HTTP_BACKENDS", "Engine", "EngineSpec", "http_options", "make_engine",
           "parse_endpoints"]


def parse_endpoints(text: str | None) -> tuple[str, ...]:
    """`--endpoint URL[,URL...]` as a tuple of base URLs (no trailing slash)."""
    if not text:
        return ()
    return tuple(u.strip().rstrip("/") for u in text.split(",") if u.strip())


def http_options(backend: str, endpoint: str | None, max_inflight: int,
                 accept_processed_logprobs: bool, request_timeout: float = 600.0, retries: int = 2,
                 api_key: str | None = None) -> dict[str, Any]:
    """The HTTP fields of an `EngineSpec` from `--endpoint`, `--max-inflight`,
    `--accept-processed-logprobs`, `--request-timeout`, `--retries` and `--api-key`, checked
    without touching the network (one-line BtError)."""
    endpoints = parse_endpoints(endpoint)
    if backend in HTTP_BACKENDS and not endpoints:
        raise BtError(f"--backend {backend} needs --endpoint URL[,URL...] (e.g. http://127.0.0.1:8000)")
    if backend not in HTTP_BACKENDS and endpoints:
        raise BtError(f"--endpoint applies to --backend {' or '.join(HTTP_BACKENDS)}, not {backend}")
    for url in endpoints:
        if not url.startswith(("http://", "https://")) or len(url) < 10:
            raise BtError(f"--endpoint: expected http://HOST:PORT, got {url!r}")
    if len(set(endpoints)) != len(endpoints):
        raise BtError("--endpoint: the same URL is given twice")
    if max_inflight < 0:
        raise BtError(f"--max-inflight: expected 0 (the server's limit) or a positive integer, got {max_inflight}")
    if not (0 < request_timeout <= MAX_REQUEST_TIMEOUT_S):  # also refuses nan
        raise BtError(f"--request-timeout: expected seconds in (0, {MAX_REQUEST_TIMEOUT_S:g}], "
                      f"got {request_timeout:g}")
    if not 0 <= retries <= MAX_RETRIES:
        raise BtError(f"--retries: expected an integer in [0, {MAX_RETRIES}], got {retries}")
    if backend in HTTP_BACKENDS and api_key and (any(c.isspace() for c in api_key) or not api_key.isprintable()):
        raise BtError("--api-key: expected a key without spaces or control characters")
    return {"endpoints": endpoints, "max_inflight": max_inflight,
            "accept_processed_logprobs": bool(accept_processed_logprobs),
            "request_timeout_s": float(request_timeout), "retries": int(retries),
            "api_key": (api_key or None) if backend in HTTP_BACKENDS else None}


MAX_REQUEST_TIMEOUT_S = 86400.0  # a day: beyond it a hung server is not worth waiting for
MAX_RETRIES = 100


def make_engine(spec: EngineSpec, loaded: Any) -> Engine:
    """The backend `spec` names, for the model `loaded` (a `models.loading.LoadedModel`)."""
    if spec.backend not in BACKENDS:
        raise BtError(f"--backend: expected one of {', '.join(BACKENDS)}, got {spec.backend!r}")
    if spec.batch_size < 1:
        raise BtError("--batch-size must be >= 1")
    if spec.backend in HTTP_BACKENDS:
        if spec.kv_bits:
            raise BtError(f"--kv-bits applies to the MLX backends, not --backend {spec.backend} "
                          "(a server quantizes its KV cache by its own settings)")
        return _http_engine(spec, loaded)
    if spec.endpoints:
        raise BtError(f"--endpoint applies to --backend {' or '.join(HTTP_BACKENDS)}, not {spec.backend}")
    # Imported here, not at the top: the contract must stay importable without mlx (HTTP
    # backends, analysis code).
    from breakthrough.engine.mlx_backend import MlxEngine

    return MlxEngine(loaded.model, loaded.eos_ids, batch_size=spec.batch_size,
                     memory_budget_bytes=spec.memory_budget_bytes,
                     reuse_prefixes=spec.backend == "mlx", instrument=spec.instrument,
                     kv_bits=spec.kv_bits)


def _http_engine(spec: EngineSpec, loaded: Any) -> Engine:
    """An HTTP backend over `spec.endpoints`; connects (and checks the servers) now, so a run
    fails with one line before it writes anything."""
    from breakthrough.engine.http_backend import HttpEngine
    from breakthrough.engine.http_client import RetryPolicy

    vocab = int((getattr(loaded, "config", None) or {}).get("vocab_size") or len(loaded.tokenizer))
    return HttpEngine(spec.backend, spec.endpoints, loaded.eos_ids, vocab,
                      max_inflight=spec.max_inflight,
                      accept_processed_logprobs=spec.accept_processed_logprobs,
                      policy=RetryPolicy(attempts=spec.retries + 1, timeout_s=spec.request_timeout_s),
                      api_key=spec.api_key)
