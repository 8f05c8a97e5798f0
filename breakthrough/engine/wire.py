"""The two wire formats an HTTP backend speaks, as pure functions: request bodies out, parsed
completions in. No sockets here (engine/http_client.py sends), so recorded responses of real
servers can be parsed in tests exactly as live ones.

* vLLM (`POST /v1/completions`, OpenAI-style; also what `bt serve` answers): `prompt` is a list
  of token ids; `return_tokens_as_token_ids` makes every logprob key "token_id:N";
  `return_token_ids` adds `choices[0].token_ids`; `skip_special_tokens=false`; per-request
  `seed`; `stop_token_ids` (the model's EOS ids and single-token stop sequences; longer stop
  sequences are matched here, client-side); top-20 `logprobs`; `n=1`. Cached prompt tokens come
  in `usage.prompt_tokens_details.cached_tokens` when the server reports them (vLLM with
  `--enable-prompt-tokens-details`; always from bt serve). A `bt` object in the request and in
  the choice carries what vLLM's format cannot (the reuse hints; exact entropies); it is sent
  only to a server that says it is bt serve.
* SGLang (`POST /generate`): `input_ids`, `sampling_params` (max_new_tokens, temperature, top_p,
  top_k, min_p, stop_token_ids, `sampling_seed` (binds only when the server runs with
  --enable-deterministic-inference), skip_special_tokens=false, no_stop_trim=true),
  `return_logprob`, `top_logprobs_num`; the answer has `output_ids` and `meta_info`
  (finish_reason {type, matched}, cached_tokens, output_token_logprobs [[logprob, id, text]],
  output_top_logprobs, input_token_logprobs).

A parse failure raises `MalformedResponse` (the client retries, then fails the request), and so
does an answer in the documented format whose values cannot be true (`check_values`: a token id
outside the model's vocabulary, a log-prob that is NaN or above 0, counts that disagree): a
server or a proxy in between is never taken on faith."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from breakthrough.engine.contract import GenRequest

TOP_LOGPROBS = 20


class MalformedResponse(ValueError):
    """A server answered 2xx with a body that is not the documented format."""


@dataclass
class Completion:
    """One generated sequence as a server reported it (before client-side stop matching).

    finish: "stop" (EOS or a stop token id) | "length" | "abort" | ... as the server says.
    stop_token: the stop token id the server matched, when it says (vLLM `stop_reason`, SGLang
        `matched`).
    top: per generated token, {token id: logprob} of the reported most likely tokens.
    bt: the bt serve extra object (exact entropies, finish reason), else None."""

    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    finish: str
    stop_token: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    bt: dict[str, Any] | None = None
    raw_finish: Any = field(default=None, repr=False)


def _sampling_fields(req: GenRequest) -> dict[str, Any]:
    s = req.sampling
    return {
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "top_k": int(s.top_k) if s.top_k > 0 else -1,
        "min_p": float(s.min_p),
    }


def stop_token_ids(req: GenRequest, eos_ids: Iterable[int]) -> list[int]:
    """Token ids the server itself stops at: the model's EOS ids and one-token stop sequences."""
    ids = {int(e) for e in eos_ids} | {int(s[0]) for s in req.stop_sequences if len(s) == 1}
    return sorted(ids)


def bt_extras(req: GenRequest, namespace: str) -> dict[str, Any]:
    """The `bt` object for bt serve: the reuse hints (keys namespaced by the request's cell so
    two cells' "probe:64:0" never meet, the lane) and the multi-token stop sequences."""
    out: dict[str, Any] = {
        "cell": namespace,
        "key": f"{namespace}/{req.key}",
        "keep_state": bool(req.keep_state),
        "stop_sequences": [list(map(int, s)) for s in req.stop_sequences if s],
    }
    if req.lane:
        out["lane"] = int(req.lane)
    if req.follows is not None:
        out["follows"] = f"{namespace}/{req.follows}"
    if req.shared_prefix is not None:
        sp = req.shared_prefix
        out["shared_prefix"] = {"key": sp.key, "ids": list(sp.ids), "starts": list(sp.starts)}
    return out


