"""The engine options' parsing (`--endpoint`, the HTTP backends' settings as one `HttpOptions`)
for the commands that generate; the values' ranges are checked by `engine.EngineSpec` itself."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from breakthrough.errors import BtError

if TYPE_CHECKING:
    from breakthrough.engine.contract import EngineSpec


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


@dataclass(frozen=True)
class HttpOptions:
    """`--backend` and the HTTP backends' options (`--endpoint`, `--max-inflight`,
    `--accept-processed-logprobs`, `--request-timeout`, `--retries`, `--api-key`) of a command
    that generates (`bt base`, `bt sample`, `bt continue`), as typed: one value instead of seven
    arguments, declared once (`with_http_options`). `check()` refuses a mistake in one line
    without touching the network; `engine(...)` is the `EngineSpec` they name."""

    backend: str
    endpoint: str | None
    max_inflight: int
    accept_processed_logprobs: bool
    request_timeout: float
    retries: int
    api_key: str | None = field(default=None, repr=False)  # never shown

    def fields(self) -> dict[str, Any]:
        """The HTTP fields of an `EngineSpec`, checked (one-line BtError): the endpoints here,
        every value's range by `EngineSpec` itself (made here once, so that a mistake is
        refused before the command parses further)."""
        from breakthrough.engine.contract import HTTP_BACKENDS, EngineSpec  # numpy: not at start

        endpoints = parse_endpoints(self.endpoint)
        if self.backend in HTTP_BACKENDS and not endpoints:
            raise BtError(
                f"--backend {self.backend} needs --endpoint URL[,URL...] "
                "(e.g. http://127.0.0.1:8000)"
            )
        if len(set(endpoints)) != len(endpoints):
            raise BtError("--endpoint: the same URL is given twice")
        fields: dict[str, Any] = {
            "endpoints": endpoints,
            "max_inflight": self.max_inflight,
            "accept_processed_logprobs": bool(self.accept_processed_logprobs),
            "request_timeout_s": float(self.request_timeout),
            "retries": int(self.retries),
            "api_key": (self.api_key or None) if self.backend in HTTP_BACKENDS else None,
        }
        EngineSpec(backend=self.backend, **fields)
        return fields

    def check(self) -> None:
        """Refuse a mistake in these options now (before the command reads further)."""
        self.fields()

    def engine(self, batch_size: int, memory_budget_bytes: int | None = None) -> EngineSpec:
        """The engine these options name, at `batch_size` rows (and `--memory-gb`'s bytes)."""
        from breakthrough.engine.contract import EngineSpec  # numpy: not at `bt` start-up

        return EngineSpec(
            backend=self.backend,
            batch_size=batch_size,
            memory_budget_bytes=memory_budget_bytes,
            **self.fields(),
        )


def _http_parameters(kind: Any) -> list[inspect.Parameter]:
    """The typer parameters `HttpOptions` is built from, in its fields' order (their help is
    `commands.options`'s), of parameter kind `kind`."""
    from breakthrough.commands.options import (
        api_key_option,
        backend_option,
        endpoint_option,
        max_inflight_option,
        processed_logprobs_option,
        request_timeout_option,
        retries_option,
    )

    declared = (
        ("backend", str, backend_option()),
        ("endpoint", str | None, endpoint_option()),
        ("max_inflight", int, max_inflight_option()),
        ("accept_processed_logprobs", bool, processed_logprobs_option()),
        ("request_timeout", float, request_timeout_option()),
        ("retries", int, retries_option()),
        ("api_key", str | None, api_key_option()),
    )
    return [inspect.Parameter(n, kind, default=d, annotation=t) for n, t, d in declared]


HTTP_PARAMETER = "http"


def with_http_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with its `http: HttpOptions` parameter shown to typer as the seven options
    (`--backend` ... `--api-key`, in that place of the option list) and handed to it as one
    `HttpOptions`: the options are declared once for every command that generates. typer passes
    every option by name, so the commands take keyword-only parameters (`http` needs no
    default)."""
    signature = inspect.signature(command)
    if HTTP_PARAMETER not in signature.parameters:
        raise TypeError(f"{command.__name__} has no {HTTP_PARAMETER!r} parameter")
    options = _http_parameters(signature.parameters[HTTP_PARAMETER].kind)
    names = [p.name for p in options]
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        params.extend(options if param.name == HTTP_PARAMETER else [param])

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        http = HttpOptions(**{name: kwargs.pop(name) for name in names})
        return command(**kwargs, **{HTTP_PARAMETER: http})

    annotations = {k: v for k, v in command.__annotations__.items() if k != HTTP_PARAMETER}
    wrapper.__annotations__ = annotations | {p.name: p.annotation for p in options}
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper
