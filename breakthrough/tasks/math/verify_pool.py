"""A small pool of killable worker processes that run math-verify under a hard wall-clock deadline.

Why not math-verify's own timeouts: they use `signal.alarm`, which only works in the main thread
and cannot interrupt a hang inside C code; a ProcessPoolExecutor cannot kill one stuck task
either. Here every worker is a plain process with its own pipes: a job past its deadline gets its
worker killed (status `timeout`), a worker that dies mid-job yields status `error`, and either way
a fresh worker replaces it so the pool keeps working (design decision 6).

Workers are `python -c` subprocesses rather than multiprocessing spawn/forkserver children:
those re-run the caller's `__main__` script in the child (breaking unguarded scripts and
notebooks), and fork would copy a parent holding MLX/GPU state.

Test hook: `hook` (default: env `BT_GRADING_WORKER_HOOK`) is `"hang:<marker>"` or
`"crash:<marker>"`; a worker then sleeps forever / exits abruptly on predictions containing
<marker>. The pool hands it to each worker it starts."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

HOOK_ENV = "BT_GRADING_WORKER_HOOK"
DEFAULT_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 120.0  # importing sympy + math-verify on a busy 2-core machine
MAX_FAILED_STARTS = 3
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding `breakthrough/`


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one math-verify call: status is `ok`, `exception`, `timeout` or `error`."""

    status: str
    verdict: bool = False
    error: str | None = None
    elapsed_s: float = 0.0


def verify_pair(reference: str, prediction: str) -> bool:
    """Protocol 7 step 3, exactly: gold first, both wrapped in `$...$`, library defaults
    (math-verify's own signal-based timeouts stay on; they work in a worker's main thread)."""
    from math_verify import parse, verify

    gold = parse("$" + reference + "$")
    answer = parse("$" + prediction + "$")
    return bool(verify(gold, answer))


def _apply_hook(hook: str | None, prediction: str) -> None:
    """Test-only misbehaviour, see the module docstring."""
    if not hook:
        return
    action, _, marker = hook.partition(":")
    if marker and marker in prediction:
        if action == "hang":
            while True:
                time.sleep(3600)
        if action == "crash":
            os._exit(3)


def _worker_main(read_fd: int, write_fd: int) -> None:
    """Worker loop: warm up, say ready, then answer (job_id, reference, prediction) messages."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its timeout warnings are noise here
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    hook = os.environ.get(HOOK_ENV) or None
    try:
        verify_pair("1", "1")  # import sympy/antlr and fill lazy caches before any deadline runs
    except Exception:
        pass
    outbox.send(("ready", os.getpid()))
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job_id, reference, prediction = msg
        _apply_hook(hook, prediction)
        reply: tuple[str, Any, bool, str | None]
        try:
            reply = ("done", job_id, verify_pair(reference, prediction), None)
        except Exception as exc:  # protocol: any Exception falls through to "incorrect"
            reply = ("done", job_id, False, f"{type(exc).__name__}: {exc}"[:500])
        try:
            outbox.send(reply)
        except OSError:  # the pool is gone
            return


def _kill_all(workers: list[_Worker]) -> None:
    """Finaliser: no worker outlives its pool (a hung one would never see EOF on its pipe)."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    inbox: Connection  # the worker's replies
    outbox: Connection  # jobs to the worker
    born: float
    ready: bool = False
    job: int | None = None
    sent_at: float = 0.0


