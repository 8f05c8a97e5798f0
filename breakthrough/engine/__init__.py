"""Generation backends behind one contract (`contract.Engine`); `make_engine` picks one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from breakthrough.errors import BtError

if TYPE_CHECKING:
    from breakthrough.engine.contract import BACKENDS, HTTP_BACKENDS, Engine, EngineSpec

__all__ = ["BACKENDS", "HTTP_BACKENDS", "Engine", "EngineSpec", "http_options", "make_engine",
           "parse_endpoints"]

_CONTRACT_NAMES = ("BACKENDS", "HTTP_BACKENDS", "Engine", "EngineSpec")


def __getattr__(name: str) -> Any:
    """The contract's names, imported on first use: `import breakthrough` runs this package's
    `blas` module, and the contract needs NumPy, which a command that never generates (`bt
    --help`, `bt status`) should not pay for at start-up."""
    if name in _CONTRACT_NAMES:
        from breakthrough.engine import contract

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_endpoints(text: str | None) -> tuple[str, ...]:
    """`--endpoint URL[,URL...]` as a tuple of base URLs (no trailing slash), each checked
    (`check_endpoint`); an empty element (`URL,`, `A,,B`) is a typo, refused naming it."""
    if text is None:
        return ()
    parts = [u.strip() for u in str(text).split(",")]
    if not any(parts):
        raise BtError("--endpoint: empty value; expected http://HOST:PORT[,http://HOST:PORT...]")
    for i, part in enumerate(parts, 1):
        if not part:
            raise BtError(f"--endpoint: element {i} of {text!r} is empty; expected "
                          "comma-separated URLs (e.g. http://10.0.0.1:8000,http://10.0.0.2:8000)")
    return tuple(check_endpoint(u.rstrip("/")) for u in parts)


def check_endpoint(url: str) -> str:
    """`url` when it is an http(s) URL with a host and, if given, a port in 1..65535; else one
    line naming --endpoint (a malformed URL such as `http://[::1` reached the user as
    httpx.InvalidURL)."""
    from urllib.parse import urlsplit

    def bad(why: str) -> BtError:
        return BtError(f"--endpoint: {url!r} is not a server URL ({why}); expected "
                       "http://HOST:PORT (e.g. http://127.0.0.1:8000)")

    if any(c.isspace() for c in url) or not url.isprintable():
        raise bad("it holds a space or a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        raise bad(str(exc)) from None
    if parts.scheme not in ("http", "https"):
        raise bad("the scheme must be http or https")
    if not parts.hostname:
        raise bad("no host")
    if port == 0:
        raise bad("port 0")
    if parts.query or parts.fragment:
        raise bad("a query or fragment")
    import httpx  # the client that will use it must read it too

    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise bad(str(exc)) from None
    return url


def http_options(backend: str, endpoint: str | None, max_inflight: int,
                 accept_processed_logprobs: bool, request_timeout: float = 600.0, retries: int = 2,
                 api_key: str | None = None) -> dict[str, Any]:
    """The HTTP fields of an `EngineSpec` from `--endpoint`, `--max-inflight`,
    `--accept-processed-logprobs`, `--request-timeout`, `--retries` and `--api-key`, checked
    without touching the network (one-line BtError)."""
    from breakthrough.engine.contract import HTTP_BACKENDS

    endpoints = parse_endpoints(endpoint)
    if backend in HTTP_BACKENDS and not endpoints:
        raise BtError(f"--backend {backend} needs --endpoint URL[,URL...] (e.g. http://127.0.0.1:8000)")
    if backend not in HTTP_BACKENDS and endpoints:
        raise BtError(f"--endpoint applies to --backend {' or '.join(HTTP_BACKENDS)}, not {backend}")
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
    from breakthrough.engine.contract import BACKENDS, HTTP_BACKENDS

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
