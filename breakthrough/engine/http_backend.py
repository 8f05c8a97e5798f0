"""The HTTP backends: generation on servers a lab already runs (vLLM, SGLang, or `bt serve`),
through the same `Engine` contract as the in-process MLX backend.

Each request is one HTTP call carrying its whole context as token ids (engine/wire.py); the
answer phase is a second call with the full context, and the server's prefix cache (vLLM APC,
SGLang radix cache, bt serve's shared prefixes) does the reuse. Several endpoints form a fleet
routed by cell (engine/fleet.py); requests run on a thread pool, at most `max_inflight` per
endpoint; retries and failures follow engine/http_client.py: a request that keeps failing
yields a result with finish_reason "error" (and `error`), an endpoint that stops answering has
its cells re-routed, and the run goes on. A request longer than a server's context is no such
failure (every rerun gets the same answer): refused before it is sent when the server reports
its `max_model_len`, or at its HTTP 400 that says so (`refused_context`), the run stops on a
one-line `BtError` (exit 2) naming the limit.

Nothing a server answers is taken on faith: every answer's token ids must lie in the model's
vocabulary, its log-probs be finite and <= 0 and its counts agree (wire.check_values); an answer
that fails is retried like a malformed one, then its request fails (stored in the run's errors
table, exit 3, retried by a rerun), so a misbehaving server or proxy never puts a value into a run.

What is exact and what is not (recorded per run in `identity()`):
  * token ids and finish reasons: exact (multi-token stop sequences are matched here, on the
    ids, exactly as the MLX backend stops);
  * per-token log-probs: the server's, of the raw distribution (before temperature / top-k),
    checked at startup: a probe sequence is generated from at temperature 0.5, top-k 5 and the
    same position is scored as a prompt (`prompt_logprobs`); a server whose generation
    log-probs differ from the raw scores is refused unless `--accept-processed-logprobs`;
  * sampling entropy: exact from the top-20 when 0 < top-k <= 20 (the protocol's top-k is 20),
    else NaN;
  * full-distribution entropy: only (lower, upper) bounds from the top-20 (GenResult.
    entropy_bounds; `entropies` is NaN), except from bt serve, which reports the exact values;
  * instrumentation (GenResult.signals, protocol 2.2): the fields the top-20 determine exactly
    (margins, top-1 / top-5 / tail mass, surprisal, sampled-token regret); NaN for the
    entropy-based and successive KL / JS fields and for the hidden-state fields (a server shows
    no hidden states: a request for hidden vectors is refused);
  * seeds: per request; vLLM honours them; SGLang only in its deterministic-inference mode;
    bt serve gives exactly the local MLX backend's tokens."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx
import numpy as np

from breakthrough import __version__
from breakthrough.engine import topk_stats, wire
from breakthrough.engine.contract import (
    Engine,
    EnginePlan,
    EngineStats,
    GenRequest,
    GenResult,
    RowShape,
    check_request,
    route_key,
)
from breakthrough.engine.fleet import Fleet
from breakthrough.engine.http_client import Endpoint, EndpointDown, RequestFailed, RetryPolicy
from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS
from breakthrough.errors import BtError
from breakthrough.protocol import Sampling

DEFAULT_INFLIGHT = 16
RAW_TOLERANCE = 0.05  # nats: generation vs prompt-scored log-probs of one position
PROBE_SAMPLING = Sampling(temperature=0.5, top_p=1.0, top_k=5, min_p=0.0)


class _ProbeFailed(Exception):
    """An endpoint that answered its identity probe failed to generate one token."""


def probe_ids(vocab_size: int, n: int = 24) -> list[int]:
    """A fixed, model-independent sequence of valid ids for the startup log-prob check."""
    span = max(2, min(int(vocab_size), 32000))
    return [(7919 * i + 101) % span for i in range(1, n + 1)]


# How servers word a refusal of a request beyond the context (HTTP 400), each with the limit:
# vLLM ("This model's maximum context length is 256 tokens. However, you requested ...", and
# since 0.10 "'max_tokens' ... is too large: 400. This model's maximum context length is 256
# tokens and your request has ..."; a prompt alone too long: "The decoder prompt (length 300) is
# longer than the maximum model length of 256"), SGLang ("The input (300 tokens) is longer than
# the model's context length (256 tokens)", "Requested token count exceeds the model's maximum
# context length of 256 tokens"), OpenAI's wording as vLLM's, and bt serve ("... exceed the
# model's context of 256 tokens").
CONTEXT_REFUSALS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"maximum context length (?:is|of) (\d[\d,]*) tokens",
        r"longer than the maximum model length of (\d[\d,]*)",
        r"longer than the model's context length \((\d[\d,]*)",
        r"(?:fit|exceeds?) the model's context of (\d[\d,]*) tokens",
    )
)


def refused_context(status: int | None, body: str) -> int | None:
    """The context limit a server's HTTP 400 answer names when it refuses a request as longer
    than its context, else None: such a refusal is the same on every attempt and every rerun, so
    it is a setting to change (exit 2), not a failure to retry (exit 3). Read from the error's
    message (vLLM / bt serve `{"message"}`, OpenAI / newer vLLM `{"error": {"message"}}`, SGLang
    `{"error": {"message"}}` or `{"detail"}`), or the whole body when it is not JSON."""
    if status != 400:
        return None
    message = _error_message(body)
    for pattern in CONTEXT_REFUSALS:
        found = pattern.search(message)
        if found:
            limit = int(found.group(1).replace(",", ""))
            return limit if limit > 0 else None
    return None


def _error_message(body: str) -> str:
    """The message of an error body in any of the servers' shapes, else the body itself."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    if isinstance(answer, dict):
        error = answer.get("error")
        for said in (
            answer.get("message"),
            error.get("message") if isinstance(error, dict) else error,
            answer.get("detail"),
        ):
            if isinstance(said, str) and said:
                return said
    return body


