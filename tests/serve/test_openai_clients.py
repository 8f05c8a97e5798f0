"""`bt serve` for ordinary OpenAI / vLLM clients (issue 30 item 7), against a running server
(the installed console script, the tiny model, 127.0.0.1, stopped by PID) over httpx:
/tokenize and /detokenize in vLLM's shapes, text prompts tokenized by the server (the ids it
used returned under return_token_ids), stop strings cut the text and the tokens where the text
first holds them, /v1/chat/completions through the model's chat template, one log line per
request, and a 4xx JSON error (never a 500) for every body it cannot serve."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from engine.serve_procs import bt_serve

from breakthrough.models.tokens import decode
from breakthrough.serve.errors import BadRequest
from breakthrough.serve.parse import Served, parse_chat_request, parse_completion_request
from breakthrough.serve.stops import SEQUENCES_PER_STOP, StopStrings, find_stop

PROMPT_TEXT = "The capital of France is"
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 2 + 3?"},
]
CONTEXT = 8192  # the tiny model's max_position_embeddings


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path):
    with bt_serve(tiny_model_dir, batch_size=2) as (proc,):
        yield proc


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
        yield c


def _post(client: httpx.Client, path: str, body: dict) -> dict:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _chat_ids(tokenizer, messages) -> list[int]:
    """The prompt vLLM builds for a chat request: the template's text, tokenized as is."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def test_tokenize_and_detokenize_have_vllms_shapes(client, tiny_model) -> None:
    tok = tiny_model.tokenizer
    got = _post(client, "/tokenize", {"prompt": PROMPT_TEXT, "return_token_strs": True})
    ids = tok.encode(PROMPT_TEXT, add_special_tokens=True)
    assert got == {
        "count": len(ids),
        "max_model_len": CONTEXT,
        "tokens": ids,
        "token_strs": [decode(tok, [t]) for t in ids],
    }
    chat = _post(client, "/tokenize", {"messages": MESSAGES})
    assert chat["tokens"] == _chat_ids(tok, MESSAGES) and chat["token_strs"] is None
    assert _post(client, "/detokenize", {"tokens": ids}) == {"prompt": PROMPT_TEXT}
    assert _post(client, "/detokenize", {"tokens": chat["tokens"]})[
        "prompt"
    ] == tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)


def test_a_text_prompt_is_tokenized_by_the_server(client, tiny_model) -> None:
    ids = tiny_model.tokenizer.encode(PROMPT_TEXT, add_special_tokens=True)
    common = {"max_tokens": 8, "seed": 4, "temperature": 0.8, "return_token_ids": True}
    text = _post(client, "/v1/completions", {"prompt": PROMPT_TEXT, **common})["choices"][0]
    as_ids = _post(client, "/v1/completions", {"prompt": ids, **common})["choices"][0]
    assert text["prompt_token_ids"] == ids
    assert text["token_ids"] == as_ids["token_ids"] and len(text["token_ids"]) >= 1
    assert text["text"] == tiny_model.tokenizer.decode(text["token_ids"], skip_special_tokens=True)


def _first_holding(tokenizer, ids: list[int], stop: str) -> int:
    """The least k whose first k tokens' text holds `stop` (the rule, by a linear scan)."""
    return next(k for k in range(1, len(ids) + 1) if stop in decode(tokenizer, ids[:k]))


