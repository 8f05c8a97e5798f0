"""Issue 29, item 5: values from a server are never taken on faith. Behind a proxy that altered
`bt serve`'s answers, `bt base --backend vllm` stored a token id of 10,000,000, a NaN log-prob
and a +5 log-prob, and exited 0. Now each answer whose values cannot be true of the model (a
token id outside its vocabulary, a log-prob that is NaN or above 0, counts that disagree) is a
failed request: exit 3, a row in the run's errors table, no sample stored, and a rerun against a
sound server retries it.

The server: tests/engine/fake_vllm.py (a stdlib HTTP server on 127.0.0.1 in a thread of the test,
closed at the end) with `corrupt` set, which alters every generation answer but the startup
probe's, as a tampering proxy does."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from bt_cli import run_bt
from engine.fake_vllm import FakeVllm

from breakthrough.commands.options import EXIT_FAILURES
from breakthrough.store import RunStore


def _base(runs: Path, model: Path, url: str) -> subprocess.CompletedProcess:
    return run_bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--model",
        model,
        "--runs-dir",
        runs,
        "--run",
        "r",
        "--max-tokens",
        "24",
        "--backend",
        "vllm",
        "--endpoint",
        url,
        "--request-timeout",
        "5",
        "--retries",
        "1",
        timeout=180,
    )


def _samples(run: Path) -> int:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return c.execute("SELECT count(*) FROM samples").fetchone()[0]


@pytest.mark.parametrize(
    "how, words",
    [
        ("token-id", "token id 10,000,000 is outside the model's vocabulary"),
        ("nan-logprob", "log-prob nan is not a finite number <= 0"),
        ("positive-logprob", "log-prob 5.0 is not a finite number <= 0"),
        ("count", "6 token ids but 6 tokens / 5 logprobs"),
    ],
)
def test_an_altered_answer_fails_the_cell_and_a_rerun_retries_it(
    tmp_path: Path, tiny_model_dir: Path, how: str, words: str
) -> None:
    fake = FakeVllm(corrupt=how)
    try:
        proc = _base(tmp_path, tiny_model_dir, fake.url)
        assert proc.returncode == EXIT_FAILURES == 3, proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        assert (
            "failed on request errors" in proc.stdout + proc.stderr
            and "rerun" in proc.stdout + proc.stderr
        )
        run = tmp_path / "r"
        assert _samples(run) == 0  # nothing of the altered answer is stored
        with RunStore(run, readonly=True) as s:
            errors = s.errors()
        assert (
            len(errors) == 1 and words in errors[0]["message"] and fake.url in errors[0]["message"]
        )
        assert (
            "malformed answer" in errors[0]["message"]
            and "after 2 attempts" in errors[0]["message"]
        )
        fake.corrupt = None  # the proxy is gone: a rerun retries the failed cell
        proc = _base(tmp_path, tiny_model_dir, fake.url)
        assert proc.returncode == 0, proc.stderr
        assert _samples(run) == 1
        assert run_bt("verify", run).returncode == 0
    finally:
        fake.close()