def beyond_context(url: str, req: GenRequest, limit: int, source: str) -> BtError:
    """The one line for a request that does not fit a server's context of `limit` tokens
    (`source`: where the limit was read), whether bt saw it before sending or the server
    refused it."""
    return BtError(
        f"{url}: a request of {len(req.prompt):,} prompt + {int(req.max_tokens):,} new tokens "
        f"exceeds the server's context of {limit:,} tokens ({source}); a rerun cannot help: "
        "lower --max-tokens (or the budgets), or serve a longer context"
    )


class HttpEngine(Engine):
    """An `Engine` over one or more HTTP endpoints of one kind ("vllm" or "sglang")."""

    def __init__(
        self,
        backend: str,
        urls: Sequence[str],
        eos_ids: Iterable[int],
        vocab_size: int,
        *,
        max_inflight: int = 0,
        accept_processed_logprobs: bool = False,
        policy: RetryPolicy = RetryPolicy(),
        api_key: str | None = None,
    ) -> None:
        if backend not in ("vllm", "sglang"):
            raise BtError(f"--backend: {backend!r} is not an HTTP backend (vllm, sglang)")
        if not urls:
            raise BtError(f"--backend {backend} needs --endpoint URL[,URL...]")
        for u in urls:
            if not (u.startswith("http://") or u.startswith("https://")) or len(u) < 10:
                raise BtError(f"--endpoint: expected http://HOST:PORT, got {u!r}")
        if len(set(urls)) != len(urls):
            raise BtError("--endpoint: the same URL is given twice")
        if max_inflight < 0:
            raise BtError("--max-inflight must be >= 0 (0: the server's reported limit)")
        self.backend = backend
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.vocab_size = int(vocab_size)
        self.accept_processed = accept_processed_logprobs
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.cached_tokens = 0
        self.cached_by_cell: dict[str, int] = {}
        self.errors = 0
        self._lock = threading.Lock()
        self.fleet = Fleet(
            [Endpoint(u, policy, max_inflight or DEFAULT_INFLIGHT, api_key=api_key) for u in urls]
        )
        self._identity: dict[str, Any] = {}
        self._context: tuple[int, str] = (0, "")  # the smallest context a server reports, and whose
        try:
            self._connect(max_inflight)
        except BaseException:
            self.fleet.close()
            raise
        self._pool = ThreadPoolExecutor(
            max_workers=sum(e.max_inflight for e in self.fleet.endpoints),
            thread_name_prefix="bt-http",
        )

    # -- startup -------------------------------------------------------------------------------
    def _describe(self, ep: Endpoint) -> dict[str, Any]:
        """The server's identity and limits (one-line failure for an unreadable answer)."""
        if self.backend == "vllm":
            models = ep.get_json("/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise ValueError("/v1/models lists no model")
            try:
                version = ep.get_json("/version")
            except (httpx.HTTPError, ValueError):
                version = {}
            server = version.get("server", "vllm") if isinstance(version, dict) else "vllm"
            info = {
                "server": server,
                "server_version": str(version.get("version", "unknown")),
                "model": str(data[0]["id"]),
            }
            if server == "bt-serve":
                info.update(
                    {
                        k: version[k]
                        for k in ("mlx", "mlx_lm", "sampler", "blas", "model_revision")
                        if k in version
                    }
                )
            limit = version.get("max_running_requests") if isinstance(version, dict) else None
            context = data[0].get("max_model_len")  # vLLM's and bt serve's context limit
        else:
            model = ep.get_json("/get_model_info")
            try:  # SGLang's OpenAI routes list its context as vLLM's do
                listed = ep.get_json("/v1/models")
                data = listed.get("data") if isinstance(listed, dict) else None
                first = data[0] if isinstance(data, list) and data else None
                context = first.get("max_model_len") if isinstance(first, dict) else None
            except (httpx.HTTPError, ValueError):
                context = None  # not listed: the server's own 400 says it (refused_context)
            try:
                server = ep.get_json("/get_server_info")
            except (httpx.HTTPError, ValueError):
                server = {}
            states = server.get("internal_states") or [{}]
            info = {
                "server": "sglang",
                "server_version": str(server.get("version", "unknown")),
                "model": str(model.get("model_path", "unknown")),
                "deterministic_inference": bool(
                    server.get("enable_deterministic_inference", False)
                ),
            }
            limit = server.get("max_running_requests") or (states[0] or {}).get(
                "max_running_requests"
            )
        return {
            "identity": info,
            "limit": int(limit) if isinstance(limit, int) and limit > 0 else 0,
            "context": int(context) if isinstance(context, int) and context > 0 else 0,
        }

    def _connect(self, max_inflight: int) -> None:
        failures = []
        described = {}
        for ep in self.fleet.endpoints:
            try:
                described[ep.url] = self._describe(ep)
            except httpx.HTTPStatusError as exc:
                ep.alive = False
                code = exc.response.status_code
                failures.append(
                    f"{ep.url} (HTTP {code}"
                    + (
                        ": missing or wrong API key; pass --api-key KEY or BT_API_KEY)"
                        if code in (401, 403)
                        else ")"
                    )
                )
            except (httpx.HTTPError, ValueError, AttributeError, KeyError, TypeError) as exc:
                ep.alive = False
                failures.append(f"{ep.url} ({type(exc).__name__}: {str(exc)[:80] or 'no answer'})")
        if not described:
            raise BtError(f"--endpoint: no endpoint answers: {'; '.join(failures)}")
        for url in failures:
            self.fleet.notes.append(f"{url} does not answer; its cells go to the other endpoints")
        first_url, first = next(iter(described.items()))
        for url, d in described.items():
            if d["identity"] != first["identity"]:
                raise BtError(
                    f"--endpoint: {url} serves {d['identity']} but {first_url} serves "
                    f"{first['identity']}; a run never mixes engines"
                )
        contexts = [d["context"] for d in described.values() if d["context"]]
        self._context = (
            min(contexts, default=0),
            min(
                (u for u, d in described.items() if d["context"]),
                key=lambda u: described[u]["context"],
                default="",
            ),
        )
        for ep in self.fleet.alive():
            ep.info = described[ep.url]["identity"]
            ep.set_inflight(max_inflight or described[ep.url]["limit"] or DEFAULT_INFLIGHT)
        logprobs = "raw"
        for ep in self.fleet.alive():
            try:
                logprobs = self._check_raw_logprobs(ep)
            except (EndpointDown, _ProbeFailed) as exc:  # answered the identity probe, then
                self.fleet.mark_dead(ep, str(exc))  # went away or never generates
                failures.append(str(exc) if str(exc).startswith(ep.url) else f"{ep.url}: {exc}")
        if not self.fleet.alive():
            raise BtError(f"--endpoint: no endpoint answers: {'; '.join(failures)}")
        bt_serve = first["identity"]["server"] == "bt-serve"
        self._identity = {
            "backend": self.backend,
            "bt": __version__,
            **first["identity"],
            "token_ids": "exact",
            "finish_reasons": "exact",
            "logprobs": logprobs,
            "entropies": "exact (bt serve)" if bt_serve else f"bounds from top-{wire.TOP_LOGPROBS}",
            "sampling_entropies": "exact (bt serve)"
            if bt_serve
            else f"exact from top-{wire.TOP_LOGPROBS} when 0 < top_k <= {wire.TOP_LOGPROBS}, "
            "else NaN",
        }
        if self.backend == "sglang":
            self._identity["seeds"] = (
                "per request"
                if first["identity"]["deterministic_inference"]
                else "not binding (server lacks --enable-deterministic-inference)"
            )

    def _path(self) -> str:
        return "/v1/completions" if self.backend == "vllm" else "/generate"

    def _body(self, ep: Endpoint, req: GenRequest) -> dict[str, Any]:
        if self.backend == "sglang":
            return wire.sglang_body(req, self.eos_ids)
        extras = (
            wire.bt_extras(req, route_key(req)) if ep.info.get("server") == "bt-serve" else None
        )
        return wire.vllm_body(req, ep.info["model"], sorted(self.eos_ids), extras)

    def _parse(self, body: Any) -> wire.Completion:
        return wire.parse_vllm(body) if self.backend == "vllm" else wire.parse_sglang(body)

    def _parser(self, req: GenRequest) -> Callable[[Any], wire.Completion]:
        """The answer to `req` parsed and its values checked against the model (wire.
        check_values): a value that cannot be true is a malformed answer, retried like one."""
        return lambda body: wire.check_values(self._parse(body), self.vocab_size, len(req.prompt))

    def _check_raw_logprobs(self, ep: Endpoint) -> str:
        """ "raw" when the server's generation log-probs equal the raw scores of the same
        position; else "processed" (refused unless accepted)."""
        ids = probe_ids(self.vocab_size)
        req = GenRequest(
            key="bt-logprob-probe", prompt=ids, max_tokens=1, seed=0, sampling=PROBE_SAMPLING
        )
        try:
            comp = ep.post(self._path(), self._body(ep, req), self._parser(req))
        except RequestFailed as exc:  # e.g. answers /v1/models but no POST within the deadline
            raise _ProbeFailed(f"{exc} (the one-token startup probe)") from None
        try:
            if not comp.tokens:
                raise RequestFailed("the probe generated no token")
            tok = comp.tokens[0]
            gen = {**comp.top[0], tok: comp.logprobs[0]}
            if self.backend == "vllm":
                scored = ep.post(
                    "/v1/completions",
                    wire.vllm_score_body(ids + [tok], ep.info["model"]),
                    wire.parse_vllm_prompt_logprobs,
                )
            else:
                scored = ep.post(
                    "/generate",
                    wire.sglang_score_body(ids + [tok]),
                    wire.parse_sglang_prompt_logprobs,
                )
            diff = topk_stats.max_logprob_difference(gen, scored[-1])
        except RequestFailed as exc:
            if self.accept_processed:
                return "unverified (accepted with --accept-processed-logprobs)"
            raise BtError(
                f"--endpoint {ep.url}: cannot check that its log-probs are raw ({exc}); "
                "pass --accept-processed-logprobs to use it anyway"
            ) from None
        if diff <= RAW_TOLERANCE:
            return "raw"
        if self.accept_processed:
            return "processed (accepted with --accept-processed-logprobs)"
        raise BtError(
            f"--endpoint {ep.url}: the server returns processed log-probs (they differ from the "
            f"raw scores of the same position by {diff:.3f} nats); restart it with raw log-probs "
            "(vLLM: --logprobs-mode raw_logprobs; SGLang: SGLANG_RETURN_ORIGINAL_LOGPROB=1) or "
            "pass --accept-processed-logprobs"
        )

    # -- the Engine contract ----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The server kind, version, model and what is exact (endpoint URLs are left out: a
        resumed run may use another fleet of the same engine)."""
        return dict(self._identity)

    @property
    def notes(self) -> list[str]:
        """What happened to endpoints (not answering at startup, died during the run)."""
        return list(self.fleet.notes)

    def plan(self, shape: RowShape) -> EnginePlan:
        """Requests in flight over the live fleet at any length (the servers manage their own
        memory and prefix caches)."""
        rows = self.fleet.capacity()
        return EnginePlan(shape, rows, rows, rows)

    def stats(self) -> EngineStats:
        return EngineStats(self.generated_tokens, self.prefill_tokens, notes=self.notes)

    def generate(self, requests: Iterable[GenRequest | None]) -> Iterator[GenResult]:
        source = iter(requests)
        futures: set[Future] = set()
        keys: set[str] = set()
        exhausted = waiting = False
        try:
            while True:
                while not exhausted and not waiting and len(futures) < self.fleet.capacity():
                    try:
                        req = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    if req is None:  # nothing ready now: ask again after the next result
                        waiting = True
                        break
                    check_request(req, keys, hidden_states=False)  # no hidden vectors over HTTP
                    self._refuse_beyond_context(req)
                    futures.add(self._pool.submit(self._one, req))
                if not futures:
                    if exhausted:
                        return
                    raise BtError(
                        "the request source had nothing ready while no request was in flight"
                    )
                done, futures = wait(futures, return_when=FIRST_COMPLETED)
                waiting = False
                for fut in done:
                    yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def _refuse_beyond_context(self, req: GenRequest) -> None:
        """A request longer than a server's context (its reported `max_model_len`) is refused
        before it is sent: the server would answer 400 every time, so it is a setting to change,
        not a failure a rerun retries (exit 2, not 3)."""
        limit, url = self._context
        if limit and len(req.prompt) + int(req.max_tokens) > limit:
            raise beyond_context(url, req, limit, "max_model_len")

    def _one(self, req: GenRequest) -> GenResult:
        t0 = time.perf_counter()
        cell = route_key(req)
        down = ""
        while True:
            ep = self.fleet.route(cell)
            if ep is None:
                why = down or "every endpoint stopped answering: " + ", ".join(
                    e.url for e in self.fleet.endpoints
                )
                return self._failed(req, f"no endpoint answers ({why})", t0, "")
            try:
                comp = ep.post(self._path(), self._body(ep, req), self._parser(req))
            except EndpointDown as exc:
                self.fleet.mark_dead(ep, str(exc))
                down = str(exc)
                continue
            except RequestFailed as exc:
                limit = refused_context(exc.status, exc.body)
                if limit:  # the same answer on every rerun: the run stops on it (exit 2)
                    raise beyond_context(
                        ep.url, req, limit, "the server refused it: HTTP 400"
                    ) from None
                return self._failed(req, str(exc), t0, ep.url)
            try:
                return self._result(req, comp, ep.url, t0)
            except wire.MalformedResponse as exc:
                return self._failed(req, f"{ep.url}: {exc}", t0, ep.url)

    def _failed(self, req: GenRequest, why: str, t0: float, url: str) -> GenResult:
        with self._lock:
            self.errors += 1
        empty = np.zeros(0, dtype=np.float32)
        return GenResult(
            key=req.key,
            tokens=[],
            logprobs=empty,
            entropies=empty,
            sampling_entropies=empty,
            finish_reason="error",
            elapsed_s=time.perf_counter() - t0,
            prompt_tokens=len(req.prompt),
            error=why,
            endpoint=url,
        )

    def _result(self, req: GenRequest, comp: wire.Completion, url: str, t0: float) -> GenResult:
        res = completion_result(req, comp, self.eos_ids, self.vocab_size)
        res.elapsed_s, res.endpoint = time.perf_counter() - t0, url
        with self._lock:
            self.generated_tokens += len(res.tokens)
            self.prefill_tokens += max(0, len(req.prompt) - res.cached_tokens)
            self.cached_tokens += res.cached_tokens
            cell = route_key(req)
            self.cached_by_cell[cell] = self.cached_by_cell.get(cell, 0) + res.cached_tokens
        return res

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.fleet.close()


def _top_arrays(tops: Sequence[dict[int, float]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, k] ids (-1 padding) and log-probs (-inf padding), each row descending."""
    ids = np.full((len(tops), k), -1, dtype=np.int32)
    lps = np.full((len(tops), k), -np.inf, dtype=np.float32)
    for i, t in enumerate(tops):
        best = sorted(t.items(), key=lambda kv: -kv[1])[:k]
        for j, (tok, lp) in enumerate(best):
            ids[i, j], lps[i, j] = tok, lp
    return ids, lps


