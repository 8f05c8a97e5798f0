"""Teacher-forced hidden states (protocol 9.8): one forward of prompt + the first generated
tokens through an mlx-lm model, giving the final-normalised hidden state of every generated
token, the top-1 agreement of the model with the tokens it is forced through, and the three
per-token streams of 9.8's stream-summary arm (entropy in nats, surprisal, top-1 probability),
all from the same forward.

Why here: it is the only part of `bt probe` that needs mlx (models/ may import it; signals/ may
not). The final-normalised state is what the language-model head reads. In mlx-lm 0.32 every
architecture bt supports (llama, qwen3, qwen3_5, ministral3, gemma4_text) applies its final norm
inside the inner model, so the inner model's output is taken as is; the check that it is the
normalised state is that the head applied to it reproduces the model's own logits
(`tests/signals/test_probe_hidden.py`), which would fail for a pre-norm state (protocol 11's
Gemma note: older mlx-vlm wrappers returned it before the norm).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from breakthrough.errors import BtError

MAX_FORCED_TOKENS = 512  # protocol 9.8: the first 512 generated tokens


@dataclass(frozen=True)
class TeacherForced:
    """Hidden states of the generated tokens of one trajectory.

    hidden: [n, d] float32, row j = final-normalised state at generated token j (the position
        that reads token j), n = min(len(generated), max_tokens).
    top1: [n] bool, whether the model's most likely next token at the position before generated
        token j is token j (teacher-forcing fidelity; protocol 9.8 reports its mean).
    entropy, surprisal, top1_probability: [n] float32, the streams of 9.8's stream-summary arm,
        from the distribution that predicts generated token j (the logit row at position
        start + j - 1): its entropy in nats, -log p(token j), and its largest probability.
    """

    hidden: np.ndarray
    top1: np.ndarray
    entropy: np.ndarray
    surprisal: np.ndarray
    top1_probability: np.ndarray

    @property
    def top1_agreement(self) -> float:
        return float(self.top1.mean()) if self.top1.size else float("nan")


def text_model(model: Any) -> tuple[Any, Any]:
    """(causal LM, its inner transformer) of an mlx-lm model, unwrapping a multimodal wrapper's
    `language_model` (gemma4, mistral3)."""
    lm = getattr(model, "language_model", model)
    inner = getattr(lm, "model", None)
    if inner is None or not hasattr(inner, "embed_tokens"):
        raise BtError(f"bt probe: cannot find the inner transformer of {type(model).__name__}")
    return lm, inner


def head_logits(lm: Any, inner: Any, hidden: Any) -> Any:
    """The language-model head on final-normalised hidden states, as the model's own __call__
    applies it (tied embeddings or lm_head, then Gemma's logit soft-capping)."""
    import mlx.core as mx

    tied = getattr(getattr(lm, "args", None), "tie_word_embeddings", None)
    if tied is None:
        tied = getattr(lm, "tie_word_embeddings", not hasattr(lm, "lm_head"))
    out = inner.embed_tokens.as_linear(hidden) if tied else lm.lm_head(hidden)
    cap = getattr(lm, "final_logit_softcapping", None)
    if cap:
        out = mx.tanh(out / cap) * cap
    return out


class _NormWatch:
    """Stands in for an inner model's final norm during one call and keeps its last output."""

    def __init__(self, norm: Any) -> None:
        self.norm = norm
        self.last: Any = None

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        self.last = self.norm(x, *args, **kwargs)
        return self.last


_DECIDED = "_bt_final_norm_inside"  # plain attribute on the inner model: not a parameter


def final_norm_applied(inner: Any, ids: Any) -> bool:
    """Whether `inner(ids)` ends with its final norm (decided by watching `inner.norm` once).
    A model without a final norm attribute is taken as is."""
    import mlx.core as mx

    norm = getattr(inner, "norm", None)
    if norm is None:
        return True
    watch = _NormWatch(norm)
    inner["norm"] = watch  # mlx.nn.Module is a dict: `inner.norm` is looked up in it
    try:
        out = inner(ids[:, : min(8, ids.shape[1])])
    finally:
        inner["norm"] = norm
    if watch.last is None or watch.last.shape != out.shape:
        return False
    return bool(mx.array_equal(watch.last, out).item())


def final_hidden(inner: Any, ids: Any, cache: Any = None) -> Any:
    """The inner model's hidden states with its final norm applied (protocol 11)."""
    inside = getattr(inner, _DECIDED, None)
    if inside is None:
        inside = final_norm_applied(inner, ids)
        setattr(inner, _DECIDED, inside)
    out = inner(ids, cache=cache)
    return out if inside else inner.norm(out)


def teacher_force(
    model: Any,
    prompt_ids: Sequence[int],
    generated_ids: Sequence[int],
    max_tokens: int = MAX_FORCED_TOKENS,
) -> TeacherForced:
    """One forward of prompt + generated[:max_tokens]; see `TeacherForced`."""
    import mlx.core as mx

    prompt = [int(t) for t in prompt_ids]
    gen = [int(t) for t in generated_ids][:max_tokens]
    if not prompt:
        raise BtError("bt probe: a trajectory has an empty prompt (nothing to condition on)")
    if not gen:
        empty = np.zeros(0, np.float32)
        return TeacherForced(np.zeros((0, 0), np.float32), np.zeros(0, bool), empty, empty, empty)
    lm, inner = text_model(model)
    ids = mx.array([prompt + gen])
    hidden = final_hidden(inner, ids)[0]  # [P + n, d]
    p, n = len(prompt), len(gen)
    logits = head_logits(lm, inner, hidden[p - 1 : p - 1 + n])
    target = mx.array(gen)
    top1 = mx.argmax(logits, axis=-1) == target
    entropy, surprisal, top1_prob = token_streams(logits, target)
    gen_hidden = hidden[p : p + n].astype(mx.float32)
    mx.eval(gen_hidden, top1, entropy, surprisal, top1_prob)
    return TeacherForced(
        np.array(gen_hidden),
        np.array(top1),
        np.array(entropy),
        np.array(surprisal),
        np.array(top1_prob),
    )


def token_streams(logits: Any, target: Any) -> tuple[Any, Any, Any]:
    """(entropy in nats, surprisal -log p(target), top-1 probability) of each row of `logits`
    ([n, V], row j predicting target[j]), in float32 whatever the model's dtype, so a bf16 or
    4-bit model's streams are not rounded to its logit precision. Vocabulary entries with
    probability 0 (a -inf logit) add nothing to the entropy instead of 0 * -inf = NaN."""
    import mlx.core as mx

    x = logits.astype(mx.float32)
    lse = mx.logsumexp(x, axis=-1, keepdims=True)
    logp = x - lse
    prob = mx.exp(logp)
    entropy = -mx.sum(mx.where(prob > 0, prob * logp, 0.0), axis=-1)
    surprisal = -mx.take_along_axis(logp, target[:, None], axis=-1)[:, 0]
    top1_prob = mx.exp(mx.max(logp, axis=-1))
    return entropy, surprisal, top1_prob


def stepwise_hidden(
    model: Any, prompt_ids: Sequence[int], generated_ids: Sequence[int]
) -> np.ndarray:
    """The same hidden states computed token by token through mlx-lm's KV cache (a prompt
    prefill, then one token per step): the direct computation `teacher_force` must equal."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    lm, inner = text_model(model)
    cache = make_prompt_cache(lm)
    final_hidden(inner, mx.array([[int(t) for t in prompt_ids]]), cache=cache)
    rows = []
    for t in generated_ids:
        h = final_hidden(inner, mx.array([[int(t)]]), cache=cache)[0, -1].astype(mx.float32)
        mx.eval(h)
        rows.append(np.array(h))
    return np.stack(rows) if rows else np.zeros((0, 0), np.float32)


def tokenize_dump(tokenizer: Any, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """Protocol 9.8's ids for an external dump: encode(prompt) with the tokenizer's default
    special tokens, then encode(completion) without any."""
    return list(tokenizer.encode(prompt)), list(
        tokenizer.encode(completion, add_special_tokens=False)
    )
