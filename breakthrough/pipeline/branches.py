"""Budgeted continuations and restarts (protocol 3.3 and 4): where a prefix is continued.

One branch, exactly as the reference's two-stage procedure:
  1. reasoning phase: from the state "prompt + prefix", sample up to B tokens, stopping at EOS
     or when the new tokens end with the family's close-marker sequence;
  2. if the model did not close: drop a trailing EOS and append the forced-close token ids;
  3. answer phase: continue the reasoning phase's context (prompt + prefix + reasoning +
     inserted; the MLX backend continues its live cache, no second prefill) for up to the answer
     budget, stopping only at EOS; the answer window must be the full reserve;
  4. grade decode(prefix + reasoning + inserted + answer), the whole text.
Which branches get no answer phase: protocol 3.3 step 6 runs the answer phase always, even
after a natural close, because a thinking model that stops inside its thinking block has not
answered yet (the EOS is dropped and the forced close appended). A model of the `plain` family
has no thinking block and no forced close (models.families): its reasoning phase IS its answer,
and an EOS there ends the solution. Continuing it would only drop that EOS and ask the same
context again (measured on a plain chat model: 1 token, EOS again, for 38 of 280 branches). So a
plain-family branch whose reasoning phase ended at EOS is complete: prefix + reasoning (with
its EOS), finish reason "eos", no answer request (`BranchRunner.needs_answer`). Every thinking
family keeps the protocol's answer phase.
Every request carries its whole context as token ids; the runner adds two hints of the engine
contract: the cell's prompt + base trace as a `SharedPrefix` (the MLX backend prefills it once
and cuts a copy back to each prefix), and `follows` for the answer phase (continue the live
state of the reasoning phase). The reference re-prefilled prompt + prefix (+ reasoning) for each
phase; a backend that ignores the hints does exactly that and gives the same tokens
(tests/pipeline/test_branches.py). A restart is a branch with an empty prefix and reasoning
budget C."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from breakthrough.engine.contract import Engine, GenRequest, GenResult, SharedPrefix
from breakthrough.errors import BtError
from breakthrough.protocol import Protocol


@dataclass(frozen=True)
class Branch:
    """One continuation (kind "probe", prefix cut after generated token `cut`-1) or restart
    (kind "restart", cut 0) to run; `key` is unique within a batch."""

    key: str
    kind: str
    anchor: int  # t (probes) or -1
    budget: int  # reasoning budget: B (probes) or C (restarts)
    branch: int
    seed: int
    cut: int  # number of base-trace tokens kept as the prefix


@dataclass
class BranchResult:
    branch: Branch
    tokens: list[int]  # prefix + reasoning + inserted + answer
    logprobs: np.ndarray  # per non-prefix token; NaN for inserted forced-close tokens
    entropies: np.ndarray
    sampling_entropies: np.ndarray
    finish_reason: str  # "eos" | "answer_reserve" (protocol 3.3 step 5)
    extra: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    peak_memory_bytes: int = 0
    signals: dict[str, np.ndarray] | None = None  # GenResult.signals, laid out like logprobs


def prefix_sha(ids: Sequence[int]) -> str:
    """SHA-256 of the JSON list of prefix token ids (protocol 3.2 step 4)."""
    return hashlib.sha256(json.dumps([int(i) for i in ids]).encode()).hexdigest()


def answer_seed(seed: int) -> int:
    """The answer phase's seed: fresh draws, still a function of the branch identity only."""
    return (int(seed) * 2654435761 + 1) & 0x7FFFFFFF


def close_reasoning(
    tokens: Sequence[int], finish_reason: str, eos: frozenset[int], forced_ids: Sequence[int]
) -> tuple[list[int], list[int], int]:
    """Protocol 3.3 step 4: (reasoning tokens kept, tokens to insert, tokens dropped). A natural
    close (the close-marker stop sequence) inserts nothing; otherwise a trailing EOS is dropped
    and the family's forced-close ids are appended."""
    reasoning = [int(t) for t in tokens]
    if finish_reason == "stop_sequence":
        return reasoning, [], 0
    dropped = 0
    if reasoning and reasoning[-1] in eos:
        reasoning, dropped = reasoning[:-1], 1
    return reasoning, list(forced_ids), dropped