def completion_result(
    req: GenRequest, comp: wire.Completion, eos_ids: frozenset[int], vocab_size: int
) -> GenResult:
    """A server's completion as the contract's result: the stop sequences matched on the ids
    (the tokens after a match are dropped, as if the server had stopped there), the finish
    reason in the contract's words, entropies exact (bt serve) or as top-k bounds."""
    tokens, lps, tops = list(comp.tokens), list(comp.logprobs), list(comp.top)
    if (
        comp.finish == "stop"
        and comp.stop_token is not None
        and (not tokens or tokens[-1] != comp.stop_token)
    ):
        tokens.append(comp.stop_token)  # a server that left the matched stop id out
        lps.append(float("nan"))
        tops.append({})
    bt = comp.bt or {}
    if "finish_reason" in bt:
        finish = str(bt["finish_reason"])
        if finish not in ("eos", "length", "stop_sequence"):
            raise wire.MalformedResponse(f"bt.finish_reason {finish!r}")
    else:
        stops = [(e,) for e in sorted(eos_ids)] + [tuple(s) for s in req.stop_sequences if s]
        cut = wire.truncate_at_stop(tokens, stops)
        if cut is not None:
            tokens, lps, tops = tokens[:cut], lps[:cut], tops[:cut]
            finish = "eos" if tokens[-1] in eos_ids else "stop_sequence"
        elif comp.finish == "length":
            finish = "length"
        elif comp.finish == "stop":
            finish = "eos"  # the server's own end-of-sequence token
        else:
            raise wire.MalformedResponse(f"finish reason {comp.raw_finish!r}")
    n = len(tokens)
    if n > req.max_tokens:
        raise wire.MalformedResponse(f"{n} tokens for max_tokens={req.max_tokens}")
    top_ids, top_lps = _top_arrays(tops, wire.TOP_LOGPROBS)
    if "entropies" in bt:
        ent = np.asarray(bt["entropies"], dtype=np.float32)[:n]
        sent = np.asarray(bt.get("sampling_entropies", [math.nan] * n), dtype=np.float32)[:n]
        bounds = None
    else:
        ent = np.full(n, np.nan, dtype=np.float32)
        bounds = np.asarray(
            [
                topk_stats.entropy_bounds(list(t.values()), vocab_size)
                if t
                else (0.0, math.log(vocab_size))
                for t in tops
            ],
            dtype=np.float32,
        ).reshape(n, 2)
        sent = np.asarray(
            [
                topk_stats.sampling_entropy(list(t.values()), req.sampling) if t else math.nan
                for t in tops
            ],
            dtype=np.float32,
        )
    return GenResult(
        key=req.key,
        tokens=[int(t) for t in tokens],
        logprobs=np.asarray(lps, dtype=np.float32),
        entropies=ent,
        sampling_entropies=sent,
        finish_reason=finish,
        elapsed_s=0.0,
        prompt_tokens=len(req.prompt),
        cached_tokens=int(bt.get("cached_tokens", comp.cached_tokens)),
        entropy_bounds=bounds,
        top_ids=top_ids,
        top_logprobs=top_lps,
        signals=topk_stats.topk_signals(top_lps, lps, SIGNAL_FIELDS + HIDDEN_FIELDS),
    )
