"""Prompt log-probs from an in-process MLX model, as vLLM reports `prompt_logprobs`: what
`bt serve` answers when a client scores a prompt (the HTTP backends' check that a server's
generation log-probs are those of the raw distribution)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast


def score_prompt(
    model: Any, ids: Sequence[int], top: int
) -> list[dict[int, tuple[float, int]] | None]:
    """Per position of `ids` (None first, nothing conditions it): the position's own token and
    the `top` most likely tokens of the distribution that predicted it, each as
    {token: (logprob, rank)} with rank 1 the most likely; one forward pass over `ids`."""
    import mlx.core as mx

    logits = model(mx.array([list(ids)]))[0].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    out: list[dict[int, tuple[float, int]] | None] = [None]
    for i in range(1, len(ids)):
        row = lp[i - 1]
        tok = int(ids[i])
        own = float(row[tok].item())
        rank = cast(int, mx.sum(row > row[tok]).item()) + 1  # a count: mlx types it as any scalar
        entry = {tok: (own, rank)}
        if top > 0:
            idx = cast(list[int], mx.argsort(-row)[:top].tolist())
            for r, t in enumerate(idx, start=1):
                entry.setdefault(int(t), (float(row[t].item()), r))
        out.append(entry)
    return out
