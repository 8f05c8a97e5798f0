"""One server endpoint: an httpx client with a cap on requests in flight and bounded retries.

Documented behaviour of one POST (`Endpoint.post`), with `RetryPolicy(attempts, backoff_s,
max_backoff_s, timeout_s)` (`--retries N` is attempts N + 1, `--request-timeout` is timeout_s):
  * every request has a deadline on each endpoint, `policy.deadline_s` after it starts: all its
    attempts, the back-offs between them and the wait for a free in-flight slot fit in it (a
    request the fleet re-routes from a dead endpoint starts afresh there). An attempt gets
    at most `timeout_s` (connecting, sending, and each read of the answer, and never more
    than what is left of the deadline), and the answer is read as a stream so a server that
    trickles bytes is cut at the first read that ends past the attempt's time (so a request
    ends at most one read after its deadline); no attempt or back-off starts past it;
  * a connection error (refused, reset, the server died mid-answer) is retried with exponential
    backoff; when every attempt failed this way the endpoint is considered down
    (`EndpointDown`): the fleet marks it dead and re-routes the request's cell;
  * a 5xx or 429 answer (a busy server; its Retry-After is honoured within the deadline), a
    timeout or a 2xx body that is not JSON, not the documented format or holds values that
    cannot be true (`parse` decides: wire.check_values) is retried the same way; when every
    attempt failed the request fails (`RequestFailed`, which the engine turns into a result
    with finish_reason "error"); the endpoint stays in the fleet;
  * any other 4xx answer is not retried (the request itself is wrong): `RequestFailed` at once,
    carrying the status and the body (the engine reads a context overflow from it).
With an API key every request carries `Authorization: Bearer KEY` (the key is never logged or
put in a message). Nothing here knows a wire format: `parse` turns a decoded body into the
caller's value and raises ValueError (e.g. `wire.MalformedResponse`) for a malformed one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from breakthrough.engine.http_limits import REQUEST_TIMEOUT_S, RETRIES

T = TypeVar("T")


class EndpointDown(Exception):
    """Every attempt failed to reach the endpoint (connection refused / reset)."""


class RequestFailed(Exception):
    """The endpoint answered, but never with a usable result for this request. A refusal that
    is not retried (a 4xx) keeps its `status` and `body` (at most `REFUSAL_BODY_CHARS`), so the
    caller can tell a refusal no rerun changes (a context overflow) from the others."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


REFUSAL_BODY_CHARS = 4096


RETRIED_4XX = (
    408,
    429,
)  # request timeout, too many requests: the server is busy, not the request bad


@dataclass(frozen=True)
class RetryPolicy:
    """How long one request may take and how often it is tried (`--request-timeout`,
    `--retries`)."""

    attempts: int = RETRIES + 1
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = REQUEST_TIMEOUT_S

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (0-based)."""
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))

    @property
    def deadline_s(self) -> float:
        """The most one request may take on one endpoint: every attempt's timeout plus the
        back-offs between them."""
        return self.attempts * self.timeout_s + sum(self.delay(i) for i in range(self.attempts - 1))


class _Late(Exception):
    """The answer was still arriving when the attempt's time ran out."""


class Endpoint:
    """A server base URL, its connection pool and its in-flight cap (`slots`)."""

    def __init__(
        self, url: str, policy: RetryPolicy, max_inflight: int = 16, api_key: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.policy = policy
        self.alive = True
        self.info: dict[str, Any] = {}
        self.requests = 0
        self._client = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(policy.timeout_s, connect=min(10.0, policy.timeout_s)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            trust_env=False,  # loopback / lab servers: never a proxy from the environment
        )
        self.set_inflight(max_inflight)

    def set_inflight(self, n: int) -> None:
        self.max_inflight = max(1, int(n))
        self.slots = threading.BoundedSemaphore(self.max_inflight)

    def close(self) -> None:
        self._client.close()

    def _probe_timeout(self, timeout_s: float) -> float:
        return min(timeout_s, self.policy.timeout_s)

    def get_json(self, path: str, timeout_s: float = 10.0) -> Any:
        """One GET (startup probes, at most `timeout_s` and never more than the policy's
        timeout): the decoded JSON, or an httpx/ValueError exception."""
        resp = self._client.get(path, timeout=self._probe_timeout(timeout_s))
        resp.raise_for_status()
        return resp.json()

    def get_text(self, path: str, timeout_s: float = 10.0) -> str:
        resp = self._client.get(path, timeout=self._probe_timeout(timeout_s))
        resp.raise_for_status()
        return resp.text

    def _attempt(
        self, path: str, body: dict[str, Any], budget: float
    ) -> tuple[int, bytes, str | None]:
        """One POST within `budget` seconds: (status, body bytes, Retry-After header)."""
        ends = time.monotonic() + budget
        timeout = httpx.Timeout(budget, connect=min(10.0, budget))
        with self._client.stream("POST", path, json=body, timeout=timeout) as resp:
            chunks = []
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > ends:
                    raise _Late()
            return resp.status_code, b"".join(chunks), resp.headers.get("retry-after")

    def post(self, path: str, body: dict[str, Any], parse: Callable[[Any], T]) -> T:
        """POST `body` as JSON and return `parse(decoded answer)`, retrying as documented above."""
        policy = self.policy
        deadline = time.monotonic() + policy.deadline_s
        last = ""
        connection_only = True
        tried = 0
        wait_s = 0.0
        for attempt in range(policy.attempts):
            if attempt:
                if time.monotonic() + wait_s >= deadline:
                    break
                time.sleep(wait_s)
            wait_s = policy.delay(attempt)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not self.slots.acquire(timeout=left):
                connection_only = False
                last = f"no free in-flight slot within the {policy.deadline_s:g}s deadline"
                break
            tried += 1
            try:
                self.requests += 1
                status, content, retry_after = self._attempt(
                    path, body, min(policy.timeout_s, max(0.001, deadline - time.monotonic()))
                )
            except (httpx.TimeoutException, _Late) as exc:
                connection_only = False
                how = "the answer still arriving" if isinstance(exc, _Late) else type(exc).__name__
                last = f"no answer within {policy.timeout_s:g}s ({how})"
                continue
            except (
                httpx.ConnectError,
                httpx.RemoteProtocolError,
                httpx.ReadError,
                httpx.WriteError,
                httpx.CloseError,
            ) as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
                continue
            finally:
                self.slots.release()
            connection_only = False
            text = content[:300].decode("utf-8", "replace")
            if status >= 500 or status in RETRIED_4XX:
                last = f"HTTP {status}: {text[:200]}"
                wait_s = max(wait_s, min(_seconds(retry_after), policy.max_backoff_s))
                continue
            if status >= 400:
                raise RequestFailed(
                    f"{self.url}{path}: HTTP {status}: {text}",
                    status,
                    content[:REFUSAL_BODY_CHARS].decode("utf-8", "replace"),
                )
            try:
                return parse(json.loads(content))
            except ValueError as exc:  # JSONDecodeError and MalformedResponse are ValueErrors
                last = f"malformed answer ({exc})"
                continue
        where = f"{self.url}{path}"
        said = f"{last} after {tried} attempt{'' if tried == 1 else 's'}"
        if connection_only and tried:
            raise EndpointDown(f"{where}: {said}")
        raise RequestFailed(f"{where}: {said} (deadline {policy.deadline_s:g}s)")


def _seconds(retry_after: str | None) -> float:
    """A Retry-After header in seconds (0 when absent or an HTTP date)."""
    try:
        return max(0.0, float(retry_after)) if retry_after else 0.0
    except ValueError:
        return 0.0
