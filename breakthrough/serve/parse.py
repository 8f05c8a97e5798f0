"""Request bodies of `bt serve` read into work, or refused with one line naming the field
(`BadRequest`, HTTP 400). Pure: no model, only the tokenizer for text.

`/v1/completions` (vLLM's fields): `prompt` (token ids, or text the server tokenizes),
`max_tokens` (absent: 16; null: the rest of the context), `temperature`, `top_p`, `top_k`,
`min_p`, `seed` (the row's own hashed-Gumbel randomness: exactly the local MLX backend's tokens
for the same seed; absent: a random one, as vLLM), `n` = 1, `logprobs` (<= 20), `stop` (strings;
`stops.py`), `stop_token_ids`, `include_stop_str_in_output`, `skip_special_tokens` (the text
only), `add_special_tokens` (text prompts), `prompt_logprobs` (scores the prompt),
`return_tokens_as_token_ids`, `return_token_ids`. And `bt`, what vLLM's format cannot carry:
`stop_sequences` (multi-token, as token ids), the reuse hints `shared_prefix` {key, ids, starts}
(one prefill per cell, cut back per request), `key` / `keep_state` / `follows` (the answer
phase continues the reasoning phase's live cache) and `lane` (the branch index: a row's place
among rows attending over one prefix together, `GenRequest.lane`).

`/v1/chat/completions`: `messages` rendered by the model's chat template, the same sampling
fields, `max_completion_tokens` (or `max_tokens`; absent: the rest of the context), `logprobs`
(true) with `top_logprobs`. `/tokenize` {`prompt` | `messages`, `add_special_tokens`,
`add_generation_prompt`, `return_token_strs`} and `/detokenize` {`tokens`}, as vLLM."""

from __future__ import annotations

import concurrent.futures
import secrets
from dataclasses import dataclass, replace
from typing import Any

from breakthrough.engine.contract import GenRequest, SharedPrefix
from breakthrough.protocol import Sampling
from breakthrough.serve.errors import BadRequest
from breakthrough.serve.generation import MAX_TOP, Job
from breakthrough.serve.stops import MAX_STOP_CHARS, MAX_STOPS, StopStrings

ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(frozen=True)
class Served:
    """What requests are checked against: the model's names, its vocabulary size, the context
    (`max_len`, 0: unknown, no cap) and its tokenizer (None: text is refused)."""

    names: tuple[str, ...]
    vocab: int
    max_len: int = 0
    tokenizer: Any = None
    stop_strings: StopStrings | None = None


@dataclass(frozen=True)
class Options:
    """How to answer a generation request (the fields that do not change the tokens)."""

    logprobs: int | None = None  # top log-probs per token (None: no logprobs object)
    as_ids: bool = False  # return_tokens_as_token_ids
    token_ids: bool = False  # return_token_ids: prompt_token_ids and token_ids in the answer
    prompt_logprobs: int | None = None
    stops: tuple[str, ...] = ()
    include_stop: bool = False  # include_stop_str_in_output
    skip_special: bool = True  # skip_special_tokens (the text; the ids keep them)


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _int(
    body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None
) -> int | None:
    v = body.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{name}: expected an integer, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        if hi is None:
            raise BadRequest(f"{name}: expected an integer of at least {lo}, got {v}")
        if lo is None:
            raise BadRequest(f"{name}: expected an integer of at most {hi}, got {v}")
        raise BadRequest(f"{name}: expected an integer in [{lo}, {hi}], got {v}")
    return v


