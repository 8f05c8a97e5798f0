"""The generation thread of `bt serve`: it owns the model and runs ONE long
`MlxEngine.generate` call whose request source is the queue of HTTP requests (continuous
batching across clients: a request that arrives while others decode joins the batch at the
next step; the source says "nothing ready" while rows are in flight and blocks only when none
is). Prompt scoring runs on the same thread, between steps."""

from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from breakthrough.engine.contract import GenRequest

MAX_TOP = 20  # log-probs per position at most (vLLM's default --max-logprobs)
MAX_QUEUE = 64  # requests accepted beyond the batch's rows (`bt serve --max-queue`)


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
    cancelled: bool = False  # the client went away (MlxServer.cancel)
    engine_key: str | None = None  # the engine's key once the generation thread took it


class MlxServer:
    """The generation thread and what it counts; `submit(job)` returns a Future."""

    def __init__(
        self, loaded: Any, batch_size: int = 8, kept_states: int = 4096, max_queue: int = MAX_QUEUE
    ) -> None:
        from breakthrough.engine.mlx_backend import MlxEngine

        self.loaded = loaded
        self.batch_size = batch_size
        self.max_queue = max_queue
        self.accepted = 0  # requests taken and not yet answered (the HTTP side counts them)
        self.refused_busy = 0
        self.cancelled = 0
        self._lock = threading.Lock()
        self.engine = MlxEngine(
            loaded.model,
            loaded.eos_ids,
            batch_size=batch_size,
            kept_states=4 * batch_size,
            shared_prefixes=max(4, batch_size),
        )
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

    def _source(self, jobs: dict[str, Job]) -> Iterator[GenRequest | None]:
        from breakthrough.engine.prompt_scores import score_prompt

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
                    job.future.set_result(
                        score_prompt(self.engine.model, job.score_ids, job.score_top)
                    )
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
            assert job.request is not None  # a job scores a prompt (above) or generates
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
                    assert job.request is not None  # `jobs` holds generation jobs only
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
