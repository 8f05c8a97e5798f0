"""The HTTP side of `bt serve`: a starlette application around the generation thread
(`generation.MlxServer`). Routes: POST /v1/completions, /v1/chat/completions, /tokenize,
/detokenize; GET /v1/models, /version (says "server": "bt-serve" and its limit
`max_running_requests`), /health, /metrics (Prometheus text), /bt/cells (requests per cell:
what a fleet routed here). Every refusal is a JSON error naming what to change (4xx); a body
over 16 MiB is a 413 read no further; a null, empty or non-JSON body is a 400; at most
`batch_size + max_queue` requests are accepted at once (429 with Retry-After beyond); a client
that disconnects has its row dropped at the next step. One log line per request (method, path,
status, tokens, seconds)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from breakthrough.errors import BtError
from breakthrough.models.tokens import decode, token_strings
from breakthrough.serve.auth import BearerAuth
from breakthrough.serve.errors import BadRequest, error_body
from breakthrough.serve.generation import Job, MlxServer
from breakthrough.serve.parse import (
    Served,
    parse_chat_request,
    parse_completion_request,
    parse_detokenize_request,
    parse_tokenize_request,
)
from breakthrough.serve.render import render_chat, render_completion
from breakthrough.serve.stops import StopStrings

DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
MAX_BODY_BYTES = 16 * 2**20  # a request body is read up to this (413 beyond): ~2M token ids


class _ClientGone(Exception):
    """The client disconnected while its request waited or generated."""


class _TooLarge(Exception):
    """The body is over MAX_BODY_BYTES (413)."""


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


class RequestLog:
    """ASGI middleware: one line per HTTP request through `log`: method, path, status, the
    prompt and completion tokens a route counted (`request.state.tokens`) and the seconds it
    took."""

    def __init__(self, app: Any, log: Callable[[str], None]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        status = [500]  # what the client gets when the app fails before answering
        t0 = time.perf_counter()

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            tokens = state.get("tokens")
            counted = (
                f"{tokens[0]} prompt + {tokens[1]} completion tokens" if tokens else "no tokens"
            )
            self.log(
                f"bt serve: {scope['method']} {scope['path']} {status[0]} {counted} "
                f"{time.perf_counter() - t0:.3f}s"
            )


def build_app(
    server: MlxServer,
    model_name: str,
    *,
    api_key: str | None = None,
    max_model_len: int = 0,
    log: Callable[[str], None] | None = None,
):
    """The starlette application around `server`: prompts checked against `max_model_len`
    (0: the model's own context), a bearer token required when `api_key` is given, one line
    per request to `log` when given."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    loaded = server.loaded
    tokenizer = loaded.tokenizer
    max_len = int(max_model_len or loaded.config.get("max_position_embeddings") or 0)
    served = Served(
        names=tuple(dict.fromkeys((model_name, loaded.alias, loaded.model_id))),
        vocab=server.vocab,
        max_len=max_len,
        tokenizer=tokenizer,
        stop_strings=StopStrings(tokenizer),
    )

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(error_body(status, message), status_code=status, headers=headers)

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
        """The JSON body, read at most MAX_BODY_BYTES far; BadRequest when it is not a JSON
        object's text, _TooLarge beyond the limit."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _TooLarge()
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            raise BadRequest("the body is empty; expected a JSON object")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # also bad UTF-8, and nesting beyond the stack
            raise BadRequest("the body is not JSON") from None

    def handler(parse: Callable[[Any, Served], Any], respond: Callable[..., Any]):
        """A POST route: the body read and parsed (400 / 413 on the way), then `respond`."""

        async def route(request: Request):
            try:
                parsed = parse(await read_json(request), served)
            except _TooLarge:
                return error(413, f"the body exceeds {MAX_BODY_BYTES:,} bytes")
            except BadRequest as exc:
                return error(400, str(exc))
            return await respond(request, parsed)

        return route

    async def generate(request: Request, job: Job, prompt_logprobs: int | None) -> Any:
        """Run `job` (after scoring its prompt when asked): (result, scores), or the Response
        that ends the request (429 busy, 499 client gone, 400 / 500 failed)."""
        if server.full():
            server.refused_busy += 1
            return error(
                429,
                f"bt serve is busy: {server.accepted} requests accepted (batch "
                f"{server.batch_size} + --max-queue {server.max_queue}); retry later",
                headers={"Retry-After": "1"},
            )
        server.accepted += 1  # the event loop's thread only: no lock needed
        try:
            scored = None
            if prompt_logprobs is not None:
                assert job.request is not None  # the routes pass generation jobs
                sjob = Job(
                    future=concurrent.futures.Future(),
                    score_ids=list(job.request.prompt),
                    score_top=prompt_logprobs,
                )
                scored = await answer(sjob, request)
            return await answer(job, request), scored
        except _ClientGone:
            return Response(status_code=499)  # nobody reads it: the client is gone
        except BtError as exc:
            return error(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - the engine failed: the client may retry
            return error(500, f"{type(exc).__name__}: {exc}")
        finally:
            server.accepted -= 1

    async def completion(request: Request, parsed) -> Response:
        job, opts = parsed
        got = await generate(request, job, opts.prompt_logprobs)
        if isinstance(got, Response):
            return got
        res, scored = got
        body = render_completion(res, job.request, opts, model_name, tokenizer, scored)
        request.state.tokens = (len(job.request.prompt), body["usage"]["completion_tokens"])
        return JSONResponse(body)

    async def chat(request: Request, parsed) -> Response:
        job, opts = parsed
        got = await generate(request, job, None)
        if isinstance(got, Response):
            return got
        body = render_chat(got[0], job.request, opts, model_name, tokenizer)
        request.state.tokens = (len(job.request.prompt), body["usage"]["completion_tokens"])
        return JSONResponse(body)

    async def tokenize(request: Request, parsed) -> Response:
        ids, strs = parsed
        request.state.tokens = (len(ids), 0)
        return JSONResponse(
            {
                "count": len(ids),
                "max_model_len": max_len,
                "tokens": ids,
                "token_strs": token_strings(tokenizer, ids) if strs else None,
            }
        )

    async def detokenize(request: Request, ids: list[int]) -> Response:
        request.state.tokens = (len(ids), 0)
        return JSONResponse({"prompt": decode(tokenizer, ids)})

    async def models(request: Request):
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "bt-serve",
                        "root": loaded.model_id,
                        "max_model_len": max_len,
                    }
                ],
            }
        )

    async def version(request: Request):
        engine = {k: v for k, v in server.engine.identity().items() if k != "backend"}
        return JSONResponse(
            {
                **engine,
                "version": _version("breakthrough"),
                "server": "bt-serve",
                "model_revision": loaded.revision,
                "max_running_requests": server.batch_size,
            }
        )

    async def health(request: Request):
        return PlainTextResponse("")

    async def metrics(request: Request):
        e = server.engine
        lines = [
            f"bt_requests_total {server.requests}",
            f"bt_prompt_tokens_total {server.prompt_tokens}",
            f"bt_cached_prompt_tokens_total {server.cached_tokens}",
            f"bt_prefill_tokens_total {e.prefill_tokens}",
            f"bt_generation_tokens_total {e.generated_tokens}",
            f"bt_requests_accepted {server.accepted}",
            f"bt_requests_refused_busy_total {server.refused_busy}",
            f"bt_requests_cancelled_total {server.cancelled}",
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def cells(request: Request):
        return JSONResponse({"cells": dict(server.cells)})

    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 404:
            return error(
                404,
                f"{request.url.path}: no such route (bt serve has /v1/completions, "
                "/v1/chat/completions, /tokenize, /detokenize, /v1/models, /version, "
                "/health, /metrics, /bt/cells)",
            )
        if exc.status_code == 405:
            return error(
                405,
                f"{request.method} {request.url.path}: method not allowed",
                headers=dict(exc.headers or {}),
            )
        return error(exc.status_code, str(exc.detail))

    middleware = [Middleware(RequestLog, log=log)] if log is not None else []
    if api_key:
        middleware.append(Middleware(BearerAuth, api_key=api_key))
    return Starlette(
        routes=[
            Route(
                "/v1/completions", handler(parse_completion_request, completion), methods=["POST"]
            ),
            Route("/v1/chat/completions", handler(parse_chat_request, chat), methods=["POST"]),
            Route("/tokenize", handler(parse_tokenize_request, tokenize), methods=["POST"]),
            Route("/detokenize", handler(parse_detokenize_request, detokenize), methods=["POST"]),
            Route("/v1/models", models),
            Route("/version", version),
            Route("/health", health),
            Route("/metrics", metrics),
            Route("/bt/cells", cells),
        ],
        middleware=middleware,
        # starlette types a handler's exception as Exception; this one is for HTTPException
        exception_handlers={HTTPException: http_error},  # type: ignore[dict-item]
    )
