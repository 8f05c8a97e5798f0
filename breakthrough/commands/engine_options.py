"""The engine options' parsing (`--endpoint`, the HTTP backends' settings) for the commands that
generate; the values' ranges are checked by `engine.EngineSpec` itself."""

from __future__ import annotations

from typing import Any

from breakthrough.errors import BtError


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
            raise BtError(
                f"--endpoint: element {i} of {text!r} is empty; expected "
                "comma-separated URLs (e.g. http://10.0.0.1:8000,http://10.0.0.2:8000)"
            )
    return tuple(check_endpoint(u.rstrip("/")) for u in parts)


def check_endpoint(url: str) -> str:
    """`url` when it is an http(s) URL with a host and, if given, a port in 1..65535; else one
    line naming --endpoint (httpx's own InvalidURL, e.g. for `http://[::1`, is not a message
    for the user)."""
    from urllib.parse import urlsplit

    def bad(why: str) -> BtError:
        return BtError(
            f"--endpoint: {url!r} is not a server URL ({why}); expected "
            "http://HOST:PORT (e.g. http://127.0.0.1:8000)"
        )

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


def http_options(
    backend: str,
    endpoint: str | None,
    max_inflight: int,
    accept_processed_logprobs: bool,
    request_timeout: float,
    retries: int,
    api_key: str | None = None,
) -> dict[str, Any]:
    """The HTTP fields of an `EngineSpec` from `--endpoint`, `--max-inflight`,
    `--accept-processed-logprobs`, `--request-timeout`, `--retries` and `--api-key`, checked
    without touching the network (one-line BtError): the endpoints here, every value's range
    by `EngineSpec` itself (made here once, so that a mistake is refused before the command
    parses further)."""
    from breakthrough.engine.contract import HTTP_BACKENDS, EngineSpec  # numpy: not at start-up

    endpoints = parse_endpoints(endpoint)
    if backend in HTTP_BACKENDS and not endpoints:
        raise BtError(
            f"--backend {backend} needs --endpoint URL[,URL...] (e.g. http://127.0.0.1:8000)"
        )
    if len(set(endpoints)) != len(endpoints):
        raise BtError("--endpoint: the same URL is given twice")
    fields: dict[str, Any] = {
        "endpoints": endpoints,
        "max_inflight": max_inflight,
        "accept_processed_logprobs": bool(accept_processed_logprobs),
        "request_timeout_s": float(request_timeout),
        "retries": int(retries),
        "api_key": (api_key or None) if backend in HTTP_BACKENDS else None,
    }
    EngineSpec(backend=backend, **fields)
    return fields
