"""Who may reach `bt serve`: loopback by default; another address only with `--allow-remote`
and an API key (checked before the model loads); with a key, a bearer token on every route
but /health."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from breakthrough.engine.contract import check_api_key
from breakthrough.errors import BtError
from breakthrough.serve.errors import error_body


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, "localhost"); any
    other name or address, including 0.0.0.0 and a host name, is treated as remote."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_access(host: str, allow_remote: bool, api_key: str | None) -> None:
    """A bind other machines can reach needs the explicit opt-in and an API key (one line)."""
    check_api_key(api_key)
    if is_loopback(host):
        return
    if not allow_remote:
        raise BtError(
            f"--host {host}: other machines could reach this server; pass "
            "--allow-remote (with --api-key KEY or BT_SERVE_API_KEY) to listen there"
        )
    if not api_key:
        raise BtError(
            f"--host {host} --allow-remote needs an API key: --api-key KEY or "
            "BT_SERVE_API_KEY (clients send it with --api-key or BT_API_KEY)"
        )


class BearerAuth:
    """ASGI middleware: every route but /health needs `Authorization: Bearer KEY` (401)."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("path") != "/health":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                from starlette.responses import JSONResponse

                resp = JSONResponse(
                    error_body(401, "missing or wrong API key (send Authorization: Bearer KEY)"),
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)