def check_budget(prefix_len: int, budget: int, protocol: Protocol, forced: int = 0) -> bool:
    """Protocol 3.3 step 1: room for B reasoning tokens, the `forced` close tokens a forced
    close may insert, and the full answer reserve within the total cap (1.5). Without room for
    the forced close, a branch that does not close by itself would get a short answer window;
    the study stopped probing at the previous anchor instead."""
    available = protocol.total_cap - prefix_len - forced
    return available > protocol.answer_budget and budget <= available - protocol.answer_budget


@dataclass
class _Reasoned:
    """A branch whose reasoning phase is done: what the answer phase continues."""

    reasoning: list[int]
    inserted: list[int]
    logprobs: list[float]
    entropies: list[float]
    sampling_entropies: list[float]
    result: GenResult
    signals: dict[str, list[float]] | None = None


class BranchRunner:
    """The two phases of the branches of one cell, as engine requests (protocol 3.3).

    `prompt` is the chat prompt, `trace` the base trace's generated tokens; `shared` (optional)
    declares prompt + trace[:longest cut] to the engine as the cell's shared prefix. The run's
    scheduler (pipeline.scheduler) streams `reasoning_request` / `answer_request` of many cells
    through one engine; `run` does one batch of branches, phase by phase (tests, benches)."""

    def __init__(
        self,
        engine: Engine,
        loaded: Any,
        prompt: Sequence[int],
        trace: Sequence[int],
        protocol: Protocol,
        shared: SharedPrefix | None = None,
    ) -> None:
        self.engine = engine
        self.prompt = [int(t) for t in prompt]
        self.trace = [int(t) for t in trace]
        self.protocol = protocol
        self.shared = shared
        self.close_ids, self.forced_ids, self.eos = close_tokens(loaded)

    def reasoning_request(self, b: Branch, key: str | None = None) -> GenRequest:
        """Step 3: up to B tokens from prompt + prefix, stopping at EOS or the close marker."""
        if not check_budget(b.cut, b.budget, self.protocol, len(self.forced_ids)):
            raise BtError(
                f"{b.key}: prefix of {b.cut} tokens leaves no room for B={b.budget} + answer"
            )
        stop = (self.close_ids,) if self.close_ids else ()
        return GenRequest(
            key=key or b.key,
            prompt=self.prompt + self.trace[: b.cut],
            max_tokens=b.budget,
            seed=b.seed,
            sampling=self.protocol.sampling,
            stop_sequences=stop,
            shared_prefix=self.shared,
            keep_state=True,
            lane=b.branch,
        )

    def needs_answer(self, r: GenResult) -> bool:
        """Whether the reasoning result `r` gets an answer phase: always, except where the
        family has no thinking block (no close marker, no forced close: `plain`) and the
        reasoning phase ended at EOS (see the module doc)."""
        return bool(self.close_ids or self.forced_ids) or r.finish_reason != "eos"

    def result_without_answer(self, b: Branch, r: GenResult) -> BranchResult:
        """A branch that `needs_answer` says is complete after its reasoning phase: prefix +
        reasoning (ending with its EOS), laid out like `result` with no inserted or answer
        tokens."""
        signals = (
            None
            if r.signals is None
            else {k: np.asarray(v, dtype=np.float32) for k, v in r.signals.items()}
        )
        return BranchResult(
            signals=signals,
            branch=b,
            tokens=self.trace[: b.cut] + [int(t) for t in r.tokens],
            logprobs=np.asarray(r.logprobs, dtype=np.float32),
            entropies=np.asarray(r.entropies, dtype=np.float32),
            sampling_entropies=np.asarray(r.sampling_entropies, dtype=np.float32),
            finish_reason="eos",
            extra={
                "reasoning_tokens": len(r.tokens),
                "reasoning_finish": r.finish_reason,
                "forced_close": False,
                "inserted_tokens": 0,
                "answer_tokens": 0,
                "answer_phase": False,
                "prefix_sha": prefix_sha(self.trace[: b.cut]),
                **request_facts([r]),
            },
            elapsed_s=r.elapsed_s,
            peak_memory_bytes=r.peak_memory_bytes,
        )

    def answer_request(
        self, b: Branch, r: GenResult, key: str | None = None
    ) -> tuple[GenRequest, _Reasoned]:
        """Steps 4-5: close the reasoning (natural or forced) and ask for the answer window,
        continuing the reasoning row (`follows`)."""
        p = self.protocol
        reasoning, inserted, _ = close_reasoning(
            r.tokens, r.finish_reason, self.eos, self.forced_ids
        )
        n = len(reasoning)
        assert r.sampling_entropies is not None  # every engine reports them (GenResult)
        lps, ents, sents = (list(a)[:n] for a in (r.logprobs, r.entropies, r.sampling_entropies))
        context = self.prompt + self.trace[: b.cut] + reasoning + inserted
        used = b.cut + len(reasoning) + len(inserted)
        answer_budget = min(p.answer_budget, p.total_cap - used)
        if answer_budget != p.answer_budget:
            raise BtError(
                f"{b.key}: answer window {answer_budget} < {p.answer_budget} (protocol 3.3 step 5)"
            )
        req = GenRequest(
            key=key or b.key,
            prompt=context,
            max_tokens=answer_budget,
            seed=answer_seed(b.seed),
            sampling=p.sampling,
            follows=r.key,
            shared_prefix=self.shared,
            lane=b.branch,
        )
        sigs = None if r.signals is None else {k: list(v)[:n] for k, v in r.signals.items()}
        return req, _Reasoned(reasoning, inserted, lps, ents, sents, r, sigs)

    def result(self, b: Branch, done: _Reasoned, a: GenResult) -> BranchResult:
        """Step 6: the whole branch (prefix + reasoning + inserted + answer) and its statistics."""
        nan = [float("nan")] * len(done.inserted)
        assert a.sampling_entropies is not None  # every engine reports them (GenResult)
        r = done.result
        signals = None
        if done.signals is not None and a.signals is not None:  # same layout as logprobs
            signals = {
                k: np.asarray(v + nan + list(a.signals[k]), dtype=np.float32)
                for k, v in done.signals.items()
            }
        return BranchResult(
            signals=signals,
            branch=b,
            tokens=self.trace[: b.cut] + done.reasoning + done.inserted + list(a.tokens),
            logprobs=np.asarray(done.logprobs + nan + list(a.logprobs), dtype=np.float32),
            entropies=np.asarray(done.entropies + nan + list(a.entropies), dtype=np.float32),
            sampling_entropies=np.asarray(
                done.sampling_entropies + nan + list(a.sampling_entropies), dtype=np.float32
            ),
            finish_reason="answer_reserve" if a.finish_reason == "length" else "eos",
            extra={
                "reasoning_tokens": len(done.reasoning),
                "reasoning_finish": r.finish_reason,
                "forced_close": bool(done.inserted),
                "inserted_tokens": len(done.inserted),
                "answer_tokens": len(a.tokens),
                "answer_phase": True,
                "prefix_sha": prefix_sha(self.trace[: b.cut]),
                **request_facts([r, a], [len(done.reasoning), len(done.inserted)]),
            },
            elapsed_s=r.elapsed_s + a.elapsed_s,
            peak_memory_bytes=max(r.peak_memory_bytes, a.peak_memory_bytes),
        )

    def run(self, branches: Sequence[Branch]) -> list[BranchResult]:
        """One batch of branches: every reasoning phase, then every answer phase."""
        reqs = [self.reasoning_request(b) for b in branches]
        by_key = {b.key: b for b in branches}
        answers, pending, out = [], {}, []
        for r in self.engine.generate(reqs):
            if not self.needs_answer(r):
                out.append(self.result_without_answer(by_key[r.key], r))
                continue
            req, done = self.answer_request(by_key[r.key], r)
            answers.append(req)
            pending[r.key] = done
        if answers:
            out += [
                self.result(by_key[a.key], pending[a.key], a) for a in self.engine.generate(answers)
            ]
        order = {b.key: i for i, b in enumerate(branches)}
        return sorted(out, key=lambda x: order[x.branch.key])


