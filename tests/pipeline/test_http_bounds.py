"""Bounded waits of the HTTP backends through the installed `bt` (issue 21, items 9 and 12):
an endpoint that answers /v1/models but never a POST ends `bt base` with one line and exit 2
within `--request-timeout` x (`--retries` + 1) (plus back-offs), having written nothing; one that
stops answering after the startup probes leaves the cells of `bt continue` and `bt sample`
failed, exit 3 ("finished with failures", stored in the errors table), and so does `bt base`
whose `bt serve` is SIGKILLed mid-run; `--api-key` (or BT_API_KEY) goes out as a
bearer token and is never printed or stored; the options are refused in one line when out of
range.

The servers: tests/engine/fake_vllm.py (a stdlib HTTP server on 127.0.0.1 in a thread of the
test, closed at the end; its silent POSTs are released then) and a real `bt serve` on the tiny
model (tests/engine/serve_procs.py, stopped by PID)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import typer.main
from bt_cli import assert_one_line_error, run_bt, start_bt
from engine.fake_vllm import FakeVllm
from engine.serve_procs import bt_serve

from breakthrough.cli import app
from breakthrough.commands.engine_options import HttpOptions
from breakthrough.commands.options import EXIT_FAILURES
from breakthrough.engine.contract import EngineSpec
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.engine.http_limits import REQUEST_TIMEOUT_S, RETRIES
from breakthrough.errors import BtError
from breakthrough.store import RunStore

BOUND_S = 120  # the whole `bt base` (model load included); the default would wait 1,801.5 s


@pytest.fixture
def fake():
    f = FakeVllm()
    yield f
    f.close()


def _base(
    tmp_path: Path, model: Path, url: str, *extra: object, **env: str
) -> subprocess.CompletedProcess:
    return run_bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--model",
        model,
        "--runs-dir",
        tmp_path,
        "--run",
        "r",
        "--max-tokens",
        "24",
        "--backend",
        "vllm",
        "--endpoint",
        url,
        "--request-timeout",
        "1",
        "--retries",
        "1",
        *extra,
        timeout=BOUND_S,
        **env,
    )


def _error_line(proc: subprocess.CompletedProcess) -> str:
    """The one `bt: error:` line (bt base announces the model on stdout before it connects)."""
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
    assert len(proc.stderr.splitlines()) == 1  # the error alone: no progress bar (issue 29)
    assert "1 problem of demo" in proc.stdout  # the run's announcement
    assert not (tmp_path / "r").exists()  # nothing written


def test_continue_and_sample_exit_3_when_requests_fail(
    tmp_path: Path, tiny_model_dir: Path, fake: FakeVllm
) -> None:
    proc = _base(tmp_path, tiny_model_dir, fake.url, BT_API_KEY="sekret-21")
    assert proc.returncode == 0, proc.stderr
    # The key went out as a bearer token on every request, and nowhere else.
    assert fake.auth and set(fake.auth) == {"Bearer sekret-21"}
    assert "sekret-21" not in proc.stdout + proc.stderr
    assert b"sekret-21" not in (tmp_path / "r" / "store.sqlite").read_bytes()
    # The server answers its startup probes, then no request: the cells fail, exit 3.
    fake.mode = "silent-after-probe"
    engine = [
        "--backend",
        "vllm",
        "--endpoint",
        fake.url,
        "--request-timeout",
        "1",
        "--retries",
        "0",
    ]
    proc = run_bt(
        "continue",
        tmp_path / "r",
        "--anchors",
        "4",
        "--budget",
        "8",
        "--answer-budget",
        "8",
        "--restarts",
        "8",
        "--samples",
        "1",
        *engine,
        timeout=BOUND_S,
    )
    assert proc.returncode == EXIT_FAILURES == 3, proc.stderr
    assert "1 cell stopped on request errors" in proc.stderr and "rerun" in proc.stderr
    assert "Traceback" not in proc.stderr
    with RunStore(tmp_path / "r", readonly=True) as s:
        assert any("no answer within 1s" in e["message"] for e in s.errors())
    proc = run_bt(
        "sample",
        "--cohort",
        "demo",
        "--attempts",
        "1",
        "--limit",
        "1",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path,
        "--run",
        "s",
        "--max-tokens",
        "24",
        *engine,
        timeout=BOUND_S,
    )
    assert proc.returncode == EXIT_FAILURES, proc.stderr
    assert "1 failed on request errors" in proc.stdout and "Traceback" not in proc.stderr


def _until(cond, what: str, tries: int = 1200, pause: float = 0.05):
    """Poll `cond()` until it is truthy (at most tries x pause seconds)."""
    for _ in range(tries):
        if cond():
            return
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what}")


def test_bt_base_exits_3_when_its_bt_serve_is_killed_mid_run(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    with bt_serve(tiny_model_dir, batch_size=1) as (srv,):
        proc = start_bt(
            "base",
            "--cohort",
            "demo",
            "--limit",
            "3",
            "--model",
            tiny_model_dir,
            "--runs-dir",
            tmp_path,
            "--run",
            "r",
            "--max-tokens",
            "4000",
            "--backend",
            "vllm",
            "--endpoint",
            srv.url,
            "--max-inflight",
            "1",
            "--retries",
            "1",
            "--request-timeout",
            "60",
        )
        try:
            # The startup probe generated 1 token; more means a cell is being generated.
            _until(
                lambda: proc.poll() is not None or srv.metrics()["bt_generation_tokens_total"] >= 3,
                "a cell to start",
            )
            srv.kill()  # SIGKILL, mid-cell
            out, err = proc.communicate(timeout=BOUND_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    assert proc.returncode == EXIT_FAILURES, err[-3000:]
    assert "Traceback" not in err and "failed on request errors" in err and "rerun" in err
    with RunStore(tmp_path / "r", readonly=True) as s:
        done, errors = len(s.samples_frame(arrays=False, kind="base")), s.errors()
    assert done < 3 and len(errors) == 3 - done and srv.url in errors[0]["message"]


@pytest.mark.parametrize(
    "command, args, words",
    [
        ("base", ["--request-timeout", "0"], "--request-timeout"),
        ("continue", ["--request-timeout", "nan"], "--request-timeout"),
        ("sample", ["--retries", "-1"], "--retries"),
    ],
)
def test_out_of_range_options_are_one_line(
    tmp_path: Path, command: str, args: list[str], words: str
) -> None:
    head = {
        "base": ["base", "--cohort", "demo", "--runs-dir", tmp_path, "--run", "r"],
        "sample": [
            "sample",
            "--cohort",
            "demo",
            "--attempts",
            "1",
            "--runs-dir",
            tmp_path,
            "--run",
            "r",
        ],
        "continue": ["continue", tmp_path / "r"],
    }[command]
    proc = run_bt(*head, "--backend", "vllm", "--endpoint", "http://127.0.0.1:9", *args, timeout=60)
    assert_one_line_error(proc, 2, words)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, words",
    [
        ({"request_timeout": 1e9}, "--request-timeout"),
        ({"request_timeout": -1.0}, "--request-timeout"),
        ({"retries": 1000}, "--retries"),
        ({"api_key": "two words"}, "--api-key"),
        ({"api_key": "tab\there"}, "--api-key"),
    ],
)
def test_http_options_are_checked(args: dict, words: str) -> None:
    """The options are refused by `HttpOptions` (the command's parsing) and by `EngineSpec`
    itself (the one home of each value's rule), with the same line."""
    base = dict(
        backend="vllm",
        endpoint="http://127.0.0.1:9",
        max_inflight=0,
        accept_processed_logprobs=False,
        request_timeout=REQUEST_TIMEOUT_S,
        retries=RETRIES,
    )
    with pytest.raises(BtError, match=words) as parsed:
        HttpOptions(**{"api_key": None, **base, **args}).check()
    fields = {"request_timeout": "request_timeout_s"}
    with pytest.raises(BtError) as made:
        EngineSpec(
            backend="vllm",
            endpoints=("http://127.0.0.1:9",),
            **{fields.get(k, k): v for k, v in args.items()},
        )
    assert str(made.value) == str(parsed.value)
    ok = HttpOptions(**{**base, "request_timeout": 2.5, "retries": 0}, api_key="k").engine(8)
    assert (ok.request_timeout_s, ok.retries, ok.api_key, ok.batch_size) == (2.5, 0, "k", 8)
    mlx = HttpOptions(**{**base, "backend": "mlx", "endpoint": None}, api_key="k")
    assert mlx.fields()["api_key"] is None
    assert "sekret" not in repr(EngineSpec(api_key="sekret"))  # never shown
    assert "sekret" not in repr(HttpOptions(**base, api_key="sekret"))


def test_the_options_have_help() -> None:
    """bt base, continue and sample show the three options with their defaults (tests/cli/
    test_help.py runs every --help through the console script)."""
    cmd = typer.main.get_command(app)
    for name in ("base", "continue", "sample"):
        params = {p.opts[0]: p for p in cmd.commands[name].params if p.opts[0].startswith("--")}
        assert (
            params["--request-timeout"].default == 600.0
            and "deadline" in params["--request-timeout"].help
        )
        assert params["--retries"].default == 2 and "deadline" in params["--retries"].help
        assert params["--api-key"].envvar == "BT_API_KEY" and "Bearer" in params["--api-key"].help
        assert params["--api-key"].show_default is False
