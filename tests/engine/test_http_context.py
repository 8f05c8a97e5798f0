"""A request longer than a server's context is a refusal no rerun changes (issue 52): refused
before it is sent when the server lists its max_model_len in /v1/models (vLLM, bt serve: tests/
cli/test_refusals_name_the_cause.py, against `bt serve --max-model-len 256`; SGLang, read there
too now), and, where a server lists none, recognised in its own HTTP 400 (vLLM's, SGLang's and
bt serve's wordings): one line naming the endpoint and the limit, exit 2, the request not
retried and not stored as a failure a rerun would retry (that was exit 3, "rerun to retry").

The server: tests/engine/fake_vllm.py (a stdlib HTTP server on 127.0.0.1 in a thread of the
test, closed at the end) with a 256-token context it does not list in /v1/models."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from bt_cli import assert_one_line_error, run_bt
from engine.fake_vllm import FakeVllm

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.http_backend import HttpEngine, refused_context
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.errors import BtError

CONTEXT = 256
FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02, timeout_s=5.0)


def _openai(message: str) -> str:
    """The body shape of vLLM 0.10+ (and OpenAI's): {"error": {"message", ...}}."""
    return json.dumps(
        {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
    )


def _vllm_old(message: str) -> str:
    """The body shape of older vLLM and of bt serve: {"object": "error", "message", ...}."""
    return json.dumps(
        {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    )


@pytest.mark.parametrize(
    "body, limit",
    [
        (  # vLLM before 0.10
            _vllm_old(
                "This model's maximum context length is 256 tokens. However, you requested "
                "408 tokens (8 in the messages, 400 in the completion). Please reduce the "
                "length of the messages or completion."
            ),
            256,
        ),
        (  # vLLM 0.10+
            _openai(
                "'max_tokens' or 'max_completion_tokens' is too large: 400. This model's maximum "
                "context length is 4096 tokens and your request has 8 input tokens "
                "(400 > 4096 - 8). None"
            ),
            4096,
        ),
        (  # vLLM V1, the prompt alone too long
            _openai(
                "The decoder prompt (length 300) is longer than the maximum model length of 256. "
                "Make sure that `max_model_len` is no smaller than the number of text tokens."
            ),
            256,
        ),
        (  # SGLang /generate, the prompt alone
            json.dumps(
                {
                    "error": {
                        "message": "The input (300 tokens) is longer than the model's context "
                        "length (256 tokens)."
                    }
                }
            ),
            256,
        ),
        (  # SGLang's OpenAI routes, prompt + max_new_tokens
            _vllm_old(
                "Requested token count exceeds the model's maximum context length of 131072 "
                "tokens. You requested a total of 140000 tokens: 8 tokens from the input "
                "messages and 139992 tokens for the completion. Please reduce the number of "
                "tokens in the input messages or the completion to fit within the limit."
            ),
            131072,
        ),
        (  # a server behind a proxy that answers in FastAPI's shape
            json.dumps(
                {"detail": "The input (9 tokens) is longer than the model's context length (8)."}
            ),  # fmt: skip
            8,
        ),
        (  # bt serve, the prompt; and max_tokens after a prompt
            _vllm_old(
                "prompt: 9,000 tokens do not fit the model's context of 8,192 tokens "
                "(prompt + max_tokens must fit)"
            ),
            8192,
        ),
        (
            _vllm_old(
                "max_tokens: 400 after a 8-token prompt exceed the model's context of 256 "
                "tokens (at most 248)"
            ),
            256,
        ),
        ("This model's maximum context length is 2048 tokens.", 2048),  # a plain-text body
    ],
)
def test_a_servers_context_refusal_is_read_with_its_limit(body: str, limit: int) -> None:
    assert refused_context(400, body) == limit


@pytest.mark.parametrize(
    "status, body",
    [
        (400, _vllm_old("max_tokens: expected an integer of at least 1, got -3")),
        (400, _openai("The model `other` does not exist.")),
        (400, _openai("Token id 70000 is out of vocabulary")),
        (400, _openai("maximum context length is unknown")),  # no limit named
        (500, _openai("This model's maximum context length is 256 tokens.")),  # not a refusal
        (413, _vllm_old("the body is over 16,777,216 bytes")),
        (400, "not json at all"),
        (400, "[1, 2]"),
    ],
)
def test_other_answers_are_not_context_refusals(status: int, body: str) -> None:
    assert refused_context(status, body) is None


@pytest.fixture
def fake():
    f = FakeVllm(context=CONTEXT, reports_context=False)
    yield f
    f.close()


def test_the_engine_stops_on_the_refusal_without_retrying(fake: FakeVllm) -> None:
    engine = HttpEngine("vllm", [fake.url], [2], 49152, policy=FAST)
    try:
        ok = GenRequest(key="ok", prompt=[1, 504, 1028], max_tokens=6, seed=1)
        assert [r.finish_reason for r in engine.generate([ok])] == ["length"]
        before = fake.posts
        long = GenRequest(key="long", prompt=[1, 504, 1028], max_tokens=400, seed=1)
        with pytest.raises(BtError) as refusal:
            list(engine.generate([long]))
        assert fake.posts - before == 1  # one answer is enough: no retry
        line = str(refusal.value)
        for words in (fake.url, "3 prompt + 400 new tokens", "context of 256 tokens"):
            assert words in line, line
        assert "a rerun cannot help" in line and "\n" not in line
        assert engine.errors == 0  # not a failed request a rerun would retry
    finally:
        engine.close()


def test_bt_base_beyond_an_unlisted_context_is_one_line_exit_2(
    fake: FakeVllm, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """`bt base --max-tokens 400` against a vLLM whose context (256) /v1/models does not list:
    it exited 3 with "rerun to retry"; now exit 2, one line naming the limit, nothing written."""
    runs = tmp_path / "runs"
    proc = run_bt(
        "base", "--cohort", "arith", "--limit", "1", "--max-tokens", "400",
        "--model", tiny_model_dir, "--runs-dir", runs,
        "--backend", "vllm", "--endpoint", fake.url, "--retries", "2",
        timeout=180,
    )  # fmt: skip
    assert_one_line_error(
        proc, 2, fake.url, "+ 400 new tokens", "context of 256 tokens", "a rerun cannot help"
    )
    assert "rerun to" not in proc.stdout + proc.stderr
    assert not runs.exists() or not any(runs.iterdir())


class _SglangAnswers:
    """An endpoint's GETs answered from a table, as SGLang answers them (an exception raised)."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers

    def get_json(self, path: str) -> object:
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize(
    "models, context",
    [
        ({"object": "list", "data": [{"id": "qwen", "max_model_len": 32768}]}, 32768),
        ({"object": "list", "data": [{"id": "qwen"}]}, 0),  # not listed: its 400 says it
        (httpx.HTTPStatusError("404", request=None, response=None), 0),
    ],
)
def test_sglang_s_listed_context_is_read_at_startup(models: object, context: int) -> None:
    """SGLang lists its context in /v1/models as vLLM does: the pre-check refuses a request
    beyond it before anything is sent (the engine read none for SGLang)."""
    ep = _SglangAnswers(
        {
            "/get_model_info": {"model_path": "Qwen/Qwen3-4B"},
            "/get_server_info": {"version": "0.5.4", "max_running_requests": 8},
            "/v1/models": models,
        }
    )
    described = HttpEngine._describe(SimpleNamespace(backend="sglang"), ep)
    assert described["context"] == context and described["limit"] == 8
    assert described["identity"]["model"] == "Qwen/Qwen3-4B"
