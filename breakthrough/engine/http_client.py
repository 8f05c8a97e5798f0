"""One server endpoint: an httpx client with a cap on requests in flight and bounded retries.

Documented behaviour of one POST (`Endpoint.post`), with `RetryPolicy(attempts, backoff_s,
max_backoff_s)`:
  * a connection error (refused, reset, the server died mid-answer) is retried with exponential
    backoff; when every attempt failed this way the endpoint is considered down
    (`EndpointDown`): the fleet marks it dead and re-routes the request's cell;
  * a 5xx answer, a timeout (no complete answer within `timeout_s`) or a 2xx body that is not
    JSON or not the documented format is retried the same way; when every attempt failed the
    request fails (`RequestFailed`, which the engine turns into a result with
    finish_reason "error"); the endpoint stays in the fleet;
  * a 4xx answer is not retried (the request itself is wrong): `RequestFailed` at once.
Nothing here knows a wire format: `parse` turns a decoded body into the caller's value and
raises ValueError (e.g. `wire.MalformedResponse`) for a malformed one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


class EndpointDown(Exception):
    """Every attempt failed to reach the endpoint (connection refused / reset)."""


class RequestFailed(Exception):
    """The endpoint answered, but never with a usable result for this request."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 600.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (0-based)."""
        return min(self.max_backoff_s, self.backoff_s * (2 ** attempt))


class Endpoint:
    """A server base URL, its connection pool and its in-flight cap (`slots`)."""

    def __init__(self, url: str, policy: RetryPolicy, max_inflight: int = 16) -> None:
        self.url = url.rstrip("/")
        self.policy = policy
        self.alive = True
        self.info: dict[str, Any] = {}
        self.requests = 0
        self._client = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(policy.timeout_s, connect=min(10.0, policy.timeout_s)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,  # loopback / lab servers: never a proxy from the environment
        )
        self.set_inflight(max_inflight)

    def set_inflight(self, n: int) -> None:
        self.max_inflight = max(1, int(n))
        self.slots = threading.BoundedSemaphore(self.max_inflight)

    def close(self) -> None:
        self._client.close()

    def get_json(self, path: str, timeout_s: float = 10.0) -> Any:
        """One GET (startup probes): the decoded JSON, or an httpx/ValueError exception."""
        resp = self._client.get(path, timeout=timeout_s)
        resp.raise_for_status()
        return resp.json()

    def get_text(self, path: str, timeout_s: float = 10.0) -> str:
        resp = self._client.get(path, timeout=timeout_s)
        resp.raise_for_status()
        return resp.text

    def post(self, path: str, body: dict[str, Any], parse: Callable[[Any], T]) -> T:
        """POST `body` as JSON and return `parse(decoded answer)`, retrying as documented above."""
        last = ""
        connection_only = True
        for attempt in range(self.policy.attempts):
            if attempt:
                time.sleep(self.policy.delay(attempt - 1))
            try:
                with self.slots:
                    self.requests += 1
                    resp = self._client.post(path, json=body)
            except httpx.TimeoutException as exc:
                connection_only = False
                last = f"no answer within {self.policy.timeout_s:g}s ({type(exc).__name__})"
                continue
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError, httpx.CloseError) as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
                continue
            connection_only = False
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:
                raise RequestFailed(f"{self.url}{path}: HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                return parse(json.loads(resp.content))
            except ValueError as exc:  # JSONDecodeError and MalformedResponse are ValueErrors
                last = f"malformed answer ({exc})"
                continue
        where = f"{self.url}{path}"
        if connection_only:
            raise EndpointDown(f"{where}: {last} after {self.policy.attempts} attempts")
        raise RequestFailed(f"{where}: {last} after {self.policy.attempts} attempts")
