"""Bounded waits of the HTTP backends through the installed `bt` (issue 21, items 9 and 12):
an endpoint that answers /v1/models but never a POST ends `bt base` with one line and exit 2
within `--request-timeout` x (`--retries` + 1) (plus back-offs), having written nothing; one that
stops answering after the startup probes leaves the cell failed, exit 3 ("finished with
failures"), and a rerun completes it; `--api-key` (or BT_API_KEY) goes out as a bearer token
and is never printed or stored; the options are refused in one line when out of range.

The server is tests/engine/fake_vllm.py: a stdlib HTTP server on 127.0.0.1 in a thread of the
test, closed at the end (its silent POSTs are released then)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt
from engine.fake_vllm import FakeVllm

from breakthrough.commands.options import EXIT_FAILURES, REQUEST_TIMEOUT_S, RETRIES
from breakthrough.engine.contract import EngineSpec
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.store import RunStore

BOUND_S = 120  # the whole `bt base` (model load included); the default would wait 1,801.5 s


@pytest.fixture
def fake():
    f = FakeVllm()
    yield f
    f.close()


def _base(tmp_path: Path, model: Path, url: str, *extra: object, **env: str) -> subprocess.CompletedProcess:
    return run_bt("base", "--cohort", "demo", "--limit", "1", "--model", model, "--runs-dir", tmp_path,
                  "--run", "r", "--max-tokens", "24", "--backend", "vllm", "--endpoint", url,
                  "--request-timeout", "1", "--retries", "1", *extra, timeout=BOUND_S, **env)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    """The one `bt: error:` line (bt base announces the model on stderr before it connects)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("bt: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_defaults_agree_and_bound_every_request() -> None:
    spec, policy = EngineSpec(), RetryPolicy()
    assert spec.request_timeout_s == REQUEST_TIMEOUT_S == policy.timeout_s
    assert spec.retries == RETRIES and policy.attempts == RETRIES + 1
    assert policy.deadline_s == 3 * 600 + 0.5 + 1.0  # the 1,801.5 s --help states


def test_a_silent_endpoint_ends_bt_base_in_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    f = FakeVllm(mode="silent")
    try:
        proc = _base(tmp_path, tiny_model_dir, f.url)
        posts = f.posts
    finally:
        f.close()
    assert proc.returncode == 2, proc.stderr
    line = _error_line(proc)
    assert "no endpoint answers" in line and f.url in line
    assert "no answer within 1s" in line and "after 2 attempts" in line  # --retries 1: 2 attempts
    assert posts == 2
    assert not (tmp_path / "r").exists()  # nothing written


def test_an_endpoint_silent_after_its_probes_fails_the_cell_with_exit_3(
        tmp_path: Path, tiny_model_dir: Path, fake: FakeVllm) -> None:
    fake.mode = "silent-after-probe"
    proc = _base(tmp_path, tiny_model_dir, fake.url, BT_API_KEY="sekret-21")
    assert proc.returncode == EXIT_FAILURES == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "1 cell failed on request errors" in proc.stderr
    assert "rerun" in proc.stderr
    with RunStore(tmp_path / "r", readonly=True) as s:
        (err,) = s.errors()
        assert "no answer within 1s" in err["message"] and len(s.samples_frame(arrays=False)) == 0
    # The key went out as a bearer token on every request, and nowhere else.
    assert fake.auth and set(fake.auth) == {"Bearer sekret-21"}
    assert "sekret-21" not in proc.stdout + proc.stderr
    assert b"sekret-21" not in (tmp_path / "r" / "store.sqlite").read_bytes()
    # The server answers again: the rerun generates the failed cell and exits 0.
    fake.mode = "ok"
    proc = _base(tmp_path, tiny_model_dir, fake.url, "--api-key", "sekret-21")
    assert proc.returncode == 0, proc.stderr
    with RunStore(tmp_path / "r", readonly=True) as s:
        assert len(s.samples_frame(arrays=False, kind="base")) == 1


@pytest.mark.parametrize("command, args, words", [
    ("base", ["--request-timeout", "0"], "--request-timeout"),
    ("continue", ["--request-timeout", "nan"], "--request-timeout"),
    ("sample", ["--retries", "-1"], "--retries"),
    ("base", ["--retries", "1000"], "--retries"),
    ("sample", ["--api-key", "two words"], "--api-key"),
])
def test_out_of_range_options_are_one_line(tmp_path: Path, command: str, args: list[str], words: str) -> None:
    head = {"base": ["base", "--cohort", "demo", "--runs-dir", tmp_path, "--run", "r"],
            "sample": ["sample", "--cohort", "demo", "--attempts", "1", "--runs-dir", tmp_path, "--run", "r"],
            "continue": ["continue", tmp_path / "r"]}[command]
    proc = run_bt(*head, "--backend", "vllm", "--endpoint", "http://127.0.0.1:9", *args, timeout=60)
    assert_one_line_error(proc, 2, words)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["base", "continue", "sample"])
def test_the_options_have_help(command: str) -> None:
    out = run_bt(command, "--help", COLUMNS="200").stdout
    for opt in ("--request-timeout", "--retries", "--api-key", "BT_API_KEY", "[default: 600.0]",
                "[default: 2]", "deadline"):
        assert opt in out, (command, opt)