def request_facts(results: Sequence[GenResult], keep: Sequence[int] = ()) -> dict[str, Any]:
    """What a sample's extra records about how its requests were served: prompt tokens the
    backend reused, the endpoint (HTTP backends), and, where the backend could only bound the
    full-distribution entropy from its top-k (vLLM, SGLang), both bounds per generated token
    (`entropies` is then NaN: never pretend). `keep[i]` limits result i to its first ids and
    NaN-pads the tokens inserted after it (the forced close between phases)."""
    facts: dict[str, Any] = {"cached_tokens": [int(r.cached_tokens) for r in results]}
    endpoints = sorted({r.endpoint for r in results if r.endpoint})
    if endpoints:
        facts["endpoints"] = endpoints
    if any(r.entropy_bounds is not None for r in results):
        lower: list[float | None] = []
        upper: list[float | None] = []
        for i, r in enumerate(results):
            n = keep[0] if i == 0 and keep else len(r.tokens)
            bounds = (
                r.entropy_bounds
                if r.entropy_bounds is not None
                else np.full((len(r.tokens), 2), np.nan)
            )
            for lo, hi in np.asarray(bounds, dtype=np.float64)[:n]:
                lower.append(None if np.isnan(lo) else round(float(lo), 5))
                upper.append(None if np.isnan(hi) else round(float(hi), 5))
            if i == 0 and len(keep) > 1:
                lower += [None] * keep[1]
                upper += [None] * keep[1]
        facts["entropy_lower"], facts["entropy_upper"] = lower, upper
    return facts


