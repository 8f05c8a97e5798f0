"""The small generation interface every backend implements (design decision 8).

Token ids in, token ids out: a request carries its prompt as token ids (chat prompt + any prefix,
never re-tokenised), its own max tokens, seed and stop sequences; a result carries the generated
ids, the finish reason and per-token statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, Protocol, Sequence

import numpy as np

from breakthrough.protocol import Sampling

FinishReason = Literal["eos", "length", "stop_sequence"]
FINISH_REASONS: tuple[str, ...] = ("eos", "length", "stop_sequence")


@dataclass(frozen=True)
class GenRequest:
    """One sequence to generate.

    key: unique within one `generate` call; results are matched back by it.
    prompt: token ids fed to the model before sampling. With `cache`, only the ids that come
        after what the cache already holds (at least one).
    max_tokens: generated tokens at most (> 0).
    seed: the row's own randomness (protocol 1.4 seeds, e.g. 11 for base traces); tokens depend
        only on (model, prompt, cache, seed, sampling), never on what else shares the batch.
    stop_sequences: token-id sequences that end the row when its generated tokens end with one
        (the matched tokens are kept in `GenResult.tokens`). EOS ids are always stop tokens.
    sampling: protocol 1.4 sampling; temperature 0 is greedy.
    cache: optional mlx-lm prompt cache (a list of per-layer caches, e.g. from
        `mlx_lm.models.cache.make_prompt_cache` after a prefill, trimmed back to a prefix).
        The engine copies it when the row starts (BatchKVCache.merge); the caller's object is not
        modified and can be reused for further branches.
    return_cache: if true, `GenResult.cache` holds the row's final cache (prompt + every
        generated token, including the last one), ready to continue with further ids.
    """

    key: str
    prompt: Sequence[int]
    max_tokens: int
    seed: int
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    cache: Any = field(default=None, compare=False, repr=False)
    return_cache: bool = False


@dataclass
class GenResult:
    """What one request produced.

    tokens: generated ids (the EOS or the stop sequence that ended the row is included).
    logprobs / entropies: float32 arrays, one value per generated token, taken from the model's
        full next-token distribution (see the backend's docstring for the exact definition).
    sampling_entropies: float32, one per generated token: the entropy of the distribution the
        token was actually drawn from (after temperature, top-p, top-k; 0 when greedy).
    finish_reason: "eos" | "length" | "stop_sequence".
    elapsed_s: wall time from the row's insertion into the batch to its last token.
    prompt_tokens: ids processed for this row (len(prompt)).
    peak_memory_bytes: the process's peak accelerator memory seen when the row finished (since
        the start of the `generate` call); 0 where the backend cannot tell.
    cache: the final prompt cache when the request asked for it, else None.
    """

    key: str
    tokens: list[int]
    logprobs: np.ndarray
    entropies: np.ndarray
    finish_reason: str
    elapsed_s: float
    sampling_entropies: np.ndarray | None = None
    prompt_tokens: int = 0
    peak_memory_bytes: int = 0
    cache: Any = field(default=None, repr=False)


class Engine(Protocol):
    """A generation backend: consumes requests lazily, yields each result as soon as its row
    finishes (not in request order)."""

    def generate(self, requests: Iterable[GenRequest]) -> Iterator[GenResult]: ...