# -- vLLM / bt serve -------------------------------------------------------------------------
def vllm_body(
    req: GenRequest, model: str, eos_ids: Sequence[int], extras: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in req.prompt],
        "max_tokens": int(req.max_tokens),
        "n": 1,
        "seed": int(req.seed),
        "logprobs": TOP_LOGPROBS,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "stop_token_ids": stop_token_ids(req, eos_ids),
        "ignore_eos": False,
        "include_stop_str_in_output": True,
        **_sampling_fields(req),
    }
    if extras is not None:
        body["bt"] = extras
    return body


def vllm_score_body(ids: Sequence[int], model: str) -> dict[str, Any]:
    """Score `ids` as a prompt: the log-probs of each position's token and its top-20."""
    return {
        "model": model,
        "prompt": [int(t) for t in ids],
        "max_tokens": 1,
        "n": 1,
        "temperature": 0.0,
        "prompt_logprobs": TOP_LOGPROBS,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
    }


def _token_id(key: Any) -> int:
    text = str(key)
    if text.startswith("token_id:"):
        text = text[len("token_id:") :]
    try:
        return int(text)
    except ValueError:
        raise MalformedResponse(
            f"logprob key {key!r} is not a token id (the server ignored return_tokens_as_token_ids)"
        ) from None


def _num(x: Any) -> float:
    if x is None:
        return float("nan")
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MalformedResponse(f"expected a number, got {x!r}")
    return float(x)


def _count(x: Any, what: str) -> int:
    """A count the server reports (absent: 0): a non-negative integer."""
    if x is None:
        return 0
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise MalformedResponse(f"{what} {x!r} is not a non-negative integer")
    return x


def _object(x: Any, what: str) -> dict[str, Any]:
    """An optional JSON object of the answer (absent: {})."""
    if x is None:
        return {}
    if not isinstance(x, dict):
        raise MalformedResponse(f"{what} is not an object")
    return x