def _float(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= float(v) <= hi:
        raise BadRequest(f"{name}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise BadRequest(f"{name}: expected true or false, got {v!r}")
    return v


def _ids(v: Any, name: str, vocab: int, allow_empty: bool = False) -> list[int]:
    if not isinstance(v, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in v
    ):
        raise BadRequest(f"{name}: expected a list of token ids")
    if not v and not allow_empty:
        raise BadRequest(f"{name}: empty")
    bad = [t for t in v if not 0 <= t < vocab]
    if bad:
        raise BadRequest(f"{name}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    return list(v)


def _model(body: dict, served: Served) -> None:
    model = body.get("model")
    if model is not None and model not in served.names:
        raise BadRequest(f"model: {model!r} is not served here (serving {served.names[0]!r})")


def _tokenizer(served: Served, what: str) -> Any:
    if served.tokenizer is None:
        raise BadRequest(f"{what}: this server reads token ids only")
    return served.tokenizer


def _text(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise BadRequest(f"{name}: expected a string")
    if not v:
        raise BadRequest(f"{name}: empty")
    return v


def _prompt(body: dict, served: Served) -> list[int]:
    """`prompt`: token ids (also one list in a list), or one text the tokenizer encodes."""
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest(
            "prompt: missing (a list of token ids, or a text the server tokenizes)"
            if served.tokenizer is not None
            else "prompt: missing (a list of token ids)"
        )
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = _encode(served, _text(prompt, "prompt"), _bool(body, "add_special_tokens", True))
    elif isinstance(prompt, list) and prompt and all(isinstance(p, (list, str)) for p in prompt):
        raise BadRequest(
            f"prompt: {len(prompt)} prompts in one request; bt serve answers one "
            "prompt per request (send one request each)"
        )
    else:
        if served.max_len and isinstance(prompt, list) and len(prompt) >= served.max_len:
            _too_long(len(prompt), served.max_len)  # before reading the ids
        ids = _ids(prompt, "prompt", served.vocab)
    if served.max_len and len(ids) >= served.max_len:
        _too_long(len(ids), served.max_len)
    return ids


def _too_long(n: int, max_len: int) -> None:
    raise BadRequest(
        f"prompt: {n:,} tokens do not fit the model's context of {max_len:,} "
        "tokens (prompt + max_tokens must fit)"
    )


def _encode(served: Served, text: str, special: bool) -> list[int]:
    ids = list(_tokenizer(served, "prompt").encode(text, add_special_tokens=special))
    if not ids:
        raise BadRequest("prompt: the text has no tokens")
    return ids


def _messages(body: dict, served: Served, generation_prompt: bool) -> list[int]:
    """`messages` rendered by the model's chat template, as token ids (vLLM's chat prompt)."""
    tok = _tokenizer(served, "messages")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages: expected a non-empty list of {role, content}")
    clean = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(
                f"messages[{i}]: expected {{role, content}} with role one of {', '.join(ROLES)}"
            )
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: text only
            texts = []
            for j, part in enumerate(content):
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    raise BadRequest(
                        f"messages[{i}].content[{j}]: only text parts "
                        '({"type": "text", "text": ...}) are served'
                    )
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content: expected a string or a list of text parts")
        clean.append({"role": m["role"], "content": content})
    if not getattr(tok, "chat_template", None):
        raise BadRequest(
            "messages: this model has no chat template; send a prompt to /v1/completions instead"
        )
    try:
        text = tok.apply_chat_template(
            clean, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as exc:  # noqa: BLE001 - the template refused these messages (jinja raise)
        raise BadRequest(f"messages: the chat template refused them: {exc}") from None
    ids = _encode(served, text, _bool(body, "add_special_tokens", False))
    if served.max_len and len(ids) >= served.max_len:
        _too_long(len(ids), served.max_len)
    return ids


def _stops(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("stop: expected a non-empty string or a list of them")
    if len(stop) > MAX_STOPS:
        raise BadRequest(f"stop: {len(stop)} strings; at most {MAX_STOPS}")
    long = [s for s in stop if len(s) > MAX_STOP_CHARS]
    if long:
        raise BadRequest(f"stop: a string of {len(long[0]):,} characters; at most {MAX_STOP_CHARS}")
    return tuple(dict.fromkeys(stop))


UNSUPPORTED = (  # fields that would change the answer, accepted only at their neutral value
    ("n", lambda v: v in (None, 1)),
    ("best_of", lambda v: v in (None, 1)),
    ("stream", lambda v: not v),
    ("echo", lambda v: not v),
    ("use_beam_search", lambda v: not v),
    ("ignore_eos", lambda v: not v),
    ("suffix", lambda v: not v),
    ("logit_bias", lambda v: not v),
    ("presence_penalty", lambda v: v in (None, 0)),
    ("frequency_penalty", lambda v: v in (None, 0)),
    ("repetition_penalty", lambda v: v in (None, 1)),
    ("min_tokens", lambda v: v in (None, 0)),
    ("tools", lambda v: not v),
    ("response_format", lambda v: v in (None, {"type": "text"})),
)


def _unsupported(body: dict) -> None:
    """Refuse a field bt serve would otherwise ignore while the client counts on it."""
    for name, ok in UNSUPPORTED:
        if not ok(body.get(name)):
            raise BadRequest(f"{name}: {body.get(name)!r} is not supported by bt serve")


def _generation(
    body: dict,
    served: Served,
    prompt: list[int],
    max_tokens: int | None,
    stop_ids: list[tuple[int, ...]],
    stops: tuple[str, ...],
) -> GenRequest:
    """The GenRequest of a generation body whose prompt and stop ids are read: sampling, seed,
    max_tokens (None: the rest of the context, or 16 where it is unknown) within the context."""
    _unsupported(body)
    sampling = Sampling(
        temperature=_float(body, "temperature", 1.0, 0.0, 100.0),
        top_p=_float(body, "top_p", 1.0, 1e-9, 1.0),
        top_k=max(0, _int(body, "top_k", 0, -1, None) or 0),
        min_p=_float(body, "min_p", 0.0, 0.0, 1.0),
    )
    stop_ids = stop_ids + [
        (t,) for t in _ids(body.get("stop_token_ids") or [], "stop_token_ids", served.vocab, True)
    ]
    if stops:
        strings = served.stop_strings or StopStrings(_tokenizer(served, "stop"))
        for s in stops:
            stop_ids.extend(strings.sequences(s))
    max_len = served.max_len
    if max_tokens is None:
        max_tokens = max_len - len(prompt) if max_len else 16
    if max_len and len(prompt) + max_tokens > max_len:
        raise BadRequest(
            f"max_tokens: {max_tokens:,} after a {len(prompt):,}-token prompt exceed "
            f"the model's context of {max_len:,} tokens (at most {max_len - len(prompt):,})"
        )
    seed = _int(body, "seed", None)
    return GenRequest(
        key="pending",
        prompt=prompt,
        max_tokens=max_tokens,
        seed=(secrets.randbits(32) if seed is None else seed) & 0xFFFFFFFF,
        stop_sequences=tuple(dict.fromkeys(stop_ids)),
        sampling=sampling,
    )


def _max_tokens(body: dict, name: str, default: int | None) -> int | None:
    """`name` as max_tokens: absent gives `default`, null None (the rest of the context)."""
    return _int(body, name, default, 1, None) if name in body else default


def parse_completion_request(body: Any, served: Served) -> tuple[Job, Options]:
    """A `/v1/completions` body as a Job (or BadRequest naming the field). prompt + max_tokens
    must fit the context, as vLLM's max_model_len."""
    body = _object(body)
    _model(body, served)
    prompt = _prompt(body, served)
    bt = body.get("bt") or {}
    if not isinstance(bt, dict):
        raise BadRequest("bt: expected an object")
    stop_ids: list[tuple[int, ...]] = []
    seqs = bt.get("stop_sequences") or []
    if not isinstance(seqs, list):
        raise BadRequest("bt.stop_sequences: expected a list of token-id lists")
    for i, s in enumerate(seqs):
        stop_ids.append(tuple(_ids(s, f"bt.stop_sequences[{i}]", served.vocab)))
    shared = None
    if bt.get("shared_prefix") is not None:
        sp = bt["shared_prefix"]
        if not isinstance(sp, dict) or not isinstance(sp.get("key"), str):
            raise BadRequest("bt.shared_prefix: expected {key, ids, starts}")
        if served.max_len and isinstance(sp.get("ids"), list) and len(sp["ids"]) > served.max_len:
            raise BadRequest(
                f"bt.shared_prefix.ids: {len(sp['ids']):,} tokens exceed the model's "
                f"context of {served.max_len:,} tokens"
            )
        ids = tuple(_ids(sp.get("ids"), "bt.shared_prefix.ids", served.vocab))
        shared = SharedPrefix(
            key=sp["key"],
            ids=ids,
            starts=tuple(
                _ids(sp.get("starts") or [], "bt.shared_prefix.starts", len(ids) + 1, True)
            ),
        )
    client_key = bt.get("key")
    follows = bt.get("follows")
    for name, v in (("bt.key", client_key), ("bt.follows", follows)):
        if v is not None and not isinstance(v, str):
            raise BadRequest(f"{name}: expected a string")
    lane = bt.get("lane", 0)
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < 2**31:
        raise BadRequest("bt.lane: expected an integer >= 0")
    stops = _stops(body)
    req = _generation(body, served, prompt, _max_tokens(body, "max_tokens", 16), stop_ids, stops)
    req = replace(req, shared_prefix=shared, keep_state=bool(bt.get("keep_state")), lane=lane)
    cell = str(bt.get("cell") or (shared.key if shared else ""))
    job = Job(
        future=concurrent.futures.Future(),
        request=req,
        client_key=client_key,
        client_follows=follows,
        cell=cell,
    )
    opts = Options(
        logprobs=_int(body, "logprobs", None, 0, MAX_TOP),
        as_ids=bool(body.get("return_tokens_as_token_ids")),
        token_ids=bool(body.get("return_token_ids")),
        prompt_logprobs=_int(body, "prompt_logprobs", None, 0, MAX_TOP),
        stops=stops,
        include_stop=_bool(body, "include_stop_str_in_output", False),
        skip_special=_bool(body, "skip_special_tokens", True),
    )
    return job, opts


def parse_chat_request(body: Any, served: Served) -> tuple[Job, Options]:
    """A `/v1/chat/completions` body as a Job: the messages through the chat template, then
    generation as for a completion (max_tokens absent: the rest of the context, as vLLM)."""
    body = _object(body)
    _model(body, served)
    prompt = _messages(body, served, _bool(body, "add_generation_prompt", True))
    if "bt" in body:
        raise BadRequest("bt: the bt extras apply to /v1/completions")
    if "max_completion_tokens" in body and body["max_completion_tokens"] is not None:
        max_tokens = _max_tokens(body, "max_completion_tokens", None)
    else:
        max_tokens = _max_tokens(body, "max_tokens", None)
    stops = _stops(body)
    req = _generation(body, served, prompt, max_tokens, [], stops)
    top = _int(body, "top_logprobs", None, 0, MAX_TOP)
    want = _bool(body, "logprobs", False)
    if top is not None and not want:
        raise BadRequest("top_logprobs: needs logprobs: true")
    opts = Options(
        logprobs=(top or 0) if want else None,
        token_ids=_bool(body, "return_token_ids", False),
        stops=stops,
        include_stop=_bool(body, "include_stop_str_in_output", False),
        skip_special=_bool(body, "skip_special_tokens", True),
    )
    return Job(future=concurrent.futures.Future(), request=req), opts


def parse_tokenize_request(body: Any, served: Served) -> tuple[list[int], bool]:
    """A `/tokenize` body: the token ids of `prompt` (add_special_tokens, default true) or of
    `messages` through the chat template (add_generation_prompt, default true), and whether
    each token's text is wanted (`return_token_strs`)."""
    body = _object(body)
    _model(body, served)
    if ("prompt" in body) == ("messages" in body):
        raise BadRequest("the body needs one of prompt (text) or messages")
    if "prompt" in body:
        ids = list(
            _tokenizer(served, "prompt").encode(
                _text(body["prompt"], "prompt"),
                add_special_tokens=_bool(body, "add_special_tokens", True),
            )
        )
    else:
        ids = _messages(
            body,
            Served(served.names, served.vocab, 0, served.tokenizer),
            _bool(body, "add_generation_prompt", True),
        )
    return ids, _bool(body, "return_token_strs", False)


def parse_detokenize_request(body: Any, served: Served) -> list[int]:
    """A `/detokenize` body: its `tokens` (ids within the vocabulary; may be empty)."""
    body = _object(body)
    _model(body, served)
    _tokenizer(served, "tokens")
    return _ids(body.get("tokens"), "tokens", served.vocab, allow_empty=True)
