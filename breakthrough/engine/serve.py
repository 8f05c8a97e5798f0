"""`bt serve`: the local MLX engine behind vLLM's `/v1/completions`, so several Macs form a fleet
with no other software (`bt base|continue --backend vllm --endpoint A,B`).

One generation thread owns the model and runs ONE long `MlxEngine.generate` call whose request
source is the queue of HTTP requests (continuous batching across clients: a request that
arrives while others decode joins the batch at the next step; the source says "nothing ready"
while rows are in flight and blocks only when none is). The HTTP side is starlette on uvicorn.

Request (vLLM's fields): `prompt` (a list of token ids; text prompts are refused), `max_tokens`,
`temperature`, `top_p`, `top_k`, `min_p`, `seed` (the row's own hashed-Gumbel randomness: exactly the
local MLX backend's tokens for the same seed), `n` = 1, `logprobs` (<= 20), `stop_token_ids`,
`prompt_logprobs` (scores the prompt), `return_tokens_as_token_ids`, `return_token_ids`. And
`bt`, what vLLM's format cannot carry: `stop_sequences` (multi-token, as token ids), the reuse
hints `shared_prefix` {key, ids, starts} (one prefill per cell, cut back per request) and
`key` / `keep_state` / `follows` (the answer phase continues the reasoning phase's live cache).
Answer: vLLM's completion object; each choice also has `bt` with the exact full-distribution
`entropies`, the `sampling_entropies`, bt's `finish_reason` and `cached_tokens`; the usage has
`prompt_tokens_details.cached_tokens`. GET /v1/models, /version (says "server": "bt-serve",
its limit `max_running_requests`), /health, /metrics (Prometheus text), /bt/cells (requests per
cell: what a fleet routed here).

Limits, so one client cannot stop the server for the others: a prompt or prompt + max_tokens
beyond the model's context (`--max-model-len`, default the model's own) is a 400 naming the
limit, a body over 16 MiB a 413 (read no further); at most `batch_size + max_queue` requests are accepted at once, more get 429 with
Retry-After (bt's client retries it); a client that disconnects has its row dropped at the next
step. Access: a non-loopback bind needs `allow_remote` and an API key (checked before the model
loads); with a key every route but /health needs `Authorization: Bearer KEY`, else 401."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import itertools
import json
import queue
import socket
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

from breakthrough.engine.contract import GenRequest, GenResult, SharedPrefix
from breakthrough.errors import BtError
from breakthrough.protocol import MAX_TOKENS, Sampling

MAX_TOP = 20
MAX_QUEUE = 64  # requests accepted beyond the batch's rows (`bt serve --max-queue`)
DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
MAX_BODY_BYTES = 16 * 2**20  # a request body is read up to this (413 beyond): ~2M token ids


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
    if api_key is not None and (not api_key or any(c.isspace() for c in api_key)
                                or not api_key.isprintable()):
        raise BtError("--api-key: expected a non-empty key without spaces or control characters")
    if is_loopback(host):
        return
    if not allow_remote:
        raise BtError(f"--host {host}: other machines could reach this server; pass "
                      "--allow-remote (with --api-key KEY or BT_SERVE_API_KEY) to listen there")
    if not api_key:
        raise BtError(f"--host {host} --allow-remote needs an API key: --api-key KEY or "
                      "BT_SERVE_API_KEY (clients send it with --api-key or BT_API_KEY)")


class BadRequest(ValueError):
    """The request cannot be served as sent (HTTP 400, one line naming the field)."""


@dataclass
class Job:
    """One queued unit of work for the generation thread."""

    future: concurrent.futures.Future
    request: GenRequest | None = None  # generate
    score_ids: list[int] | None = None  # or: score a prompt
    score_top: int = 0
    client_key: str | None = None
    client_follows: str | None = None
    cell: str = ""
    extras: dict[str, Any] = field(default_factory=dict)
    cancelled: bool = False  # the client went away (MlxServer.cancel)
    engine_key: str | None = None  # the engine's key once the generation thread took it


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


class MlxServer:
    """The generation thread and what it counts; `submit(job)` returns a Future."""

    def __init__(self, loaded: Any, batch_size: int = 8, kept_states: int = 4096,
                 max_queue: int = MAX_QUEUE) -> None:
        from breakthrough.engine.mlx_backend import MlxEngine

        self.loaded = loaded
        self.batch_size = batch_size
        self.max_queue = max_queue
        self.accepted = 0  # requests taken and not yet answered (the HTTP side counts them)
        self.refused_busy = 0
        self.cancelled = 0
        self._lock = threading.Lock()
        self.engine = MlxEngine(loaded.model, loaded.eos_ids, batch_size=batch_size,
                                kept_states=4 * batch_size, shared_prefixes=max(4, batch_size))
        self.engine.top_logprobs = MAX_TOP
        self.vocab = int(loaded.config.get("vocab_size") or len(loaded.tokenizer))
        self._q: queue.Queue[Job | None] = queue.Queue()
        self._ids = itertools.count()
        self._kept: OrderedDict[str, str] = OrderedDict()  # client key -> engine key of a kept row
        self._max_kept = kept_states
        self._inflight = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.cells: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._loop, name="bt-serve-mlx", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> concurrent.futures.Future:
        self._q.put(job)
        return job.future

    def stop(self) -> None:
        self._q.put(None)

    def full(self) -> bool:
        return self.accepted >= self.batch_size + self.max_queue

    def cancel(self, job: Job) -> None:
        """The client of `job` went away: drop it from the queue, or its row from the batch."""
        with self._lock:
            job.cancelled = True
            key = job.engine_key
            self.cancelled += 1
        if key is not None:
            self.engine.cancel(key)

    # -- the generation thread -----------------------------------------------------------------
    def _source(self, jobs: dict[str, Job]):
        while True:
            try:
                job = self._q.get(block=self._inflight == 0)
            except queue.Empty:
                yield None
                continue
            if job is None:
                return
            if job.score_ids is not None:
                try:
                    job.future.set_result(self._score(job.score_ids, job.score_top))
                except Exception as exc:  # noqa: BLE001 - reported to the client as a 500
                    job.future.set_exception(exc)
                continue
            key = f"r{next(self._ids)}"
            with self._lock:
                if job.cancelled:  # its client left while it waited
                    job.future.set_result(None)
                    continue
                job.engine_key = key
            follows = self._kept.pop(job.client_follows, None) if job.client_follows else None
            jobs[key] = job
            self._inflight += 1
            yield replace(job.request, key=key, follows=follows)

    def _loop(self) -> None:
        while True:
            jobs: dict[str, Job] = {}
            try:
                for res in self.engine.generate(self._source(jobs)):
                    self._inflight -= 1
                    job = jobs.pop(res.key)
                    if res.finish_reason == "error":  # cancelled: nobody waits for it
                        job.future.set_result(None)
                        continue
                    if job.request.keep_state and job.client_key:
                        self._kept[job.client_key] = res.key
                        while len(self._kept) > self._max_kept:
                            self._kept.popitem(last=False)
                    self.requests += 1
                    self.prompt_tokens += res.prompt_tokens
                    self.cached_tokens += res.cached_tokens
                    self.cells[job.cell] += 1
                    job.future.set_result(res)
                return  # the source ended: stop() was called
            except Exception as exc:  # noqa: BLE001 - fail the rows in flight, keep serving
                for job in jobs.values():
                    if not job.future.done():
                        job.future.set_exception(exc)
                self._inflight = 0

    def _score(self, ids: list[int], top: int) -> list[dict[int, tuple[float, int]] | None]:
        """Prompt log-probs as vLLM reports them: per position (None first) the position's own
        token and the `top` most likely ones, each with (logprob, rank)."""
        import mlx.core as mx

        logits = self.engine.model(mx.array([ids]))[0].astype(mx.float32)
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        out: list[dict[int, tuple[float, int]] | None] = [None]
        for i in range(1, len(ids)):
            row = lp[i - 1]
            tok = ids[i]
            own = float(row[tok].item())
            rank = int(mx.sum(row > row[tok]).item()) + 1
            entry = {tok: (own, rank)}
            if top > 0:
                idx = mx.argsort(-row)[:top].tolist()
                for r, t in enumerate(idx, start=1):
                    entry.setdefault(int(t), (float(row[t].item()), r))
            out.append(entry)
        return out


# -- requests and answers ----------------------------------------------------------------------
def _int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    v = body.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{name}: expected an integer, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise BadRequest(f"{name}: {v} is out of range [{lo}, {hi}]")
    return v


def _float(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= float(v) <= hi:
        raise BadRequest(f"{name}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _ids(v: Any, name: str, vocab: int, allow_empty: bool = False) -> list[int]:
    if not isinstance(v, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise BadRequest(f"{name}: expected a list of token ids (bt serve takes no text prompts)")
    if not v and not allow_empty:
        raise BadRequest(f"{name}: empty")
    bad = [t for t in v if not 0 <= t < vocab]
    if bad:
        raise BadRequest(f"{name}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    return list(v)


def parse_completion_request(body: Any, model_names: tuple[str, ...], vocab: int,
                             max_len: int = 0) -> tuple[Job, dict]:
    """A `/v1/completions` body as a Job (or BadRequest naming the field); the dict holds the
    answer options (logprobs, token-id keys, prompt_logprobs). With `max_len` (the context),
    prompt + max_tokens must fit in it, as vLLM's max_model_len."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in model_names:
        raise BadRequest(f"model: {model!r} is not served here (serving {model_names[0]!r})")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if max_len and isinstance(prompt, list) and len(prompt) >= max_len:  # before reading the ids
        raise BadRequest(f"prompt: {len(prompt):,} tokens do not fit the model's context of "
                         f"{max_len:,} tokens (prompt + max_tokens must fit)")
    prompt = _ids(prompt, "prompt", vocab)
    for name, ok in (("n", lambda v: v in (None, 1)), ("best_of", lambda v: v in (None, 1)),
                     ("stream", lambda v: not v), ("echo", lambda v: not v),
                     ("use_beam_search", lambda v: not v), ("stop", lambda v: not v)):
        if not ok(body.get(name)):
            raise BadRequest(f"{name}: {body.get(name)!r} is not supported by bt serve"
                             + (" (use stop_token_ids or bt.stop_sequences)" if name == "stop" else ""))
    sampling = Sampling(
        temperature=_float(body, "temperature", 1.0, 0.0, 100.0),
        top_p=_float(body, "top_p", 1.0, 1e-9, 1.0),
        top_k=max(0, _int(body, "top_k", 0, -1, None) or 0),
        min_p=_float(body, "min_p", 0.0, 0.0, 1.0),
    )
    stops = [(t,) for t in _ids(body.get("stop_token_ids") or [], "stop_token_ids", vocab, True)]
    bt = body.get("bt") or {}
    if not isinstance(bt, dict):
        raise BadRequest("bt: expected an object")
    for i, s in enumerate(bt.get("stop_sequences") or []):
        stops.append(tuple(_ids(s, f"bt.stop_sequences[{i}]", vocab)))
    shared = None
    if bt.get("shared_prefix") is not None:
        sp = bt["shared_prefix"]
        if not isinstance(sp, dict) or not isinstance(sp.get("key"), str):
            raise BadRequest("bt.shared_prefix: expected {key, ids, starts}")
        if max_len and isinstance(sp.get("ids"), list) and len(sp["ids"]) > max_len:
            raise BadRequest(f"bt.shared_prefix.ids: {len(sp['ids']):,} tokens exceed the model's "
                             f"context of {max_len:,} tokens")
        shared = SharedPrefix(key=sp["key"], ids=tuple(_ids(sp.get("ids"), "bt.shared_prefix.ids", vocab)),
                              starts=tuple(_ids(sp.get("starts") or [], "bt.shared_prefix.starts",
                                                len(sp.get("ids") or []) + 1, True)))
    client_key = bt.get("key")
    follows = bt.get("follows")
    for name, v in (("bt.key", client_key), ("bt.follows", follows)):
        if v is not None and not isinstance(v, str):
            raise BadRequest(f"{name}: expected a string")
    max_tokens = _int(body, "max_tokens", 16, 1, None)
    if max_len and len(prompt) + max_tokens > max_len:
        raise BadRequest(f"max_tokens: {max_tokens:,} after a {len(prompt):,}-token prompt exceed "
                         f"the model's context of {max_len:,} tokens (at most {max_len - len(prompt):,})")
    req = GenRequest(
        key="pending", prompt=prompt, max_tokens=max_tokens,
        seed=_int(body, "seed", 0, None, None) & 0xFFFFFFFF, stop_sequences=tuple(stops),
        sampling=sampling, shared_prefix=shared, keep_state=bool(bt.get("keep_state")),
    )
    cell = str(bt.get("cell") or (shared.key if shared else ""))
    job = Job(future=concurrent.futures.Future(), request=req, client_key=client_key,
              client_follows=follows, cell=cell)
    opts = {
        "logprobs": _int(body, "logprobs", None, 0, MAX_TOP),
        "as_ids": bool(body.get("return_tokens_as_token_ids")),
        "token_ids": bool(body.get("return_token_ids")),
        "prompt_logprobs": _int(body, "prompt_logprobs", None, 0, MAX_TOP),
    }
    return job, opts


