"""mlx-lm's `BatchGenerator` with one batched, seeded sampler per decode step.

mlx-lm calls each row's sampler separately when rows have different samplers (they do: every
row has its own seed), which serialises the per-token work the batch should share. This module
keeps mlx-lm's continuous batching (prefill, cache merging, stop matching, row removal) and
replaces only the decode step (`GenerationBatch._step`): one forward pass, then one fused graph
(`sampling.sample_step`) that draws every row's next token from its own identity key and
computes its statistics, evaluated asynchronously with the step as mlx-lm does. On MLX's CPU
device the same sampler runs in numpy (`sampling.sample_step_np`) on the evaluated logits,
since MLX's CPU exp and argpartition are scalar code (about 70x slower than numpy's here).

A row is described by a `RowSpec` passed where mlx-lm expects a sampler; it carries the row's
seed, sampling setting and the index of its next token. Each response's `logprobs` field holds
that token's statistics `[log-prob, entropy, sampling entropy]` (floats) instead of a full
vocabulary vector, so nothing vocabulary-sized leaves the step; rows asking for it (`top`) also
get each step's most likely ids and their log-probs.

Written against mlx-lm 0.32.x (pinned in pyproject.toml): `_step` and `generate` follow that
version's code."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator, GenerationBatch, PromptProcessingBatch

from breakthrough.engine.sampling import (
    RowParams,
    row_keys,
    row_params,
    sample_step,
    sample_step_np,
    top_logprobs,
    top_logprobs_np,
)
from breakthrough.protocol import Sampling


class RowSpec:
    """One row's identity for the batched sampler: seed, sampling and its next token's index
    (token k of a row is drawn with the key of (seed, k), whatever batch it is in)."""

    __slots__ = ("seed", "sampling", "step", "top")

    def __init__(self, seed: int, sampling: Sampling, top: int = 0):
        self.seed = int(seed) & 0xFFFFFFFF
        self.sampling = sampling
        self.step = 0
        self.top = int(top)  # also report each step's `top` most likely (ids, log-probs)

    def __call__(self, logprobs):  # pragma: no cover - the batched step never calls it
        raise RuntimeError("RowSpec is drawn by SeededGenerationBatch, not called per row")


class SeededGenerationBatch(GenerationBatch):
    """`GenerationBatch` whose step draws all rows in one call (rows' samplers are RowSpecs)."""

    _params_key: tuple = ()
    _params: RowParams | None = None

    def _row_params(self, specs: list[RowSpec], vocab: int) -> RowParams:
        key = tuple(s.sampling for s in specs) + (vocab,)  # compared by value
        if self._params is None or key != self._params_key:
            self._params = row_params([s.sampling for s in specs], vocab)
            self._params_key = key
        return self._params

    def _step(self) -> tuple[list[int], list[Any]]:
        self._current_tokens = self._next_tokens
        self._current_logprobs = self._next_logprobs
        inputs = self._current_tokens
        if any(self.logits_processors):
            raise ValueError("SeededGenerationBatch does not run logits processors")

        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        specs: list[RowSpec] = self.samplers
        keys = row_keys([s.seed for s in specs], [s.step for s in specs])
        for s in specs:
            s.step += 1
        top = max((s.top for s in specs), default=0)
        bundle: tuple
        if mx.default_device() == mx.cpu:
            # MLX's CPU exp / argpartition are scalar: the vocabulary-sized work runs in numpy
            # on a view of the evaluated logits (same definition, sampling.sample_step_np).
            logits = logits.astype(mx.float32)
            mx.eval(logits)
            x = np.asarray(logits)
            tok, stats = sample_step_np(x, keys, [s.sampling for s in specs])
            bundle = (stats,) + (top_logprobs_np(x, top) if top > 0 else ())
            tokens = mx.array(tok.astype(np.uint32))
        else:
            tokens, stats = sample_step(logits, mx.array(keys),
                                        self._row_params(specs, logits.shape[-1]))
            bundle = (stats,) + (top_logprobs(logits, top) if top > 0 else ())

        # Start the next step's tokens and statistics, then read the current ones (as mlx-lm).
        self._next_tokens = tokens
        self._next_logprobs = [(bundle, i) for i in range(len(specs))]
        mx.async_eval(tokens, *[a for a in bundle if isinstance(a, mx.array)])

        current = self._current_logprobs
        bundles = list({id(b): b for b, _ in current}.values())
        mx.eval(inputs, *[a for b in bundles for a in b if isinstance(a, mx.array)])
        lists = {id(b): [a.tolist() for a in b] for b in bundles}
        # Per row: [log-prob, entropy, sampling entropy] (+ [top ids], [top log-probs]).
        current_stats = [[col[i] for col in lists[id(b)]] for b, i in current]
        inputs = inputs.tolist()
        for sti, ti in zip(self.tokens, inputs):
            sti.append(ti)
        return inputs, current_stats


class SeededPromptBatch(PromptProcessingBatch):
    """`PromptProcessingBatch` that hands its rows to a `SeededGenerationBatch`."""

    def generate(self, tokens: list[list[int]]) -> SeededGenerationBatch:
        if any(len(t) > 1 for t in tokens):
            self.prompt([t[:-1] for t in tokens])
        last_token = mx.array([t[-1] for t in tokens])
        generation = SeededGenerationBatch(
            self.model, self.uids, last_token, self.prompt_cache, self.tokens, self.samplers,
            self.fallback_sampler, self.logits_processors, self.stop_sequences, self.max_tokens,
        )
        self.uids = []
        self.prompt_cache = []
        self.tokens = []
        self.samplers = []
        self.logits_processors = []
        self.max_tokens = []
        return generation


class SeededBatchGenerator(BatchGenerator):
    """`BatchGenerator` whose decode step is one batched seeded sampler (insert rows with
    `samplers=[RowSpec(...), ...]`)."""

    def __init__(self, model, **kwargs):
        super().__init__(model, **kwargs)
        self._prompt_batch = SeededPromptBatch.empty(
            self.model, self.sampler, prefill_step_size=self.prefill_step_size)
        self._generation_batch = SeededGenerationBatch.empty(self.model, self.sampler)