class VerifyPool:
    """`size` worker processes; `map(pairs)` verifies (reference, prediction) pairs, each under a
    hard `timeout_s` measured from when the job reaches an already warm worker. Not thread-safe:
    one `map` at a time."""

    def __init__(
        self,
        size: int = 2,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        hook: str | None = None,
    ) -> None:
        self.size = max(1, size)
        self.timeout_s = timeout_s
        self.hook = hook if hook is not None else os.environ.get(HOOK_ENV) or None
        self._workers: list[_Worker] = []
        weakref.finalize(self, _kill_all, self._workers)  # also runs at interpreter exit
        self._failed_starts = 0
        self.replaced = 0  # workers killed or lost and replaced (for logs and tests)

    # -- worker lifecycle -------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        """A fresh `python -c` worker talking over two private pipes (not stdin/stdout, which
        a library may print to)."""
        job_r, job_w = os.pipe()
        reply_r, reply_w = os.pipe()
        env = dict(os.environ)
        env.pop(HOOK_ENV, None)
        if self.hook:
            env[HOOK_ENV] = self.hook
        code = f"from {__name__} import _worker_main; _worker_main({job_r}, {reply_w})"
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", code],
                pass_fds=(job_r, reply_w),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the parent only; it kills workers
                cwd=_PACKAGE_ROOT,  # `-c` puts the cwd first on sys.path: import THIS checkout
            )
        finally:
            os.close(job_r)  # the child's ends: closing ours lets us see EOF when it dies
            os.close(reply_w)
        return _Worker(
            proc,
            inbox=Connection(reply_r, writable=False),
            outbox=Connection(job_w, readable=False),
            born=time.monotonic(),
        )

    def _fill(self, jobs: int | None = None) -> None:
        """Start workers up to `size`, or up to `jobs` when fewer jobs wait: each worker costs
        an interpreter and the sympy/math-verify import (~1 s of CPU), wasted on a run that
        grades one answer."""
        wanted = self.size if jobs is None else min(self.size, jobs)
        while len(self._workers) < wanted:
            self._workers.append(self._spawn())

    def _kill(self, worker: _Worker) -> None:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait()
        worker.inbox.close()
        worker.outbox.close()
        self._workers.remove(worker)

    def _replace(self, worker: _Worker) -> None:
        self._kill(worker)
        self.replaced += 1
        self._workers.append(self._spawn())

    def pids(self) -> list[int]:
        """Process ids of the current workers (starting them if needed)."""
        self._fill()
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        """Stop all workers now (kill: a worker may be stuck in a hang)."""
        for worker in list(self._workers):
            self._kill(worker)

    def __enter__(self) -> VerifyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the event loop ---------------------------------------------------------------------

    def map(self, pairs: list[tuple[str, str]]) -> list[VerifyResult]:
        """Verify every (reference, prediction) pair; results come back in input order."""
        results: list[VerifyResult | None] = [None] * len(pairs)
        pending = deque(range(len(pairs)))
        self._fill(len(pairs))
        while pending or any(w.job is not None for w in self._workers):
            self._dispatch(pairs, pending)
            by_conn: dict[Any, _Worker] = {w.inbox: w for w in self._workers}
            for conn in wait(list(by_conn), timeout=self._next_deadline()):
                self._receive(by_conn[conn], results)
            self._enforce_deadlines(results, pending)
        return [r if r is not None else VerifyResult("error", error="lost") for r in results]

    def _dispatch(self, pairs: list[tuple[str, str]], pending: deque[int]) -> None:
        for worker in list(self._workers):
            if not pending:
                return
            if not worker.ready or worker.job is not None:
                continue
            job = pending.popleft()
            try:
                worker.outbox.send((job, *pairs[job]))
            except OSError:  # the worker died while idle: not the job's fault, requeue it
                pending.appendleft(job)
                self._replace(worker)
                continue
            worker.job, worker.sent_at = job, time.monotonic()

    def _next_deadline(self) -> float:
        now = time.monotonic()
        ends = [
            w.sent_at + self.timeout_s if w.job is not None else w.born + STARTUP_TIMEOUT_S
            for w in self._workers
            if w.job is not None or not w.ready
        ]
        return max(0.0, min(ends) - now) if ends else 1.0

    def _receive(self, worker: _Worker, results: list[VerifyResult | None]) -> None:
        try:
            msg = worker.inbox.recv()
        except (EOFError, OSError):  # the worker died (crash, OOM kill, external kill)
            if worker.job is not None:
                results[worker.job] = VerifyResult(
                    "error", error="worker died", elapsed_s=time.monotonic() - worker.sent_at
                )
            elif not worker.ready:
                self._count_failed_start()
            self._replace(worker)
            return
        if msg[0] == "ready":
            worker.ready = True
            self._failed_starts = 0
            return
        _, job, verdict, error = msg
        if job == worker.job:
            results[job] = VerifyResult(
                "exception" if error else "ok",
                verdict=bool(verdict),
                error=error,
                elapsed_s=time.monotonic() - worker.sent_at,
            )
        worker.job = None

    def _enforce_deadlines(self, results: list[VerifyResult | None], pending: deque[int]) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.job is not None and now - worker.sent_at >= self.timeout_s:
                results[worker.job] = VerifyResult("timeout", elapsed_s=now - worker.sent_at)
                self._replace(worker)
            elif not worker.ready and now - worker.born >= STARTUP_TIMEOUT_S:
                self._count_failed_start()
                self._replace(worker)
        if self._failed_starts >= MAX_FAILED_STARTS:
            while pending:
                results[pending.popleft()] = VerifyResult("error", error="workers fail to start")
            self._failed_starts = 0

    def _count_failed_start(self) -> None:
        self._failed_starts += 1