def _choice(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise MalformedResponse("the response is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise MalformedResponse("expected exactly one choice")
    return choices[0]


def parse_vllm(body: Any) -> Completion:
    """A `/v1/completions` answer (n=1, logprobs, token ids) as a `Completion`."""
    ch = _choice(body)
    lp = ch.get("logprobs")
    if not isinstance(lp, dict):
        raise MalformedResponse("choice has no logprobs object")
    toks, chosen, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not isinstance(toks, list) or not isinstance(chosen, list) or not isinstance(tops, list):
        raise MalformedResponse("logprobs lacks tokens / token_logprobs / top_logprobs")
    ids = ch.get("token_ids")
    if ids is None:
        ids = [_token_id(t) for t in toks]
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise MalformedResponse("token_ids is not a list of integers")
    if not (len(ids) == len(toks) == len(chosen) == len(tops)):
        raise MalformedResponse(
            f"{len(ids)} token ids but {len(toks)} tokens / {len(chosen)} "
            f"logprobs / {len(tops)} top lists"
        )
    top: list[dict[int, float]] = []
    for t in tops:
        if t is None:
            top.append({})
        elif isinstance(t, dict):
            top.append({_token_id(k): _num(v) for k, v in t.items()})
        else:
            raise MalformedResponse("top_logprobs entry is not an object")
    finish = ch.get("finish_reason")
    if not isinstance(finish, str):
        raise MalformedResponse("choice has no finish_reason")
    stop = ch.get("stop_reason")
    usage = _object(body.get("usage"), "usage")
    details = _object(usage.get("prompt_tokens_details"), "usage.prompt_tokens_details")
    return Completion(
        tokens=[int(t) for t in ids],
        logprobs=[_num(x) for x in chosen],
        top=top,
        finish=finish,
        stop_token=stop if isinstance(stop, int) and not isinstance(stop, bool) else None,
        prompt_tokens=_count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        cached_tokens=_count(details.get("cached_tokens"), "cached_tokens"),
        bt=_object(ch.get("bt"), "choice.bt") or None,
        raw_finish=finish,
    )


def parse_vllm_prompt_logprobs(body: Any) -> list[dict[int, float]]:
    """`choices[0].prompt_logprobs` as one {token id: logprob} per prompt position ({} first)."""
    ch = _choice(body)
    plp = ch.get("prompt_logprobs")
    if not isinstance(plp, list):
        raise MalformedResponse("choice has no prompt_logprobs (server does not score prompts)")
    out: list[dict[int, float]] = []
    for pos in plp:
        if pos is None:
            out.append({})
            continue
        if not isinstance(pos, dict):
            raise MalformedResponse("prompt_logprobs entry is not an object")
        row = {}
        for k, v in pos.items():
            row[_token_id(k)] = _num(v.get("logprob") if isinstance(v, dict) else v)
        out.append(row)
    return out


# -- SGLang --------------------------------------------------------------------------------
def sglang_body(req: GenRequest, eos_ids: Iterable[int]) -> dict[str, Any]:
    s = req.sampling
    params = {
        "max_new_tokens": int(req.max_tokens),
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "top_k": int(s.top_k) if s.top_k > 0 else -1,
        "min_p": float(s.min_p),
        "stop_token_ids": stop_token_ids(req, eos_ids),
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "ignore_eos": False,
        "sampling_seed": int(req.seed) & 0x7FFFFFFF,
    }
    return {
        "input_ids": [int(t) for t in req.prompt],
        "sampling_params": params,
        "return_logprob": True,
        "top_logprobs_num": TOP_LOGPROBS,
        "logprob_start_len": -1,
    }


def sglang_score_body(ids: Sequence[int]) -> dict[str, Any]:
    return {
        "input_ids": [int(t) for t in ids],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "top_logprobs_num": TOP_LOGPROBS,
        "logprob_start_len": 0,
    }


def _triples(rows: Any, what: str) -> list[tuple[float, int]]:
    if not isinstance(rows, list):
        raise MalformedResponse(f"meta_info.{what} is not a list")
    out = []
    for r in rows:
        if (
            not isinstance(r, (list, tuple))
            or len(r) < 2
            or not isinstance(r[1], int)
            or isinstance(r[1], bool)
        ):
            raise MalformedResponse(f"meta_info.{what} entry {r!r} is not [logprob, token_id, ...]")
        out.append((_num(r[0]), int(r[1])))
    return out


def _sglang_answer(body: Any) -> tuple[dict, dict]:
    """(answer, its meta_info) of a `/generate` body for one prompt (SGLang may wrap it in a
    one-element list)."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise MalformedResponse("the response has no meta_info object")
    return body, body["meta_info"]


def parse_sglang(body: Any) -> Completion:
    """A `/generate` answer (one prompt, return_logprob) as a `Completion`."""
    body, meta = _sglang_answer(body)
    out_lp = _triples(meta.get("output_token_logprobs"), "output_token_logprobs")
    ids = body.get("output_ids")
    if ids is None:
        ids = [t for _, t in out_lp]
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise MalformedResponse("output_ids is not a list of integers")
    tops_raw = meta.get("output_top_logprobs") or [None] * len(out_lp)
    if not isinstance(tops_raw, list):
        raise MalformedResponse("meta_info.output_top_logprobs is not a list")
    if len(ids) != len(out_lp) or len(tops_raw) != len(out_lp):
        raise MalformedResponse(
            f"{len(ids)} output ids but {len(out_lp)} logprobs / {len(tops_raw)} top lists"
        )
    top = [
        {} if t is None else {tok: lp for lp, tok in _triples(t, "output_top_logprobs")}
        for t in tops_raw
    ]
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):
        finish, matched = str(fr.get("type")), fr.get("matched")
    elif isinstance(fr, str):
        finish, matched = fr, None
    else:
        raise MalformedResponse("meta_info has no finish_reason")
    return Completion(
        tokens=[int(t) for t in ids],
        logprobs=[lp for lp, _ in out_lp],
        top=top,
        finish=finish,
        stop_token=matched if isinstance(matched, int) and not isinstance(matched, bool) else None,
        prompt_tokens=_count(meta.get("prompt_tokens"), "meta_info.prompt_tokens"),
        cached_tokens=_count(meta.get("cached_tokens"), "meta_info.cached_tokens"),
        raw_finish=fr,
    )


def parse_sglang_prompt_logprobs(body: Any) -> list[dict[int, float]]:
    """meta_info.input_token_logprobs / input_top_logprobs as {token id: logprob} per position."""
    _, meta = _sglang_answer(body)
    own = _triples(meta.get("input_token_logprobs"), "input_token_logprobs")
    tops = meta.get("input_top_logprobs") or [None] * len(own)
    out = []
    for (lp, tok), t in zip(own, tops, strict=False):
        row = {} if t is None else {i: v for v, i in _triples(t, "input_top_logprobs")}
        if math.isfinite(lp):
            row[tok] = lp
        out.append(row)
    return out


# -- what the values may be --------------------------------------------------------------------
# A log-prob is log p <= 0. The slack admits float rounding of a near-certain token's log-prob
# (logit - logsumexp computed in float32), never a value a distribution cannot give.
LOGPROB_SLACK = 1e-4


def check_values(comp: Completion, vocab_size: int, prompt_len: int) -> Completion:
    """`comp` unchanged when every value a stored sample depends on can be true of the model
    (a proxy or a broken server can alter answers: without the check a token id of 10,000,000,
    a NaN or a +5 log-prob would be stored): each token id (generated, matched stop, top-k) in
    0..vocab_size - 1; each generated token's log-prob finite and <= 0; each top-k log-prob <= 0 (or
    -inf); bt serve's exact entropies one per token, finite, in [0, ln vocab_size] (sampling
    entropies may be NaN); cached prompt tokens at most the prompt's. Else `MalformedResponse`
    naming the first value that is wrong, which the client treats like any malformed answer
    (retried, then the request fails: stored in the run's errors table, retried by a rerun)."""
    vocab = int(vocab_size)

    def token(t: int, where: str) -> None:
        if not 0 <= t < vocab:
            raise MalformedResponse(
                f"{where}: token id {t:,} is outside the model's vocabulary (0..{vocab - 1:,})"
            )

    for i, t in enumerate(comp.tokens):
        token(t, f"token {i}")
    if comp.stop_token is not None:
        token(comp.stop_token, "the matched stop token")
    for i, lp in enumerate(comp.logprobs):
        if not (math.isfinite(lp) and lp <= LOGPROB_SLACK):
            raise MalformedResponse(f"token {i}: log-prob {lp!r} is not a finite number <= 0")
    for i, row in enumerate(comp.top):
        for t, lp in row.items():
            token(t, f"top-{TOP_LOGPROBS} of token {i}")
            if not lp <= LOGPROB_SLACK:  # NaN fails too; -inf is a probability of 0
                raise MalformedResponse(
                    f"top-{TOP_LOGPROBS} of token {i}: log-prob {lp!r} of "
                    f"token id {t} is not a number <= 0"
                )
    if comp.cached_tokens > prompt_len:
        raise MalformedResponse(
            f"{comp.cached_tokens:,} cached prompt tokens of a {prompt_len:,}-token prompt"
        )
    bt = comp.bt or {}
    top_entropy = math.log(max(vocab, 1)) + LOGPROB_SLACK
    for name, nan_ok in (("entropies", False), ("sampling_entropies", True)):
        if name not in bt:
            continue
        values = bt[name]
        if not isinstance(values, list) or len(values) != len(comp.tokens):
            raise MalformedResponse(
                f"bt.{name}: expected {len(comp.tokens)} numbers, one per "
                f"token, got {str(values)[:60]}"
            )
        for i, v in enumerate(values):
            v = _num(v)
            if not ((nan_ok and math.isnan(v)) or -LOGPROB_SLACK <= v <= top_entropy):
                raise MalformedResponse(
                    f"bt.{name}[{i}]: {v!r} is not an entropy in [0, ln {vocab:,}]"
                )
    if "cached_tokens" in bt:
        cached = _count(bt["cached_tokens"], "bt.cached_tokens")
        if cached > prompt_len:
            raise MalformedResponse(
                f"bt.cached_tokens: {cached:,} cached prompt tokens of a "
                f"{prompt_len:,}-token prompt"
            )
    return comp


def truncate_at_stop(tokens: Sequence[int], stops: Sequence[Sequence[int]]) -> int | None:
    """Length of the shortest head of `tokens` that ends with one of `stops` (client-side
    matching of multi-token stop sequences, as the MLX backend stops), else None."""
    seqs = [tuple(int(t) for t in s) for s in stops if len(s) > 0]
    if not seqs:
        return None
    toks = [int(t) for t in tokens]
    for end in range(1, len(toks) + 1):
        for s in seqs:
            if end >= len(s) and tuple(toks[end - len(s) : end]) == s:
                return end
    return None