def close_tokens(loaded: Any) -> tuple[tuple[int, ...], list[int], frozenset[int]]:
    """(close-marker ids that end a reasoning phase, forced-close ids, EOS ids) of a model."""
    fam = loaded.family
    close = tuple(loaded.encode(fam.close_marker)) if fam.close_marker else ()
    forced = list(loaded.encode(fam.forced_close)) if fam.forced_close else []
    return close, forced, frozenset(int(e) for e in loaded.eos_ids)


def reference_branch(
    engine: Engine,
    loaded: Any,
    prompt: Sequence[int],
    prefix: Sequence[int],
    budget: int,
    seed: int,
    protocol: Protocol,
) -> list[int]:
    """The reference implementation's two-stage procedure, one sequence at a time and without
    reuse hints: prompt + prefix for the reasoning phase, then prompt + prefix + reasoning +
    inserted for the answer phase (protocol 3.3 steps 3-5). The oracle of the cache-reuse
    equality tests; returns prefix + reasoning + inserted + answer."""
    close, forced, eos = close_tokens(loaded)
    ctx = [int(t) for t in prompt] + [int(t) for t in prefix]
    (r,) = engine.generate(
        [
            GenRequest(
                key="r",
                prompt=ctx,
                max_tokens=budget,
                seed=seed,
                sampling=protocol.sampling,
                stop_sequences=(close,) if close else (),
            )
        ]
    )
    if not close and not forced and r.finish_reason == "eos":  # BranchRunner.needs_answer
        return list(prefix) + list(r.tokens)
    reasoning, inserted, _ = close_reasoning(r.tokens, r.finish_reason, eos, forced)
    (a,) = engine.generate(
        [
            GenRequest(
                key="a",
                prompt=ctx + reasoning + inserted,
                max_tokens=protocol.answer_budget,
                seed=answer_seed(seed),
                sampling=protocol.sampling,
            )
        ]
    )
    return list(prefix) + reasoning + inserted + list(a.tokens)