def render_completion(res: GenResult, req: GenRequest, opts: dict, model: str, tokenizer: Any,
                      eos_ids: frozenset[int], scored: list | None) -> dict[str, Any]:
    """vLLM's completion object for one result, with the `bt` extras."""
    from breakthrough.models.tokens import decode

    pieces = [decode(tokenizer, [t]) for t in res.tokens]
    name = (lambda t: f"token_id:{t}") if opts["as_ids"] else (lambda t: decode(tokenizer, [t]))
    logprobs = None
    if opts["logprobs"] is not None:
        k = opts["logprobs"]
        tops = []
        for i, tok in enumerate(res.tokens):
            entry = {}
            if res.top_ids is not None and k > 0:
                for t, v in zip(res.top_ids[i][:k].tolist(), res.top_logprobs[i][:k].tolist()):
                    entry[name(int(t))] = float(v)
            entry.setdefault(name(tok), float(res.logprobs[i]))
            tops.append(entry)
        offsets, pos = [], 0
        for p in pieces:
            offsets.append(pos)
            pos += len(p)
        logprobs = {"text_offset": offsets, "token_logprobs": [float(x) for x in res.logprobs],
                    "tokens": [name(t) for t in res.tokens], "top_logprobs": tops}
    if res.finish_reason == "length":
        finish, stop_reason = "length", None
    elif res.finish_reason == "eos":
        finish, stop_reason = "stop", None
    else:
        finish = "stop"
        matched = [s for s in req.stop_sequences if tuple(res.tokens[-len(s):]) == tuple(s)]
        stop_reason = (matched[0][0] if len(matched[0]) == 1 else list(matched[0])) if matched else None
    choice: dict[str, Any] = {
        "index": 0, "text": "".join(pieces), "logprobs": logprobs, "finish_reason": finish,
        "stop_reason": stop_reason,
        "prompt_logprobs": None if scored is None else [
            None if pos is None else {str(t): {"logprob": lp, "rank": rank, "decoded_token": name(t)}
                                      for t, (lp, rank) in pos.items()} for pos in scored],
        "bt": {"finish_reason": res.finish_reason,
               "entropies": [float(x) for x in res.entropies],
               "sampling_entropies": [float(x) for x in res.sampling_entropies],
               "cached_tokens": int(res.cached_tokens)},
    }
    if opts["token_ids"]:
        choice["token_ids"] = [int(t) for t in res.tokens]
    n_prompt = len(req.prompt)
    return {"id": f"cmpl-bt-{res.key}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(res.tokens),
                      "total_tokens": n_prompt + len(res.tokens),
                      "prompt_tokens_details": {"cached_tokens": int(res.cached_tokens)}}}


