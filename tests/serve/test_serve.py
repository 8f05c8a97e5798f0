"""bt serve's HTTP surface in-process (starlette's test client over the real app and the real
MLX generation thread on the tiny model): vLLM's completion format, the local MLX backend's
tokens exactly, refusals naming the field, prompt scoring, and the HTTP engine on top of it."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.protocol import Sampling
from breakthrough.serve.generation import MlxServer
from breakthrough.serve.routes import build_app


@pytest.fixture(scope="module")
def client(tiny_model):
    server = MlxServer(tiny_model, batch_size=4)
    with TestClient(build_app(server, "tiny")) as c:
        yield c
    server.stop()


PROMPT = [1, 504, 1028, 2001, 77, 9, 310, 42]


def test_completion_equals_the_local_mlx_backend(client, tiny_model) -> None:
    s = Sampling()
    body = {
        "model": "tiny",
        "prompt": PROMPT,
        "max_tokens": 12,
        "seed": 5,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "min_p": s.min_p,
        "logprobs": 20,
        "n": 1,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "stop_token_ids": [2],
    }
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    eng = MlxEngine(tiny_model.model, tiny_model.eos_ids, batch_size=2)
    (local,) = list(eng.generate([GenRequest("x", PROMPT, 12, 5, sampling=s)]))
    assert ch["token_ids"] == local.tokens
    np.testing.assert_allclose(ch["logprobs"]["token_logprobs"], local.logprobs, atol=1e-5)
    np.testing.assert_allclose(ch["bt"]["entropies"], local.entropies, atol=1e-5)
    np.testing.assert_allclose(ch["bt"]["sampling_entropies"], local.sampling_entropies, atol=1e-5)
    assert ch["finish_reason"] == ("length" if local.finish_reason == "length" else "stop")
    tops = ch["logprobs"]["top_logprobs"]
    assert all(len(t) in (20, 21) for t in tops) and all(k.startswith("token_id:") for k in tops[0])
    assert r.json()["usage"]["prompt_tokens"] == len(PROMPT)


def test_shared_prefix_and_follows_reuse_without_changing_tokens(client) -> None:
    trace = PROMPT + [5, 6, 7, 8, 9, 10, 11, 12]
    sp = {"key": "cell-1", "ids": trace, "starts": [len(PROMPT) + 4, len(trace)]}
    plain = {
        "prompt": trace[:12],
        "max_tokens": 6,
        "seed": 9,
        "return_token_ids": True,
        "temperature": 0.6,
        "top_k": 20,
    }
    a = client.post("/v1/completions", json=plain).json()["choices"][0]
    hinted = {
        **plain,
        "bt": {"cell": "cell-1", "key": "cell-1/p", "keep_state": True, "shared_prefix": sp},
    }
    b = client.post("/v1/completions", json=hinted).json()["choices"][0]
    assert a["token_ids"] == b["token_ids"] and b["bt"]["cached_tokens"] > 0
    follow = {
        "prompt": trace[:12] + b["token_ids"] + [99],
        "max_tokens": 4,
        "seed": 3,
        "return_token_ids": True,
    }
    c1 = client.post("/v1/completions", json=follow).json()["choices"][0]
    c2 = client.post(
        "/v1/completions", json={**follow, "bt": {"cell": "cell-1", "follows": "cell-1/p"}}
    ).json()["choices"][0]
    assert c1["token_ids"] == c2["token_ids"] and c2["bt"]["cached_tokens"] > 0
    assert client.get("/bt/cells").json()["cells"]["cell-1"] == 2


@pytest.mark.parametrize(
    "patch, field",
    [
        ({"prompt": ""}, "prompt: empty"),
        ({"prompt": [1, 10**9]}, "outside the vocabulary"),
        ({"n": 2}, "n:"),
        ({"stream": True}, "stream"),
        ({"stop": [""]}, "stop"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"model": "other"}, "model"),
        ({"bt": {"shared_prefix": 3}}, "bt.shared_prefix"),
    ],
)
def test_bad_requests_are_one_line_400s(client, patch, field) -> None:
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **patch})
    assert r.status_code == 400 and field in r.json()["message"]


def test_prompt_scores_match_generation_logprobs(client) -> None:
    g = client.post(
        "/v1/completions",
        json={
            "prompt": PROMPT,
            "max_tokens": 1,
            "seed": 1,
            "logprobs": 5,
            "return_token_ids": True,
            "temperature": 0.5,
            "top_k": 5,
        },
    ).json()
    tok = g["choices"][0]["token_ids"][0]
    s = client.post(
        "/v1/completions",
        json={"prompt": PROMPT + [tok], "max_tokens": 1, "prompt_logprobs": 5, "temperature": 0},
    ).json()
    last = s["choices"][0]["prompt_logprobs"][-1]
    assert last[str(tok)]["logprob"] == pytest.approx(
        g["choices"][0]["logprobs"]["token_logprobs"][0], abs=1e-4
    )


def test_identity_endpoints(client) -> None:
    v = client.get("/version").json()
    assert v["server"] == "bt-serve" and v["max_running_requests"] == 4
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
    assert "bt_requests_total" in client.get("/metrics").text


def _bt_serve(*args: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    bt = str(Path(sys.executable).parent / "bt")
    return subprocess.run(
        [bt, "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_serve_mistakes_are_one_line(tmp_path, tiny_model_dir) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = _bt_serve("--model", str(tiny_model_dir), "--port", str(port))
    assert (
        res.returncode == 2
        and "cannot listen on 127.0.0.1" in res.stderr
        and "Traceback" not in res.stderr
    )
    res = _bt_serve("--model", str(tmp_path / "absent"), "--port", "0")
    assert (
        res.returncode == 2
        and res.stderr.startswith("bt: error:")
        and "Traceback" not in res.stderr
    )
    res = _bt_serve("--port", "70000")
    assert res.returncode == 2 and "--port" in res.stderr
