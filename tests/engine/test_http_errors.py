"""The HTTP client's documented behaviour against a misbehaving loopback server: a 500, a 429,
a malformed body, a hang past the timeout and an answer trickling in past it are retried, each
attempt bounded, then fail the request (a result with finish_reason "error"); a transient 500
is absorbed; a refused connection takes the endpoint out of the fleet; no endpoint answering is
one line at startup; processed log-probs are refused unless accepted.

The server is tests/engine/fake_vllm.py (the stdlib's ThreadingHTTPServer on 127.0.0.1 in a
thread of the test, answers replayed from the recorded vLLM fixture), shut down at the end of
each test."""

from __future__ import annotations

import json
import socket

import pytest
from engine.fake_vllm import FakeVllm

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.http_backend import HttpEngine
from breakthrough.engine.http_client import RetryPolicy
from breakthrough.errors import BtError
from breakthrough.protocol import Sampling

FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02, timeout_s=0.5)


@pytest.fixture
def fake():
    f = FakeVllm()
    yield f
    f.close()


def _free_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


def _engine(urls, **kw) -> HttpEngine:
    return HttpEngine("vllm", urls, [2], 49152, policy=FAST, **kw)


def _one(engine: HttpEngine):
    req = GenRequest(
        key="k", prompt=[1, 504, 1028, 2001, 77, 9], max_tokens=6, seed=11, sampling=Sampling()
    )
    (res,) = list(engine.generate([req]))
    return res


def test_a_healthy_server_is_checked_and_used(fake) -> None:
    eng = _engine([fake.url])
    ident = eng.identity()
    assert (
        ident["server"] == "vllm" and ident["logprobs"] == "raw" and ident["model"] == "fake-model"
    )
    assert "endpoint" not in json.dumps(ident)  # a resumed run may use another fleet
    res = _one(eng)
    assert res.finish_reason == "length" and len(res.tokens) == 6 and res.error is None
    assert res.endpoint == fake.url


@pytest.mark.parametrize(
    "mode, words",
    [
        ("500", "HTTP 500"),
        ("malformed", "malformed answer"),
        ("hang", "no answer within 0.5s"),
        ("busy", "HTTP 429"),
        ("trickle", "no answer within 0.5s"),
    ],
)
def test_a_request_that_keeps_failing_yields_an_error_result(fake, mode, words) -> None:
    eng = _engine([fake.url])
    fake.mode, before = mode, fake.posts
    res = _one(eng)
    assert res.finish_reason == "error" and res.tokens == [] and words in res.error
    if mode == "trickle":  # each attempt overruns its time by up to one read: fewer may fit
        assert 1 <= fake.posts - before <= FAST.attempts
    else:
        assert fake.posts - before == FAST.attempts  # bounded retries, then give up
    assert eng.fleet.alive()  # the endpoint answered: it stays in the fleet
    fake.mode = "ok"
    assert _one(eng).finish_reason == "length"


def test_a_transient_500_is_retried(fake) -> None:
    eng = _engine([fake.url])
    fake.mode, before = "flaky", fake.posts
    res = _one(eng)
    assert res.finish_reason == "length" and fake.posts - before == 2


def test_no_endpoint_answering_is_one_line() -> None:
    with pytest.raises(BtError, match="no endpoint answers"):
        _engine([_free_port_url(), _free_port_url()])


def test_a_dead_endpoint_at_startup_leaves_the_others(fake) -> None:
    dead = _free_port_url()
    eng = _engine([dead, fake.url])
    assert [e.url for e in eng.fleet.alive()] == [fake.url]
    assert any(dead in n for n in eng.notes)
    assert _one(eng).endpoint == fake.url


def test_processed_logprobs_are_refused_unless_accepted() -> None:
    f = FakeVllm(shift=0.7)
    try:
        with pytest.raises(BtError, match="processed log-probs"):
            _engine([f.url])
        eng = _engine([f.url], accept_processed_logprobs=True)
        assert eng.identity()["logprobs"].startswith("processed")
    finally:
        f.close()


def test_a_source_that_has_nothing_ready_waits_for_a_result(fake) -> None:
    """The contract's None: "nothing ready now"; the next request depends on a result."""
    eng = _engine([fake.url])
    seen: list[str] = []

    def source():
        yield GenRequest(key="a", prompt=[1, 2, 3], max_tokens=6, seed=1)
        while not seen:
            yield None
        yield GenRequest(key="b", prompt=[1, 2, 3, 4], max_tokens=6, seed=2)

    for res in eng.generate(source()):
        seen.append(res.key)
    assert seen == ["a", "b"]

    def stuck():
        yield None

    with pytest.raises(BtError, match="nothing ready"):
        list(eng.generate(stuck()))


@pytest.mark.parametrize(
    "how, words",
    [
        ("token-id", "token id 10,000,000 is outside the model's vocabulary (0..49,151)"),
        ("negative-id", "token id -1 is outside"),
        ("nan-logprob", "log-prob nan is not a finite number <= 0"),
        ("positive-logprob", "log-prob 5.0 is not a finite number <= 0"),
        ("top-logprob", "log-prob inf of token id 4875"),
        ("top-id", "token id 70,000 is outside"),
        ("count", "6 token ids but 6 tokens / 5 logprobs"),
        ("cached", "1,000,000,000 cached prompt tokens of a 6-token prompt"),
    ],
)
def test_a_value_that_cannot_be_true_fails_the_request(fake, how, words) -> None:
    """Issue 29, item 5: an answer in the documented format whose values cannot be true of the
    model (a tampering proxy) is retried like a malformed one, then fails the request; nothing
    of it reaches a result."""
    eng = _engine([fake.url])
    fake.corrupt, before = how, fake.posts
    res = _one(eng)
    assert res.finish_reason == "error" and res.tokens == [] and len(res.logprobs) == 0
    assert "malformed answer" in res.error and words in res.error, res.error
    assert fake.posts - before == FAST.attempts
    fake.corrupt = None
    assert _one(eng).finish_reason == "length"


def test_a_server_whose_probe_answer_cannot_be_true_is_not_used() -> None:
    f = FakeVllm(corrupt="nan-logprob")
    f.corrupt_probe = True
    try:
        with pytest.raises(
            BtError, match="no endpoint answers.*log-prob nan is not a finite number"
        ):
            _engine([f.url])
    finally:
        f.close()