def _stop_in(pieces: list[str], full: str, within: bool) -> str | None:
    """A stop string taken from the middle of a generated text: one token's whole text (four
    characters or more: few tokens hold it), or spanning two tokens (the last character of one
    and the first of the next); None when this sample has none."""
    for i in range(len(pieces) // 3, len(pieces) - 1):
        a, b = pieces[i], pieces[i + 1]
        cand = a if within else a[-1:] + b[:1]
        if (
            len(cand) >= (4 if within else 2)
            and cand.isprintable()
            and "\ufffd" not in cand
            and full.find(cand) > 0
        ):
            return cand
    return None


SEEDS = range(21, 37)  # sampled texts looked at in turn until one holds a usable stop string


@pytest.mark.parametrize("within", [True, False], ids=["inside-a-token", "across-tokens"])
def test_stop_strings_cut_the_text_and_the_tokens(server, client, tiny_model, within: bool) -> None:
    """Whatever the model generates: the first seed whose sample holds a usable stop string
    is the one checked (the tiny model's text is random, so which seed it is depends on the
    platform's arithmetic; one of 16 samples of 48 tokens always holds one)."""
    tok = tiny_model.tokenizer
    base = {
        "prompt": PROMPT_TEXT,
        "max_tokens": 48,
        "temperature": 1.0,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "logprobs": 2,
    }
    for seed in SEEDS:
        common = {**base, "seed": seed}
        free = _post(client, "/v1/completions", common)["choices"][0]
        ids = free["token_ids"]
        full = decode(tok, ids)
        stop = _stop_in([decode(tok, [t]) for t in ids], full, within)
        if stop is not None:
            break
    else:
        pytest.fail(f"no sample of seeds {SEEDS.start}-{SEEDS.stop - 1} holds a stop string")
    k = _first_holding(tok, ids, stop)
    before = server.metrics()["bt_generation_tokens_total"]
    cut = _post(client, "/v1/completions", {**common, "stop": stop})["choices"][0]
    generated = server.metrics()["bt_generation_tokens_total"] - before
    if within:  # a token whose text holds the stop ends the row there: no tokens past it
        assert generated < len(ids), (generated, len(ids))
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert cut["token_ids"] == ids[:k]  # the same tokens up to where the text first holds it
    assert cut["text"] == full[: full.find(stop)]
    assert len(cut["logprobs"]["token_logprobs"]) == k == len(cut["bt"]["entropies"])
    kept = _post(
        client,
        "/v1/completions",
        {**common, "stop": [stop, "\x00never"], "include_stop_str_in_output": True},
    )["choices"][0]
    assert kept["text"] == full[: full.find(stop) + len(stop)] and kept["token_ids"] == ids[:k]


def test_chat_completions_use_the_chat_template(client, tiny_model) -> None:
    tok = tiny_model.tokenizer
    prompt = _chat_ids(tok, MESSAGES)
    body = {
        "model": None,
        "messages": MESSAGES,
        "max_completion_tokens": 6,
        "seed": 8,
        "temperature": 0.7,
        "logprobs": True,
        "top_logprobs": 3,
        "return_token_ids": True,
    }
    got = _post(client, "/v1/chat/completions", body)
    ch = got["choices"][0]
    assert got["object"] == "chat.completion" and got["prompt_token_ids"] == prompt
    plain = _post(
        client,
        "/v1/completions",
        {
            "prompt": prompt,
            "max_tokens": 6,
            "seed": 8,
            "temperature": 0.7,
            "return_token_ids": True,
        },
    )
    assert ch["token_ids"] == plain["choices"][0]["token_ids"]
    assert ch["message"] == {
        "role": "assistant",
        "content": tok.decode(ch["token_ids"], skip_special_tokens=True),
    }
    assert ch["finish_reason"] in ("stop", "length") and got["usage"]["prompt_tokens"] == len(
        prompt
    )
    lp = ch["logprobs"]["content"]
    assert len(lp) == len(ch["token_ids"]) and all(len(t["top_logprobs"]) == 3 for t in lp)


def test_every_request_is_one_log_line(server, client) -> None:
    n = len(server.log)
    _post(
        client,
        "/v1/completions",
        {"prompt": PROMPT_TEXT, "max_tokens": 3, "seed": 1, "temperature": 0},
    )
    client.get("/health")
    client.post("/v1/completions", content=b"null", headers={"Content-Type": "application/json"})
    for _ in range(100):  # the log is read on a thread: bounded wait for the three lines
        if len(server.log) >= n + 3:
            break
        time.sleep(0.05)
    lines = server.log[n : n + 3]
    assert lines[0].startswith("bt serve: POST /v1/completions 200 ") and "prompt +" in lines[0]
    assert " completion tokens " in lines[0] and lines[0].rstrip().endswith("s")
    assert lines[1].startswith("bt serve: GET /health 200 no tokens ")
    assert lines[2].startswith("bt serve: POST /v1/completions 400 no tokens ")
    assert len(server.log) == n + 3, server.log[n:]


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "path", ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"]
)
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"null",
        b"  ",
        b"[]",
        b"5",
        b'"text"',
        b"{",
        b"\xff\xfe",
        DEEP,
        b"{}",
        b'{"prompt": null, "messages": null}',
        b'{"prompt": [], "tokens": [-1], "messages": []}',
    ],
    ids=[
        "empty",
        "null",
        "blank",
        "list",
        "number",
        "string",
        "cut",
        "not-utf8",
        "deep",
        "no-fields",
        "nulls",
        "empties",
    ],
)
def test_bodies_it_cannot_serve_are_400_json(client, path: str, raw: bytes) -> None:
    """Each is a 400 naming what is wrong: never a 500, and a null body is not "too large"
    (it was a 413: the reader's "over the limit" and JSON null were the same None)."""
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (r.status_code, r.text)
    err = r.json()
    assert (
        err
        == {"object": "error", "message": err["message"], "type": "BadRequestError", "code": 400}
        and "bytes" not in err["message"]
    )


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/v1/completions", {"prompt": [1], "bt": {"stop_sequences": 5}}, "bt.stop_sequences"),
        ("/v1/completions", {"prompt": [1], "seed": "x"}, "seed"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "2 prompts"),
        ("/v1/completions", {"prompt": [1], "stop": 7}, "stop:"),
        ("/v1/completions", {"prompt": [1], "ignore_eos": True}, "ignore_eos"),
        ("/v1/completions", {"prompt": [1], "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/chat/completions", {"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools"),
        ("/v1/chat/completions", {"messages": MESSAGES, "stream": True}, "stream"),
        ("/v1/completions", {"prompt": " x" * 10_000, "max_tokens": 1}, "context of 8,192"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "only text parts",
        ),
        ("/v1/chat/completions", {"messages": MESSAGES, "top_logprobs": 2}, "needs logprobs"),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": CONTEXT}, "max_tokens"),
        ("/tokenize", {"prompt": "a", "messages": MESSAGES}, "one of prompt"),
        ("/detokenize", {"tokens": [10**9]}, "outside the vocabulary"),
    ],
)
def test_wrong_fields_are_400s_naming_them(client, path: str, body: dict, words: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400 and words in r.json()["message"], r.text


def test_unknown_routes_and_methods_are_json(client) -> None:
    r = client.get("/v1/embeddings")
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["message"]
    r = client.get("/tokenize")
    assert r.status_code == 405 and r.json()["type"] == "MethodNotAllowedError"


def test_null_max_tokens_and_seed_mean_the_rest_of_the_context_and_a_random_seed(
    tiny_model,
) -> None:
    served = Served(("m",), 49152, max_len=32, tokenizer=tiny_model.tokenizer)
    job, _ = parse_completion_request(
        {"prompt": [1] * 10, "max_tokens": None, "seed": None}, served
    )
    assert job.request.max_tokens == 22 and 0 <= job.request.seed < 2**32
    job, _ = parse_completion_request({"prompt": [1] * 10}, served)
    assert job.request.max_tokens == 16  # vLLM's default when absent
    job, _ = parse_chat_request(
        {"messages": MESSAGES}, Served(("m",), 49152, 4096, tiny_model.tokenizer)
    )
    assert job.request.max_tokens == 4096 - len(_chat_ids(tiny_model.tokenizer, MESSAGES))
    with pytest.raises(BadRequest, match="reads token ids only"):
        parse_completion_request({"prompt": "text"}, Served(("m",), 49152))


def test_find_stop_is_the_first_token_whose_text_holds_a_stop(tiny_model) -> None:
    tok = tiny_model.tokenizer
    ids = tok.encode(" one two three, four five. Six", add_special_tokens=False)
    text = decode(tok, ids)
    for stop in ("two", "o t", "e, f", ".", " Six", "ree, four fi"):
        hit = find_stop(tok, ids, [stop, "absent!"])
        assert hit is not None and hit.stop == stop and hit.tokens == _first_holding(tok, ids, stop)
        assert stop in text
    assert find_stop(tok, ids, ["absent!"]) is None and find_stop(tok, [], ["a"]) is None
    hit = find_stop(tok, ids, ["four", "o t"])  # both: the one the text holds first wins
    assert hit.stop == "o t"
    seqs = StopStrings(tok).sequences(", f")
    assert all(", f" in decode(tok, s) for s in seqs)  # every sequence spells it: no early end
    assert tuple(tok.encode(", f", add_special_tokens=False)) in seqs
    assert len(StopStrings(tok).sequences("e")) == SEQUENCES_PER_STOP  # capped, commonest first
