"""An `EngineSpec` checks its own settings (the one home of each rule), with one wording that
every command that generates shows its user."""

from __future__ import annotations

from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt

from breakthrough.engine.contract import (
    MAX_REQUEST_TIMEOUT_S,
    MAX_RETRIES,
    REQUEST_TIMEOUT_S,
    RETRIES,
    EngineSpec,
    check_api_key,
    check_batch_size,
)
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.errors import BtError

URL = ("http://127.0.0.1:9",)


@pytest.mark.parametrize(
    "settings, line",
    [
        ({"backend": "gpu"}, "--backend: expected one of mlx, mlx-fresh, vllm, sglang, got 'gpu'"),
        ({"batch_size": 0}, "--batch-size: expected a positive integer, got 0"),
        ({"batch_size": -3}, "--batch-size: expected a positive integer, got -3"),
        ({"endpoints": URL}, "--endpoint applies to --backend vllm or sglang, not mlx"),
        (
            {"backend": "vllm", "endpoints": URL, "max_inflight": -1},
            "--max-inflight: expected 0 (the server's limit) or a positive integer, got -1",
        ),
        (
            {"backend": "vllm", "endpoints": URL, "request_timeout_s": 0.0},
            "--request-timeout: expected seconds in (0, 86400], got 0",
        ),
        (
            {"backend": "vllm", "endpoints": URL, "request_timeout_s": float("nan")},
            "--request-timeout: expected seconds in (0, 86400], got nan",
        ),
        (
            {"backend": "vllm", "endpoints": URL, "retries": MAX_RETRIES + 1},
            f"--retries: expected an integer in [0, {MAX_RETRIES}], got {MAX_RETRIES + 1}",
        ),
        (
            {"backend": "vllm", "endpoints": URL, "api_key": "two words"},
            "--api-key: expected a non-empty key without spaces or control characters",
        ),
    ],
)
def test_a_spec_refuses_what_no_engine_can_run(settings: dict, line: str) -> None:
    with pytest.raises(BtError) as exc:
        EngineSpec(**settings)
    assert str(exc.value) == line


def test_valid_specs_and_their_defaults() -> None:
    spec = EngineSpec()
    assert (spec.backend, spec.batch_size) == ("mlx", 8)
    assert (spec.request_timeout_s, spec.retries) == (REQUEST_TIMEOUT_S, RETRIES)
    policy = RetryPolicy()  # the client's defaults are the spec's, not a second copy
    assert (policy.timeout_s, policy.attempts) == (REQUEST_TIMEOUT_S, RETRIES + 1)
    EngineSpec(
        backend="sglang",
        endpoints=URL,
        batch_size=1,
        retries=0,
        max_inflight=0,
        request_timeout_s=MAX_REQUEST_TIMEOUT_S,
        api_key="k",
    )
    check_batch_size(1)
    check_api_key(None)
    with pytest.raises(BtError, match="--api-key"):
        check_api_key("")  # given but empty: `bt serve` refuses it


@pytest.mark.heavy
def test_every_generating_command_words_batch_size_alike(tmp_path: Path) -> None:
    """`bt base`, `bt sample`, `bt continue` and `bt cohorts screen` refuse `--batch-size 0`
    with the same line (EngineSpec's), before writing anything."""
    want = "bt: error: --batch-size: expected a positive integer, got 0"
    for args in (
        ["base", "--cohort", "demo", "--runs-dir", tmp_path, "--run", "r"],
        ["sample", "--cohort", "demo", "--attempts", "1", "--runs-dir", tmp_path, "--run", "r"],
        ["continue", tmp_path / "r"],
        ["cohorts", "screen", "demo", "--name", "x", "--runs-dir", tmp_path],
    ):
        proc = run_bt(*args, "--batch-size", "0", timeout=120)
        assert assert_one_line_error(proc, 2, "--batch-size") == want, args
    assert not list(tmp_path.iterdir())
