"""The one way the pipeline generates (design decision 8): token ids in, token ids out.

A request carries its WHOLE context as token ids (chat prompt + any prefix + anything forced,
never re-tokenised), its own max tokens, seed and stop sequences. Two optional hints let a
backend avoid recomputing what it has already seen; they never change what is generated:

* `shared_prefix`: many requests start with parts of one long sequence (a cell's prompt + base
  trace). The MLX backend prefills it once and starts each request from a cache cut back to
  that request's prefix; an HTTP backend sends the full prompt and lets the server's prefix
  cache (vLLM APC, SGLang radix cache) do the reuse.
* `follows` / `keep_state`: a request that extends an earlier one (the answer phase after the
  reasoning phase) names it; a backend that kept that row's final state continues from it.

Results carry the generated ids, the finish reason and per-token statistics. Nothing in here is
backend-specific, so the pipeline holds no backend object beyond an `Engine`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from breakthrough.engine.http_limits import (  # the spec's defaults and bounds
    MAX_REQUEST_TIMEOUT_S,
    MAX_RETRIES,
    REQUEST_TIMEOUT_S,
    RETRIES,
)
from breakthrough.errors import BtError
from breakthrough.protocol import Sampling

FinishReason = Literal["eos", "length", "stop_sequence", "error"]
FINISH_REASONS: tuple[str, ...] = ("eos", "length", "stop_sequence", "error")


@dataclass(frozen=True, eq=False)
class SharedPrefix:
    """A token sequence that many requests start with, declared once (one object shared by all
    of them, compared by identity).

    key: names the sequence (a cell id); a backend keeps its reusable state under this key.
    ids: the sequence (e.g. prompt + base trace up to the last cut).
    starts: the prompt lengths the requests will have (prompt + cut), so a backend whose caches
        cannot be cut back (sliding-window layers) can snapshot exactly there during its one pass.
    """

    key: str
    ids: tuple[int, ...]
    starts: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenRequest:
    """One sequence to generate.

    key: unique within one `generate` call; results are matched back by it.
    prompt: every token id the model conditions on (at least one).
    max_tokens: generated tokens at most (> 0).
    seed: the row's own randomness (protocol 1.4 seeds, e.g. 11 for base traces); tokens depend
        only on (model, prompt, seed, sampling), never on what else shares the batch or on the
        reuse hints below.
    stop_sequences: token-id sequences that end the row when its generated tokens end with one
        (the matched tokens are kept in `GenResult.tokens`). EOS ids are always stop tokens.
    sampling: protocol 1.4 sampling; temperature 0 is greedy.
    shared_prefix: hint: `prompt` starts with a part of this sequence.
    follows: hint: the key of a request of an earlier `generate` call on the same engine whose
        prompt + generated tokens this prompt starts with.
    keep_state: hint: a later request will name this one in `follows`.
    hidden_stride: also return the final-normalised hidden vector of every `hidden_stride`-th
        generated token (protocol 2.2 stores every 8th; 0: none). Only in-process backends can:
        an HTTP backend refuses a request that asks for them.
    lane: hint, with `shared_prefix`: the row's place among rows that attend over one shared
        prefix together (the MLX engine's `prefix_attention` tiles, whose rounding follows a
        row's place, so the place must come from the request alone, like its seed). The
        branch index: the samples of one anchor then take distinct places and share a tile.
    """

    key: str
    prompt: Sequence[int]
    max_tokens: int
    seed: int
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    shared_prefix: SharedPrefix | None = field(default=None, compare=False, repr=False)
    follows: str | None = None
    keep_state: bool = False
    hidden_stride: int = 0
    lane: int = 0


@dataclass
class GenResult:
    """What one request produced.

    tokens: generated ids (the EOS or the stop sequence that ended the row is included).
    logprobs / entropies: float32 arrays, one value per generated token, taken from the model's
        full next-token distribution (see the backend's docstring for the exact definition).
    sampling_entropies: float32, one per generated token: the entropy of the distribution the
        token was actually drawn from (after temperature, top-p, top-k; 0 when greedy); a
        backend that cannot tell leaves it None and gets NaN for every token (`__post_init__`).
    finish_reason: "eos" | "length" | "stop_sequence", or "error" when a remote backend gave up
        on the request (then `tokens` is empty and `error` says why; nothing was generated).
    elapsed_s: wall time from the row's start to its last token.
    prompt_tokens: len(prompt).
    cached_tokens: prompt tokens the backend did not have to process for this row (reused).
    peak_memory_bytes: the process's peak accelerator memory seen when the row finished (since
        the start of the `generate` call); 0 where the backend cannot tell.
    error: why the request failed (finish_reason "error"); None otherwise.
    entropy_bounds: float32 [n, 2] (lower, upper) bounds of each token's full-distribution
        entropy, where the backend sees only the top-k (HTTP servers); `entropies` is then NaN
        unless the server also reported the exact value (bt serve). None: `entropies` is exact.
    top_ids / top_logprobs: int32 / float32 [n, k]: the k most likely tokens of each step's full
        distribution and their log-probs (descending), where the backend reports them.
    endpoint: the server that produced the result (HTTP backends); "" for in-process ones.
    signals: per-token instrumentation (protocol 2.2), one float32 array per generated token
        for each name of `sampling.SIGNAL_FIELDS` (normalised entropy, margins, top-1 / top-5 /
        tail mass, effective vocabulary, surprisal, successive KL / JS: NaN at a request's first
        token; plus `sampling.HIDDEN_FIELDS` of the final-normalised hidden state), computed
        in the decode step from the full distribution; None where the backend
        does not instrument (HTTP backends, or the MLX engine with `instrument=False`).
    hidden: (token indices int32 [m], vectors float16 [m, d]) when the request asked for
        `hidden_stride` > 0: indices 0, stride, 2 stride, ... < len(tokens), and row i the
        final-normalised hidden state whose logits drew token `indices[i]` (for token k >= 1 the
        position that reads token k - 1; for token 0 the prompt's last position). None otherwise.
    """

    key: str
    tokens: list[int]
    logprobs: np.ndarray
    entropies: np.ndarray
    finish_reason: str
    elapsed_s: float
    sampling_entropies: np.ndarray | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    peak_memory_bytes: int = 0
    error: str | None = None
    entropy_bounds: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None
    endpoint: str = ""
    signals: dict[str, np.ndarray] | None = None
    hidden: tuple[np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.sampling_entropies is None:  # unknown, per token: what the store keeps
            self.sampling_entropies = np.full(len(self.tokens), np.nan, dtype=np.float32)


def route_key(request: GenRequest) -> str:
    """What a fleet routes by: the cell. Every request of a cell carries the cell's shared prefix
    (its key is the cell id), and a request without one (a base trace) is keyed by the cell id
    itself, so all requests of one cell reach the same server and hit its prefix cache."""
    if request.shared_prefix is not None:
        return request.shared_prefix.key
    return request.key


@dataclass(frozen=True)
class RowShape:
    """The longest rows a run's cells will ask an engine for, what `Engine.plan` sizes its batch
    by: a probe row (prompt + base trace to the deepest anchor + budget + answer, its first
    `shared_tokens` a prefix the engine may hold once per cell) and a restart row (prompt +
    restart budget + answer; 0: no restarts)."""

    probe_tokens: int
    shared_tokens: int = 0
    restart_tokens: int = 0


NO_MEMORY_CAP = "no --memory-gb cap"  # `EnginePlan.budget` of an engine with no memory bound


@dataclass(frozen=True)
class EnginePlan:
    """How an engine will run rows of a `RowShape`: what `Engine.plan` decides (without changing
    the engine) and `Engine.configure` applies. The scheduler reads only this.

    shape: the rows it was made for.
    probe_rows / restart_rows: rows of the longest probe / restart the engine holds together.
    batch_size: rows in flight at most.
    prefix_slots: shared-prefix caches (one per cell) kept at once; None: no bound (the engine
        keeps none, or a server manages its own cache). The scheduler lets no more cells probe.
    share_prefixes: rows point into their cell's one prefix copy (MlxEngine, `shared_kv`).
    admits_by_memory: the engine admits rows by the bytes they add and holds back one that does
        not fit, so the scheduler may offer up to `batch_size` requests whatever their length.
    groups_by_prefix: rows of one cell attend over their shared prefix together
        (`prefix_attention`): the scheduler queues a cell's rows together.
    budget: what bounds memory, in words (`--memory-gb 4`, the auto budget's line, or no cap).
    attention: how rows sharing a prefix attend: "group" (a cell's rows in one buffer, one fused
        call per chunk: MlxEngine on a GPU), "shared" (one prefix copy, `prefix_attention`),
        "copies" (a copy per row); "" where the engine does not say (a server).
    """

    shape: RowShape
    probe_rows: int
    restart_rows: int
    batch_size: int
    prefix_slots: int | None = None
    share_prefixes: bool = False
    admits_by_memory: bool = False
    groups_by_prefix: bool = False
    budget: str = NO_MEMORY_CAP
    attention: str = ""

    @property
    def rows_cap(self) -> int:
        """Requests to keep in flight: up to the batch size where rows are admitted by the
        bytes they add (a short restart never waits for the room a 16K probe would need), else
        what holds at the longest row."""
        if self.admits_by_memory:
            return max(1, self.batch_size)
        return max(1, min(self.probe_rows, self.restart_rows))

    def line(self) -> str:
        """What the memory budget admits, for the command's closing line and `--dry-run`."""

        def limit(rows: int) -> str:
            return "--batch-size" if rows >= self.batch_size else "memory"

        return (
            f"memory ({self.budget}) admits {self.probe_rows} rows at the deepest anchor "
            f"({self.shape.probe_tokens:,} tokens; limited by {limit(self.probe_rows)}), "
            f"{self.restart_rows} at the longest restart (limited by {limit(self.restart_rows)})"
        )


@dataclass
class EngineStats:
    """What an engine measured over its life, for closing lines, run records and the benches;
    a field an engine cannot measure keeps its default (None / 0 / empty).

    generated_tokens / prefill_tokens: tokens sampled; prompt tokens pushed through the model.
    occupancy: token-weighted mean rows in flight / batch size (MlxEngine.occupancy).
    attention_fill: real / padded attention positions of the decode steps.
    peak_memory_bytes: the accelerator's peak allocation (weights included).
    rows_in_flight_max: the most rows in flight at once.
    rows_by_context: the most rows in flight in a decode step, by its longest context (powers
        of two).
    decode_by_context: [tokens made, seconds] of decode steps by the same powers of two.
    notes: what happened that the user should know (endpoints that died).
    rows_by_attention: rows admitted by the attention path that served them ("group", "shared",
        "copies", "row by row"; MlxEngine), for the closing line.
    """

    generated_tokens: int = 0
    prefill_tokens: int = 0
    occupancy: float | None = None
    attention_fill: float | None = None
    peak_memory_bytes: int = 0
    rows_in_flight_max: int = 0
    rows_by_context: dict[int, int] = field(default_factory=dict)
    decode_by_context: dict[int, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rows_by_attention: dict[str, int] = field(default_factory=dict)


class Engine(ABC):
    """A generation backend: everything the pipeline asks of one. A new backend implements
    `identity` and `generate`; the rest has defaults that suit an engine with a fixed number of
    rows in flight and no reusable state (what an HTTP server or a plain loop is).

    `generate` consumes requests lazily and yields each result as soon as its row finishes (not
    in request order). The request source may yield None: "nothing is ready now" (more work
    will follow from results still in flight); the backend stops refilling until its next
    result and asks again. A source must not yield None while no row of its is in flight. This
    lets one `generate` call serve a whole run whose next requests depend on earlier results
    (pipeline.scheduler).

    generated_tokens / prefill_tokens: running totals over the engine's life (tokens sampled;
    prompt tokens actually pushed through the model, shared-prefix passes included), for
    progress (read from another thread between results) and the benchmarks. An engine advances
    them as it goes."""

    generated_tokens: int = 0
    prefill_tokens: int = 0
    batch_size: int = 8

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """Backend name, version and the settings that can change tokens; a run records it in
        its manifest and refuses to mix engines."""

    @abstractmethod
    def generate(self, requests: Iterable[GenRequest | None]) -> Iterator[GenResult]:
        """Yield one result per request (see the class doc)."""

    def plan(self, shape: RowShape) -> EnginePlan:
        """How rows of `shape` would run, without changing the engine; raises BtError when a
        memory budget cannot hold even one row (before anything is written). Default: the
        batch size at any length, no shared-prefix bound."""
        return EnginePlan(shape, self.batch_size, self.batch_size, self.batch_size)

    def configure(self, plan: EnginePlan) -> None:  # noqa: B027 (a default: nothing to do)
        """Apply a plan this engine made (`plan`) before the requests it was made for. Default:
        nothing to set."""

    def release_prefix(self, key: str) -> None:  # noqa: B027 (a default: nothing to do)
        """A hint: no further request will use the shared prefix kept under `key` (a cell whose
        probes are done). Default: nothing is kept."""

    def stats(self) -> EngineStats:
        """What the engine measured so far (`EngineStats`)."""
        return EngineStats(self.generated_tokens, self.prefill_tokens)

    def close(self) -> None:  # noqa: B027 (a default: nothing to do)
        """Release connections and threads (HTTP backends). Default: nothing held."""


def check_batch_size(batch_size: int) -> None:
    """`--batch-size` is a positive number of rows (bt's engines and `bt serve`)."""
    if batch_size < 1:
        raise BtError(f"--batch-size: expected a positive integer, got {batch_size}")


def check_api_key(key: str | None) -> None:
    """An API key, when given, is one printable word: it goes into an HTTP header (bt's client
    sends it, `bt serve` expects it)."""
    if key is not None and (not key or any(c.isspace() for c in key) or not key.isprintable()):
        raise BtError("--api-key: expected a non-empty key without spaces or control characters")


# How an MLX engine's rows sharing a prefix attend (`EngineSpec.attention`, `bt continue
# --attention`; `mlx_backend.MlxEngine`).
ATTENTION_PATHS = ("auto", "group", "shared", "copies")


@dataclass(frozen=True)
class EngineSpec:
    """What the user asked for; `breakthrough.engine.make_engine` turns it into an Engine.

    backend: "mlx" (in-process mlx-lm, one prefill per trace) or "mlx-fresh" (the same model
        and sampler with every reuse hint ignored: a fresh prefill per request; for checks), or
        a server: "vllm" (an OpenAI-style `/v1/completions`: vLLM, or `bt serve`) or "sglang"
        (SGLang's `/generate`).
    batch_size: rows in flight at most (in-process backends).
    memory_budget_bytes: KV-cache memory the rows in flight and the shared prefixes may use
        (None: `--memory-gb auto`, what this machine offers minus the weights and a margin,
        `engine.memory.auto_budget`; 0: no cap).
    kv_bits: quantize the KV cache's plain attention layers to 4 or 8 bits (None: the model's
        dtype; MLX backends). It changes tokens: a run records it (`bt continue --kv-bits`).
    endpoints: server base URLs (HTTP backends; several form a fleet routed by cell).
    max_inflight: requests in flight per endpoint (0: the server's reported limit, else 16).
    accept_processed_logprobs: use a server whose log-probs are taken after temperature / top-k
        (refused by default: they would not be the model's distribution).
    request_timeout_s: seconds one attempt of an HTTP request may take before it is retried.
    retries: further attempts after a failed one (a request's deadline bounds them all:
        `http_client.RetryPolicy.deadline_s`).
    api_key: sent as `Authorization: Bearer KEY` (never recorded, printed or shown by repr).
    instrument: compute the protocol 2.2 per-token signals (and hidden-state fields) in every
        decode step (MLX backends); False keeps the log-prob and full-distribution entropy
        only, which is what continuations need (protocol 2.2 instruments the base trace).
        Never changes a token.
    attention: how rows sharing a prefix attend (MLX backends, `ATTENTION_PATHS`): "auto" (the
        device rule: group buffers on a GPU, shared-prefix attention or copies on the CPU),
        "group", "shared" or "copies" to force one.
    """

    backend: str = "mlx"
    batch_size: int = 8
    memory_budget_bytes: int | None = None
    kv_bits: int | None = None
    endpoints: tuple[str, ...] = ()
    max_inflight: int = 0
    accept_processed_logprobs: bool = False
    request_timeout_s: float = REQUEST_TIMEOUT_S
    retries: int = RETRIES
    api_key: str | None = field(default=None, repr=False)
    instrument: bool = True
    attention: str = "auto"

    def __post_init__(self) -> None:
        """Refuse settings no engine can run, in one line naming the option that sets each: the
        one place these rules live (the commands build an EngineSpec before anything is
        written, so a mistake is refused there)."""
        if self.backend not in BACKENDS:
            raise BtError(f"--backend: expected one of {', '.join(BACKENDS)}, got {self.backend!r}")
        check_batch_size(self.batch_size)
        if self.attention not in ATTENTION_PATHS:
            raise BtError(
                f"--attention: expected one of {', '.join(ATTENTION_PATHS)}, got {self.attention!r}"
            )
        if self.attention != "auto" and self.backend != "mlx":
            raise BtError(f"--attention applies to --backend mlx, not {self.backend}")
        if self.backend not in HTTP_BACKENDS:  # an mlx-lm bt was not tested with: one line now
            from breakthrough.engine.mlx_version import check_mlx_lm

            check_mlx_lm()
        if self.endpoints and self.backend not in HTTP_BACKENDS:
            raise BtError(
                f"--endpoint applies to --backend {' or '.join(HTTP_BACKENDS)}, not {self.backend}"
            )
        if self.max_inflight < 0:
            raise BtError(
                "--max-inflight: expected 0 (the server's limit) or a positive integer, "
                f"got {self.max_inflight}"
            )
        if not (0 < self.request_timeout_s <= MAX_REQUEST_TIMEOUT_S):  # also refuses nan
            raise BtError(
                f"--request-timeout: expected seconds in (0, {MAX_REQUEST_TIMEOUT_S:g}], "
                f"got {self.request_timeout_s:g}"
            )
        if not 0 <= self.retries <= MAX_RETRIES:
            raise BtError(
                f"--retries: expected an integer in [0, {MAX_RETRIES}], got {self.retries}"
            )
        check_api_key(self.api_key)


BACKENDS: tuple[str, ...] = ("mlx", "mlx-fresh", "vllm", "sglang")
HTTP_BACKENDS: tuple[str, ...] = ("vllm", "sglang")


def check_request(req: GenRequest, keys: set[str], *, hidden_states: bool = True) -> None:
    """What every backend refuses before generating: a key used twice in one `generate` call
    (results are matched back by key), an empty prompt, a non-positive token budget, a
    `hidden_stride` that is not an integer >= 0, and hidden vectors asked of a backend that
    cannot return them (`hidden_states=False`: the HTTP backends, which see only token ids and
    log-probs)."""
    if req.key in keys:
        raise BtError(f"duplicate request key {req.key!r} in one generate call")
    keys.add(req.key)
    if len(req.prompt) == 0:
        raise BtError(f"request {req.key!r} has an empty prompt")
    if req.max_tokens <= 0:
        raise BtError(f"request {req.key!r}: max_tokens must be > 0")
    stride = req.hidden_stride
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 0:
        raise BtError(f"request {req.key!r}: hidden_stride must be an integer >= 0, got {stride!r}")
    if stride > 0 and not hidden_states:
        raise BtError(
            f"request {req.key!r} asks for hidden vectors (hidden_stride {stride}); "
            "an HTTP backend cannot return hidden states: use --backend mlx or "
            "--hidden-stride 0"
        )
