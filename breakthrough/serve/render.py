"""Answers of `bt serve` in vLLM's shapes: the completion and chat-completion objects (with
`prompt_token_ids` / `token_ids` under `return_token_ids`, as vLLM), and for completions the
`bt` extras bt's client reads (exact entropies, bt's finish reason, cached tokens)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from breakthrough.engine.contract import GenRequest, GenResult
from breakthrough.models.tokens import decode
from breakthrough.serve.parse import Options
from breakthrough.serve.stops import cut, find_stop


def _text(tokenizer: Any, ids: Sequence[int], skip_special: bool) -> str:
    return tokenizer.decode(
        [int(t) for t in ids], skip_special_tokens=skip_special, clean_up_tokenization_spaces=False
    )


def finish(
    res: GenResult, req: GenRequest, opts: Options, tokenizer: Any
) -> tuple[GenResult, str, str, Any]:
    """The result as answered: cut at the first stop string (`stops.find_stop`), its text
    (cut before the stop string, or after it with include_stop_str_in_output), vLLM's
    finish_reason ("stop" | "length") and stop_reason (the stop string or token, else None)."""
    hit = find_stop(tokenizer, res.tokens, opts.stops)
    if hit is not None:
        res = cut(res, hit.tokens)
        text = _text(tokenizer, res.tokens, opts.skip_special)
        at = text.find(hit.stop)
        if at >= 0:
            text = text[: at + (len(hit.stop) if opts.include_stop else 0)]
        return res, text, "stop", hit.stop
    text = _text(tokenizer, res.tokens, opts.skip_special)
    if res.finish_reason == "length":
        return res, text, "length", None
    if res.finish_reason == "eos":
        return res, text, "stop", None
    matched = [s for s in req.stop_sequences if tuple(res.tokens[-len(s) :]) == tuple(s)]
    stop_reason = (matched[0][0] if len(matched[0]) == 1 else list(matched[0])) if matched else None
    return res, text, "stop", stop_reason


def _usage(n_prompt: int, res: GenResult) -> dict[str, Any]:
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": len(res.tokens),
        "total_tokens": n_prompt + len(res.tokens),
        "prompt_tokens_details": {"cached_tokens": int(res.cached_tokens)},
    }


def render_completion(
    res: GenResult, req: GenRequest, opts: Options, model: str, tokenizer: Any, scored: list | None
) -> dict[str, Any]:
    """vLLM's completion object for one result, with the `bt` extras."""
    res, text, finish_reason, stop_reason = finish(res, req, opts, tokenizer)
    name = (lambda t: f"token_id:{t}") if opts.as_ids else (lambda t: decode(tokenizer, [t]))
    logprobs = None
    if opts.logprobs is not None:
        k = opts.logprobs
        tops = []
        for i, tok in enumerate(res.tokens):
            entry = {}
            if res.top_ids is not None and res.top_logprobs is not None and k > 0:
                for t, v in zip(
                    res.top_ids[i][:k].tolist(), res.top_logprobs[i][:k].tolist(), strict=True
                ):
                    entry[name(int(t))] = float(v)
            entry.setdefault(name(tok), float(res.logprobs[i]))
            tops.append(entry)
        offsets, pos = [], 0
        for t in res.tokens:
            offsets.append(pos)
            pos += len(decode(tokenizer, [t]))
        logprobs = {
            "text_offset": offsets,
            "token_logprobs": [float(x) for x in res.logprobs],
            "tokens": [name(t) for t in res.tokens],
            "top_logprobs": tops,
        }
    assert res.sampling_entropies is not None  # the in-process engine always reports them
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "prompt_logprobs": None
        if scored is None
        else [
            None
            if pos is None
            else {
                str(t): {"logprob": lp, "rank": rank, "decoded_token": name(t)}
                for t, (lp, rank) in pos.items()
            }
            for pos in scored
        ],
        "bt": {
            "finish_reason": res.finish_reason,
            "entropies": [float(x) for x in res.entropies],
            "sampling_entropies": [float(x) for x in res.sampling_entropies],
            "cached_tokens": int(res.cached_tokens),
        },
    }
    if opts.token_ids:
        choice["prompt_token_ids"] = [int(t) for t in req.prompt]
        choice["token_ids"] = [int(t) for t in res.tokens]
    return {
        "id": f"cmpl-bt-{res.key}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(len(req.prompt), res),
    }


def _chat_token(tokenizer: Any, t: int, lp: float) -> dict[str, Any]:
    piece = decode(tokenizer, [t])
    return {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8"))}


def render_chat(
    res: GenResult, req: GenRequest, opts: Options, model: str, tokenizer: Any
) -> dict[str, Any]:
    """OpenAI's (and vLLM's) chat.completion object for one result."""
    res, text, finish_reason, stop_reason = finish(res, req, opts, tokenizer)
    logprobs = None
    if opts.logprobs is not None:
        content = []
        for i, tok in enumerate(res.tokens):
            entry = _chat_token(tokenizer, tok, float(res.logprobs[i]))
            tops = []
            if res.top_ids is not None and res.top_logprobs is not None and opts.logprobs > 0:
                tops = [
                    _chat_token(tokenizer, int(t), float(v))
                    for t, v in zip(
                        res.top_ids[i][: opts.logprobs].tolist(),
                        res.top_logprobs[i][: opts.logprobs].tolist(),
                        strict=True,
                    )
                ]
            content.append({**entry, "top_logprobs": tops})
        logprobs = {"content": content}
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }
    out: dict[str, Any] = {
        "id": f"chatcmpl-bt-{res.key}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(len(req.prompt), res),
    }
    if opts.token_ids:
        out["prompt_token_ids"] = [int(t) for t in req.prompt]
        choice["token_ids"] = [int(t) for t in res.tokens]
    return out