class _ClientGone(Exception):
    """The client disconnected while its request waited or generated."""


ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 413: "PayloadTooLargeError",
               429: "TooManyRequestsError"}


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

                resp = JSONResponse({"object": "error", "message": "missing or wrong API key "
                                     "(send Authorization: Bearer KEY)", "type": ERROR_TYPES[401],
                                     "code": 401}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(server: MlxServer, model_name: str, *, api_key: str | None = None,
              max_model_len: int = 0):
    """The starlette application around `server`: prompts checked against `max_model_len`
    (0: the model's own context), a bearer token required when `api_key` is given."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    loaded = server.loaded
    names = tuple(dict.fromkeys((model_name, loaded.alias, loaded.model_id)))
    max_len = int(max_model_len or loaded.config.get("max_position_embeddings") or 0)

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        kind = ERROR_TYPES.get(status, "InternalServerError")
        return JSONResponse({"object": "error", "message": message, "type": kind, "code": status},
                            status_code=status, headers=headers)

    async def answer(job: Job, request: Request) -> Any:
        """The job's result, waited for while the client is still connected."""
        fut = asyncio.wrap_future(server.submit(job))
        while True:
            done, _ = await asyncio.wait({fut}, timeout=DISCONNECT_POLL_S)
            if done:
                return fut.result()
            if await request.is_disconnected():
                server.cancel(job)
                raise _ClientGone()

    async def read_json(request: Request) -> Any:
        """The JSON body, read at most MAX_BODY_BYTES far (None beyond: 413)."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
        return json.loads(b"".join(chunks))

    async def completions(request: Request):
        try:
            body = await read_json(request)
        except ValueError:
            return error(400, "the body is not JSON")
        if body is None:
            return error(413, f"the body exceeds {MAX_BODY_BYTES:,} bytes")
        try:
            job, opts = parse_completion_request(body, names, server.vocab, max_len)
        except BadRequest as exc:
            return error(400, str(exc))
        if server.full():
            server.refused_busy += 1
            return error(429, f"bt serve is busy: {server.accepted} requests accepted (batch "
                         f"{server.batch_size} + --max-queue {server.max_queue}); retry later",
                         headers={"Retry-After": "1"})
        server.accepted += 1  # the event loop's thread only: no lock needed
        try:
            scored = None
            if opts["prompt_logprobs"] is not None:
                sjob = Job(future=concurrent.futures.Future(), score_ids=list(job.request.prompt),
                           score_top=opts["prompt_logprobs"])
                scored = await answer(sjob, request)
            res = await answer(job, request)
        except _ClientGone:
            return Response(status_code=499)  # nobody reads it: the client is gone
        except BtError as exc:
            return error(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - the engine failed: the client may retry
            return error(500, f"{type(exc).__name__}: {exc}")
        finally:
            server.accepted -= 1
        return JSONResponse(render_completion(res, job.request, opts, model_name, loaded.tokenizer,
                                              frozenset(loaded.eos_ids), scored))

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [
            {"id": model_name, "object": "model", "created": 0, "owned_by": "bt-serve",
             "root": loaded.model_id, "max_model_len": max_len}]})

    async def version(request: Request):
        engine = {k: v for k, v in server.engine.identity().items() if k != "backend"}
        return JSONResponse({**engine, "version": _version("breakthrough"), "server": "bt-serve",
                             "model_revision": loaded.revision,
                             "max_running_requests": server.batch_size})

    async def health(request: Request):
        return PlainTextResponse("")

    async def metrics(request: Request):
        e = server.engine
        lines = [f"bt_requests_total {server.requests}",
                 f"bt_prompt_tokens_total {server.prompt_tokens}",
                 f"bt_cached_prompt_tokens_total {server.cached_tokens}",
                 f"bt_prefill_tokens_total {e.prefill_tokens}",
                 f"bt_generation_tokens_total {e.generated_tokens}",
                 f"bt_requests_accepted {server.accepted}",
                 f"bt_requests_refused_busy_total {server.refused_busy}",
                 f"bt_requests_cancelled_total {server.cancelled}"]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def cells(request: Request):
        return JSONResponse({"cells": dict(server.cells)})

    return Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models), Route("/version", version), Route("/health", health),
        Route("/metrics", metrics), Route("/bt/cells", cells),
    ], middleware=[Middleware(BearerAuth, api_key=api_key)] if api_key else None)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0: any free port); one-line BtError when the address
    cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BtError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(2048)
    return sock


def check_model_len(max_model_len: int, loaded: Any) -> None:
    """--max-model-len within the model's context (max_position_embeddings), when it says one:
    a longer limit would accept requests the model cannot attend over."""
    ctx = loaded.config.get("max_position_embeddings")
    if max_model_len and isinstance(ctx, int) and max_model_len > ctx:
        raise BtError(f"--max-model-len: {max_model_len:,} is beyond {loaded.alias}'s "
                      f"{ctx:,}-token context (max_position_embeddings); use at most {ctx:,}, "
                      "or 0 for the whole context")


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, batch_size: int = 8,
          announce=print, *, allow_remote: bool = False, api_key: str | None = None,
          max_queue: int = MAX_QUEUE, max_model_len: int = 0) -> None:
    """Load `model`, listen on host:port and serve until interrupted. `announce(line)` gets the
    URL once the socket listens (before that, connections wait in the backlog). Every option
    is checked, and the socket bound, before the model loads."""
    import uvicorn

    from breakthrough.models.loading import load_model

    if batch_size < 1:
        raise BtError("--batch-size must be >= 1")
    if not 0 <= port <= 65535:
        raise BtError(f"--port: {port} is not a TCP port")
    if max_queue < 0:
        raise BtError(f"--max-queue: expected 0 or a positive integer, got {max_queue}")
    if not 0 <= max_model_len <= MAX_TOKENS:
        raise BtError(f"--max-model-len: expected 0 (the model's context) or a positive integer "
                      f"<= {MAX_TOKENS:,}, got {max_model_len:,}")
    check_access(host, allow_remote, api_key)
    sock = listening_socket(host, port)  # before loading: a taken port fails at once
    try:
        loaded = load_model(model)
        check_model_len(max_model_len, loaded)
        server = MlxServer(loaded, batch_size=batch_size, max_queue=max_queue)
        app = build_app(server, model, api_key=api_key, max_model_len=max_model_len)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        where = "" if is_loopback(host) else " (reachable from other machines)"
        where += "; bearer token required" if api_key else ""
        announce(f"bt serve: {loaded.alias} at http://{shown}:{bound}{where}; Ctrl-C stops")
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
