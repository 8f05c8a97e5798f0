"""A misbehaving vLLM for tests: the stdlib's ThreadingHTTPServer on 127.0.0.1 (a free port) in
a thread of the test, replaying the recorded vLLM fixture, shut down by `close()`.

Modes (`fake.mode`, changeable while it runs):
  "ok"                every POST answered;
  "500"               every generation POST answered HTTP 500;
  "malformed"         a truncated JSON body;
  "hang"              the answer comes after `hang_s` seconds;
  "flaky"             one 500, then ok;
  "busy"              429 with Retry-After: 0 (bt serve's full queue);
  "trickle"           the answer comes one byte every 0.2 s (each read is quick, the whole is not);
  "silent"            /v1/models answers, no POST is ever answered (until close: bounded);
  "silent-after-probe" the startup probes are answered (a one-token generation and the
                      prompt scores), every later POST is not.
`shift` moves the prompt scores away from the generation log-probs (a processed-logprobs
server). `corrupt` (a key of CORRUPTIONS, or None) alters every generation answer but the
startup probe's (and that one too when `corrupt_probe`), as a tampering proxy would: a value
that cannot be true of the model. `posts` counts generation POSTs; `auth` records each request's
Authorization header. `context` is the server's max_model_len, listed by /v1/models unless
`reports_context` is False (as a proxy or an older server may); a generation POST whose prompt
+ max_tokens exceed it gets vLLM's HTTP 400 (`context_refusal`)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIX = Path(__file__).parent / "fixtures"
COMPLETION = json.loads((FIX / "vllm_completion.json").read_text())
SILENT_BOUND_S = 120.0  # a silent POST is dropped after this even if close() is never called


def _score_answer(shift: float) -> dict:
    """prompt_logprobs whose last position agrees (shift 0) with the first generated step."""
    first = COMPLETION["choices"][0]["logprobs"]["top_logprobs"][0]
    last = {k.split(":")[1]: {"logprob": v + shift, "rank": 1} for k, v in first.items()}
    return {
        "choices": [
            {"index": 0, "text": "", "finish_reason": "length", "prompt_logprobs": [None, last]}
        ]
    }


def _alter(answer: dict, how: str) -> dict:
    """A deep copy of a completion answer with one value made impossible (CORRUPTIONS)."""
    answer = json.loads(json.dumps(answer))
    ch = answer["choices"][0]
    lp = ch["logprobs"]
    if how == "token-id":
        ch["token_ids"][1] = 10_000_000
        lp["tokens"][1] = "token_id:10000000"
    elif how == "negative-id":
        ch["token_ids"][2] = -1
        lp["tokens"][2] = "token_id:-1"
    elif how == "nan-logprob":
        lp["token_logprobs"][1] = float("nan")  # json.dumps writes NaN; Python's json reads it
    elif how == "positive-logprob":
        lp["token_logprobs"][1] = 5.0
    elif how == "top-logprob":
        lp["top_logprobs"][0]["token_id:4875"] = float("inf")
    elif how == "top-id":
        lp["top_logprobs"][0]["token_id:70000"] = -9.0
    elif how == "count":
        lp["token_logprobs"] = lp["token_logprobs"][:-1]
    elif how == "cached":
        answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 10**9}
    else:
        raise ValueError(how)
    return answer


CORRUPTIONS = (
    "token-id",
    "negative-id",
    "nan-logprob",
    "positive-logprob",
    "top-logprob",
    "top-id",
    "count",
    "cached",
)


def _one_token() -> dict:
    """The fixture's completion cut to its first token (the startup probe asks for one)."""
    ch = COMPLETION["choices"][0]
    lp = ch["logprobs"]
    first = {
        **ch,
        "finish_reason": "length",
        "token_ids": ch.get("token_ids", [])[:1],
        "logprobs": {k: v[:1] for k, v in lp.items()},
    }
    return {**COMPLETION, "choices": [first]}


def context_refusal(prompt: int, max_tokens: int, context: int) -> dict | None:
    """vLLM's (0.10 and later) HTTP 400 body for a request beyond its max_model_len, or None."""
    if prompt + max_tokens <= context:
        return None
    message = (
        f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
        f"maximum context length is {context} tokens and your request has {prompt} input "
        f"tokens ({max_tokens} > {context} - {prompt})."
    )
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


class FakeVllm:
    def __init__(
        self,
        shift: float = 0.0,
        mode: str = "ok",
        hang_s: float = 1.5,
        corrupt: str | None = None,
        context: int = 4096,
        reports_context: bool = True,
    ) -> None:
        self.mode, self.shift, self.hang_s, self.posts = mode, shift, hang_s, 0
        self.context, self.reports_context = context, reports_context
        self.corrupt, self.corrupt_probe = corrupt, False
        self.auth: list[str | None] = []
        self.closed = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except OSError:  # the client gave up (the timeouts under test): nothing to say
                    pass

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                fake.auth.append(self.headers.get("Authorization"))
                if self.path == "/v1/models":
                    model = {"id": "fake-model"}
                    if fake.reports_context:
                        model["max_model_len"] = fake.context
                    self._send(200, json.dumps({"data": [model]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.32.0"}')
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                fake.auth.append(self.headers.get("Authorization"))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                mode = fake.mode
                probe = body.get("max_tokens") == 1
                if mode == "silent" or (mode == "silent-after-probe" and not probe):
                    fake.posts += 1
                    fake.closed.wait(SILENT_BOUND_S)  # never answers while the test runs
                    return
                if body.get("prompt_logprobs"):
                    return self._send(200, json.dumps(_score_answer(fake.shift)).encode())
                fake.posts += 1
                refusal = context_refusal(len(body["prompt"]), body["max_tokens"], fake.context)
                if refusal is not None:
                    return self._send(400, json.dumps(refusal).encode())
                if mode == "silent-after-probe":
                    return self._send(200, json.dumps(_one_token()).encode())
                if mode == "flaky":
                    fake.mode, mode = "ok", "500"
                if mode == "500":
                    return self._send(500, b'{"error": "boom"}')
                if mode == "busy":
                    self.send_response(429)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    return self.wfile.write(b"{}")
                if mode == "malformed":
                    return self._send(200, b'{"choices": [ {"text": ')
                if mode == "hang":
                    fake.closed.wait(fake.hang_s)
                answer = (
                    COMPLETION
                    if fake.corrupt is None or (probe and not fake.corrupt_probe)
                    else _alter(COMPLETION, fake.corrupt)
                )
                if mode == "trickle":
                    return self._trickle(json.dumps(answer).encode())
                self._send(200, json.dumps(answer).encode())

            def _trickle(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(len(body)):
                        if fake.closed.wait(0.2):
                            return
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up and closed the connection
                    return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()
