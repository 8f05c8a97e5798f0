"""A running `bt serve` (installed console script, tiny model, 127.0.0.1, stopped by PID) keeps
its limits (issue 21, items 10 and 11): a prompt or max_tokens beyond the model's context is a
400 naming the limit, a body over 16 MiB a 413; with --batch-size 1 --max-queue 1 a third
request at once gets 429 with Retry-After; clients that disconnect have their rows dropped
(generation stops); it keeps serving good requests afterwards. With an API key every route but
/health needs the bearer token (401), and bt's client sends it (--api-key / BT_API_KEY). A
non-loopback --host without --allow-remote and a key is refused in one line before anything binds or
loads."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from bt_cli import assert_one_line_error, run_bt
from engine.serve_procs import bt_serve

from breakthrough.engine.http_backend import HttpEngine
from breakthrough.errors import BtError
from breakthrough.serve.auth import check_access, is_loopback
from breakthrough.serve.errors import BadRequest
from breakthrough.serve.parse import Served, parse_completion_request
from breakthrough.serve.routes import MAX_BODY_BYTES

KEY = "test-key-21"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPT = [1, 504, 1028, 2001, 77, 9, 310, 42]
CONTEXT = 8192  # the tiny model's max_position_embeddings


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path):
    with bt_serve(
        tiny_model_dir, batch_size=1, extra=("--max-queue", "1"), env={"BT_SERVE_API_KEY": KEY}
    ) as (proc,):
        assert "bearer token required" in proc.log[0] and KEY not in "".join(proc.log)
        yield proc


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
        yield c


def _until(cond, what: str, tries: int = 400, pause: float = 0.05):
    """Poll `cond()` until it is truthy (at most tries x pause seconds)."""
    for _ in range(tries):
        got = cond()
        if got:
            return got
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what}")


def test_requests_without_the_bearer_token_get_401(server, client) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = client.get("/v1/models", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
        assert r.json()["type"] == "AuthenticationError" and KEY not in r.text
        r = client.post(
            "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}, headers=headers
        )
        assert r.status_code == 401
    assert client.get("/health").status_code == 200  # a liveness probe needs no key
    assert client.get("/v1/models", headers=AUTH).json()["data"][0]["max_model_len"] == CONTEXT


@pytest.mark.parametrize(
    "body, words",
    [
        (
            {"prompt": [1] * 1_000_000, "max_tokens": 16},
            "1,000,000 tokens do not fit the model's context of 8,192",
        ),
        ({"prompt": [1] * CONTEXT, "max_tokens": 1}, "context of 8,192"),
        (
            {"prompt": PROMPT, "max_tokens": 10**12},
            "max_tokens: 1,000,000,000,000 after a 8-token prompt "
            "exceed the model's context of 8,192 tokens (at most 8,184)",
        ),
    ],
)
def test_prompts_beyond_the_context_are_400s(client, body, words) -> None:
    r = client.post("/v1/completions", json=body, headers=AUTH)
    assert r.status_code == 400 and words in r.json()["message"], r.text


@pytest.mark.parametrize(
    "body, words",
    [
        ({"max_tokens": 4}, "prompt: missing (a list of token ids, or a text the server"),
        ({"prompt": PROMPT, "max_tokens": -3}, "max_tokens: expected an integer of at least 1"),
    ],
)
def test_a_missing_prompt_or_a_bad_max_tokens_says_what_is_expected(client, body, words) -> None:
    """Issue 40: a body with no prompt said "expected a list of token ids" (text prompts work
    too), and max_tokens -3 "out of range [1, None]"."""
    served = client.get("/v1/models", headers=AUTH).json()["data"][0]["id"]
    r = client.post("/v1/completions", json={"model": served, **body}, headers=AUTH)
    assert r.status_code == 400 and words in r.json()["message"], r.text


def test_an_oversized_body_is_413(client) -> None:
    r = client.post(
        "/v1/completions",
        content=b" " * (MAX_BODY_BYTES + 1),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and "16,777,216 bytes" in r.json()["message"]


def test_the_context_rule_is_prompt_plus_max_tokens() -> None:
    body = {"prompt": PROMPT, "max_tokens": 8}
    parse_completion_request(body, Served(("m",), 49152, max_len=16))  # 8 + 8 fits exactly
    with pytest.raises(BadRequest, match="at most 8"):
        parse_completion_request({**body, "max_tokens": 9}, Served(("m",), 49152, max_len=16))
    parse_completion_request(
        {**body, "max_tokens": 10**6}, Served(("m",), 49152)
    )  # unknown: no cap


def test_the_lane_hint_is_read_and_checked() -> None:
    """`bt.lane` (GenRequest.lane, the branch index) reaches the engine's request; anything
    but an integer >= 0 is refused naming the field."""
    body = {"prompt": PROMPT, "max_tokens": 8}
    job, _ = parse_completion_request({**body, "bt": {"lane": 5}}, Served(("m",), 49152))
    assert job.request.lane == 5
    assert parse_completion_request(body, Served(("m",), 49152))[0].request.lane == 0
    for bad in (-1, "2", 1.5, True):
        with pytest.raises(BadRequest, match="bt.lane"):
            parse_completion_request({**body, "bt": {"lane": bad}}, Served(("m",), 49152))


def _long_request(url: str, max_tokens: int) -> socket.socket:
    """A raw POST whose answer the test never reads (it closes the socket: a client leaving)."""
    parts = urlsplit(url)
    body = json.dumps(
        {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "seed": 1}
    ).encode()
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def test_a_full_queue_is_429_and_gone_clients_stop_generating(server, client) -> None:
    metrics = lambda: server.metrics(AUTH)  # noqa: E731
    start = metrics()
    long = CONTEXT - len(PROMPT)
    socks = [_long_request(server.url, long)]
    _until(
        lambda: metrics()["bt_generation_tokens_total"] > start["bt_generation_tokens_total"],
        "the first row to generate",
    )
    socks.append(_long_request(server.url, long))  # waits in the queue (--max-queue 1)
    try:
        _until(lambda: metrics()["bt_requests_accepted"] == 2, "two accepted requests")
        r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}, headers=AUTH)
        assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
        assert "--max-queue 1" in r.json()["message"]
    finally:
        for s in socks:
            s.close()
    _until(
        lambda: (
            metrics()["bt_requests_cancelled_total"] == start["bt_requests_cancelled_total"] + 2
        ),
        "both requests to be cancelled",
    )
    _until(lambda: metrics()["bt_requests_accepted"] == 0, "nothing accepted")

    def settled() -> float | None:  # the generated-token count stopped moving
        a = metrics()["bt_generation_tokens_total"]
        time.sleep(0.3)
        return a if metrics()["bt_generation_tokens_total"] == a else None

    total = _until(settled, "generation to stop", tries=50, pause=0.0)
    assert (
        total - start["bt_generation_tokens_total"] < long
    )  # the row was cut, the queued one never ran
    assert metrics()["bt_requests_total"] == start["bt_requests_total"]  # no result was produced
    # ... and the server goes on answering.
    r = client.post(
        "/v1/completions",
        json={"prompt": PROMPT, "max_tokens": 4, "return_token_ids": True},
        headers=AUTH,
    )
    assert r.status_code == 200 and 1 <= len(r.json()["choices"][0]["token_ids"]) <= 4


def test_bt_clients_need_and_send_the_key(
    tmp_path: Path, tiny_model, tiny_model_dir: Path, server
) -> None:
    vocab = int(tiny_model.config["vocab_size"])
    with pytest.raises(BtError, match="HTTP 401: missing or wrong API key; pass --api-key"):
        HttpEngine("vllm", [server.url], tiny_model.eos_ids, vocab)
    proc = run_bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path,
        "--run",
        "r",
        "--max-tokens",
        "8",
        "--backend",
        "vllm",
        "--endpoint",
        server.url,
        timeout=180,
        BT_API_KEY=KEY,
    )
    assert proc.returncode == 0, proc.stderr
    assert KEY not in proc.stdout + proc.stderr


def test_a_non_loopback_bind_needs_allow_remote_and_a_key(tmp_path: Path) -> None:
    absent = tmp_path / "absent-model"  # refused before the model would be looked for
    res = run_bt("serve", "--host", "0.0.0.0", "--port", "0", "--model", absent, timeout=60)
    assert_one_line_error(res, 2, "--host 0.0.0.0", "--allow-remote")
    res = run_bt(
        "serve",
        "--host",
        "example.org",
        "--port",
        "0",
        "--model",
        absent,
        "--allow-remote",
        timeout=60,
        BT_SERVE_API_KEY="",
    )
    assert_one_line_error(res, 2, "--host example.org", "needs an API key", "BT_SERVE_API_KEY")
    with pytest.raises(BtError, match="--api-key"):
        check_access("0.0.0.0", True, "two words")
    check_access("0.0.0.0", True, KEY)  # both given: allowed (not bound here)
    check_access("127.0.0.1", False, None)


def test_loopback_names() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org", ""))
