"""The killable math-verify worker pool: deadlines, crashes, replacement, ordering."""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest

from breakthrough.tasks.math.verify_pool import HOOK_ENV, VerifyPool

GOOD = [(r"\frac{1}{2}", "0.5"), (r"\sqrt{12}", r"2\sqrt3"), ("3", "4"), ("x+1", "1+x")]
GOOD_VERDICTS = [True, True, False, True]


def test_map_keeps_order() -> None:
    with VerifyPool(size=2, timeout_s=20) as pool:
        results = pool.map(GOOD * 3)
    assert [r.status for r in results] == ["ok"] * 12
    assert [r.verdict for r in results] == GOOD_VERDICTS * 3


def test_a_pool_starts_no_more_workers_than_jobs_wait() -> None:
    """One answer to grade starts one worker (each is an interpreter and the sympy import);
    more jobs fill the pool up to its size."""
    with VerifyPool(size=2, timeout_s=20) as pool:
        assert pool.map([]) == [] and not pool._workers
        assert pool.map(GOOD[:1])[0].verdict
        assert len(pool._workers) == 1
        assert [r.verdict for r in pool.map(GOOD)] == GOOD_VERDICTS
        assert len(pool._workers) == 2


def test_hang_times_out_and_pool_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOOK_ENV, "hang:HANGME")  # read by the pool, handed to its workers
    with VerifyPool(size=1, timeout_s=1.0) as pool:
        pool.map(GOOD[:1])  # worker warm: the deadline below is the job's alone
        start = time.monotonic()
        results = pool.map([("1", "HANGME")] + GOOD)
        elapsed = time.monotonic() - start
    assert results[0].status == "timeout" and not results[0].verdict
    assert 1.0 <= results[0].elapsed_s < 1.0 + 2
    assert [r.verdict for r in results[1:]] == GOOD_VERDICTS  # served by the replacement
    assert pool.replaced == 1
    assert elapsed < 1.0 + 15  # deadline plus one worker start on a busy 2-core machine


def test_crash_mid_job_is_an_error_and_pool_recovers() -> None:
    with VerifyPool(size=1, timeout_s=20, hook="crash:CRASHME") as pool:
        results = pool.map([("1", "CRASHME")] + GOOD)
    assert results[0].status == "error"
    assert [r.verdict for r in results[1:]] == GOOD_VERDICTS


def test_killed_idle_worker_is_replaced() -> None:
    with VerifyPool(size=1, timeout_s=20) as pool:
        assert pool.map(GOOD[:1])[0].verdict
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGKILL)
        pool._workers[0].process.wait(timeout=10)
        results = pool.map(GOOD)
        assert [r.verdict for r in results] == GOOD_VERDICTS
        assert pool.pids() != [pid] and pool.replaced == 1


def test_close_kills_workers() -> None:
    pool = VerifyPool(size=2, timeout_s=20)
    pool.pids()  # starts the workers
    procs = [w.process for w in pool._workers]
    pool.close()
    assert all(p.poll() is not None for p in procs)


def test_forgotten_pool_does_not_leak_workers() -> None:
    pool = VerifyPool(size=1, timeout_s=20)
    pool.pids()
    procs = [w.process for w in pool._workers]
    del pool
    gc.collect()
    assert all(p.poll() is not None for p in procs)
