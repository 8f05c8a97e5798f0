"""The MLX backend: bt's continuous batching (`decode_batch`) over mlx-lm's model classes, with
one batched sampler.

Sampling (protocol 1.4; `sampling/`, driven by `batch_step.py`). One call per decode step
draws every row's next token: a Gumbel-max over the row's candidate log-probs divided by the
temperature, with Gumbel noise hashed from (row seed, token index, token id), never from MLX's
global RNG, so a row's tokens do not depend on what else shares its batch. The candidate set
follows mlx-lm's `make_sampler` order: top-p on the full distribution (keep a token while the
probability mass ranked above it is < top_p), then min-p, then the top-k of those.
Temperature 0 is greedy (argmax), exactly as mlx-lm's `greedy_sampler`. (The randomness is
batch-independent by construction; the logits are batch-independent as far as the kernels are:
bit-identical on the tiny fp32 test model with the bundled BLAS and with OpenBLAS on Intel, while
OpenBLAS 0.3.21 on AMD Zen computes a product's rows by their place among its rows (a decode
step's float32 logits differ in the last bits between batch sizes: bench/RESULTS.md), and
quantized kernels may differ in the last bits between batch shapes; either can very rarely flip
a draw; so may mlx-lm's padded batch attention under OpenBLAS, whose blocking follows a row's
padding. Shared-prefix rows, `prefix_attention` (fixed shapes, a row in its lane's place) and
`row_attention` (row by row), are batch-independent by construction.) A second phase of the
same sample (e.g. an answer phase) should use another seed, since the token index restarts at 0
for every request.

Per-token statistics, both from the model's FULL next-token distribution at temperature 1
(log-softmax of the logits, before temperature, top-k and top-p; the same distribution the
reference recorder stored, whose normalised entropy divides by ln|V|):
  * logprob: log p(chosen token), <= 0;
  * entropy: -sum_v p(v) log p(v) in nats, >= 0.
They are thus comparable between greedy and sampled rows. With `instrument=True` (the default)
each result also carries the protocol 2.2 per-token fields (`GenResult.signals`,
`sampling.SIGNAL_FIELDS`) and the hidden-state fields (`sampling.HIDDEN_FIELDS`: of the final-
normalised hidden state, read from the model's final norm during the same forward), computed in
the same decode step: no second forward pass. A request with `hidden_stride` N > 0 also gets
the final-normalised hidden vectors of tokens 0, N, 2N, ... (`GenResult.hidden`, float16; the
state whose logits drew each token), taken from that same forward.

Reuse (the hints of the engine contract). A request with a `shared_prefix` starts from a cache of
that sequence cut back to the request's prompt (one prefill per shared prefix, see
`prefix_cache.PrefixCache`); a request that `follows` an earlier one whose state was kept
continues from that live cache (no second prefill). With `reuse_prefixes=False` (backend
"mlx-fresh") every hint is ignored and each prompt is prefilled afresh: the same tokens, the
reference procedure's cost."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from breakthrough.engine.contract import (
    ATTENTION_PATHS,
    Engine,
    EngineStats,
    GenRequest,
    GenResult,
    SharedPrefix,
    check_request,
)
from breakthrough.engine.decode_counters import DecodeCounters
from breakthrough.engine.group_path import GROUP_SLOTS, GroupPath
from breakthrough.engine.memory import SHARED_PREFIXES, Booking, MemoryBook
from breakthrough.engine.memory_plan import MemoryPlan
from breakthrough.engine.mlx_version import check_mlx_lm
from breakthrough.engine.prefix_cache import CacheBytes, PrefixCache
from breakthrough.engine.prefix_reuse import PrefixReuse
from breakthrough.errors import BtError

check_mlx_lm()  # an mlx-lm this engine was not tested with: one line now (mlx_compat)

if TYPE_CHECKING:  # batch_step imports mlx at its top; this module imports it only to generate
    from breakthrough.engine.batch_step import RowSpec, StepStats
    from breakthrough.engine.decode_batch import DecodeBatch, StepToken, StopMatcher
    from breakthrough.engine.group_rows import GroupRows

_noticed = False


def _blas_notice_once() -> None:
    """Say once per process when MLX's CPU matmuls run on the slow reference BLAS."""
    global _noticed
    if _noticed:
        return
    _noticed = True
    import mlx.core as mx

    from breakthrough.engine.blas import notice

    line = notice() if mx.default_device() == mx.cpu else None
    if line:
        print(line, file=sys.stderr)


KV_BITS = (4, 8)
# How rows attend (`MlxEngine(attention=)`, contract.ATTENTION_PATHS): "auto" follows the device
# rule (`_sharing_pays`, `_group_pays`); "group" puts every row of a cell in its cell's group
# buffer (`group_kv`, one fused attention call per chunk of rows, `group_attention`) on any
# device; "shared" points rows into their cell's one prefix copy (`prefix_attention`); "copies"
# gives each row its own copy in mlx-lm's batch cache.


def check_kv_bits(model, bits: int) -> int:
    """`--kv-bits` for this model: 4 or 8, and head dimensions mlx can quantize in groups of
    `prefix_cache.KV_GROUP_SIZE` (read from a two-token forward; one-line BtError otherwise)."""
    import mlx.core as mx

    from breakthrough.engine.mlx_compat import KVCache, make_prompt_cache
    from breakthrough.engine.prefix_cache import KV_GROUP_SIZE

    if bits not in KV_BITS:
        raise BtError(f"--kv-bits: expected 4 or 8, got {bits}")
    cache = make_prompt_cache(model)
    model(mx.array([[0, 0]]), cache=cache)
    dims = {int(c.keys.shape[-1]) for c in cache if type(c) is KVCache and c.keys is not None}
    dims |= {int(c.values.shape[-1]) for c in cache if type(c) is KVCache and c.values is not None}
    if any(d % KV_GROUP_SIZE for d in dims):
        raise BtError(
            f"--kv-bits: this model's head dimension ({', '.join(map(str, sorted(dims)))}) "
            f"is not a multiple of {KV_GROUP_SIZE}, which quantized KV needs"
        )
    return int(bits)


class _Row:
    """One request in flight: what its responses have delivered so far, and its `RowSpec`
    (`spec`), whose `hidden_rows` collect the kept hidden vectors (`hidden_stride`)."""

    __slots__ = (
        "req",
        "spec",
        "tokens",
        "logprobs",
        "entropies",
        "sampling_entropies",
        "t0",
        "cached",
        "top",
        "signals",
    )

    def __init__(self, req: GenRequest, spec: RowSpec, cached: int):
        self.req = req
        self.spec = spec
        self.cached = cached
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.entropies: list[float] = []
        self.sampling_entropies: list[float] = []
        self.top: list[tuple[list[int], list[float]]] = []
        self.signals: list[list[float]] = []
        self.t0 = time.perf_counter()

    def add(self, token: int, stats: StepStats, instrument: bool) -> None:
        """One generated token and its statistics (`batch_step.StepStats`)."""
        self.tokens.append(int(token))
        self.logprobs.append(stats.logprob)
        self.entropies.append(stats.entropy)
        self.sampling_entropies.append(stats.sampling_entropy)
        if instrument:
            self.signals.append(stats.signals)
        if stats.top_ids is not None and stats.top_logprobs is not None:  # both or neither
            self.top.append((stats.top_ids, stats.top_logprobs))

    def hidden(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(token indices int32 [m], vectors float16 [m, d]) of the kept vectors of this row's
        tokens (a row may have run one step past its last token: that vector is dropped); None
        when the request asked for none."""
        if self.spec.hidden_stride <= 0:
            return None
        import mlx.core as mx

        kept = [(k, v) for k, v in self.spec.hidden_rows if k < len(self.tokens)]
        if not kept:
            raise BtError(
                f"request {self.req.key!r}: hidden vectors were asked for (hidden_stride "
                f"{self.spec.hidden_stride}) but the model's final norm could not be read"
            )
        stacked = mx.stack([v for _, v in kept])
        mx.eval(stacked)
        return (
            np.asarray([k for k, _ in kept], dtype=np.int32),
            np.array(stacked, dtype=np.float16),
        )


class _Feed:
    """The request source as `generate` pulls it: a request pulled but not admitted yet is
    `held` (it waits for memory), and the source may be exhausted or have nothing ready now
    (None: contract.Engine). A request whose group slot is held by a row in flight is `parked`
    (up to a batch of them) while later ones are admitted (`group_rows`)."""

    def __init__(self, source: Iterator[GenRequest | None]) -> None:
        self.source = source
        self.held: GenRequest | None = None
        self.exhausted = False
        self.keys: set[str] = set()
        self.parked: list[GenRequest] = []

    @property
    def done(self) -> bool:
        """Nothing more to admit: the source is exhausted and nothing waits."""
        return self.exhausted and self.held is None and not self.parked

    def next(self) -> GenRequest | None:
        """The held request, else the source's next one (checked, and held until admitted);
        None when the source is exhausted or has nothing ready."""
        if self.held is None and not self.exhausted:
            try:
                req = next(self.source)
            except StopIteration:
                self.exhausted = True
                return None
            if req is None:
                return None
            check_request(req, self.keys)
            self.held = req
        return self.held


class MlxEngine(GroupPath, MemoryPlan, PrefixReuse, Engine):
    """Continuous batching (`decode_batch.DecodeBatch`) of mlx-lm models on bt's caches.

    `generate(requests)` pulls requests lazily, keeps at most `batch_size` rows in flight,
    refills free slots as rows finish and yields each `GenResult` when its row finishes.
    """

    def __init__(
        self,
        model,
        eos_ids: Iterable[int],
        *,
        batch_size: int = 8,
        reuse_prefixes: bool = True,
        memory_budget_bytes: int | None = 0,
        kept_states: int | None = None,
        shared_prefixes: int = SHARED_PREFIXES,
        instrument: bool = True,
        kv_bits: int | None = None,
        share_prefixes: bool | None = None,
        attention: str = "auto",
        group_slots: int = GROUP_SLOTS,
    ):
        self.model = model
        if attention not in ATTENTION_PATHS:
            raise BtError(
                f"attention: expected one of {', '.join(ATTENTION_PATHS)}, got {attention}"
            )
        if attention == "shared":
            share_prefixes = True
        elif attention == "copies":
            share_prefixes = False
        self.attention = attention
        self.group_slots = max(1, int(group_slots))  # slots per cell at most (`_group_shape`)
        _blas_notice_once()
        from breakthrough.engine.allocator import keep_freed_memory
        from breakthrough.engine.row_attention import install

        keep_freed_memory()  # MLX's per-step buffers reused, not faulted in afresh (allocator)

        # Shared-prefix rows attend together over their cell's one prefix copy, each over its
        # own suffix apart (`prefix_attention`, through `row_attention.install`); quantized
        # rows one by one. False when the model's attention does not call mlx-lm's function.
        self.row_attention = install(model)
        # `--kv-bits`: plain attention layers hold keys and values quantized to this many bits
        # (None: the model's dtype). It changes tokens: a run records it (cell_loop).
        self.kv_bits = None if kv_bits is None else check_kv_bits(model, kv_bits)
        # Rows point into their cell's one prefix copy (`shared_kv`) when that pays or memory
        # needs it (None: `plan` decides, `_sharing_pays`); otherwise each row keeps a copy
        # in mlx-lm's batch cache. Quantized KV exists only as shared rows.
        self.share_prefixes = bool(share_prefixes) or kv_bits is not None
        self._share_fixed = share_prefixes is not None or kv_bits is not None
        # Rows in their cell's group buffer (`group_rows`; None: not this engine's path). Set by
        # `configure`, or by `generate` for an engine used without a plan (`bt serve`).
        self.groups: GroupRows | None = None
        self._group_planned = False  # `configure` decided (group or not) for the run
        self._eligible: bool | None = None  # `group_eligible`, measured once
        self._chunk: int | None = None  # `_group_shape`'s rows per attention call, measured once
        # request key -> (what the answer depends on, GroupTarget or None) of requests not yet
        # admitted (`_group_target`): a parked request is asked about at every step
        self._targets: dict[str, tuple[tuple, Any]] = {}
        self.rows_by_attention: dict[str, int] = {}  # rows admitted per attention path (`_path`)
        self._unshared_tokens = 0  # the longest restart row a configured plan named
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        if not self.eos_ids:
            raise BtError("the model has no EOS token id; cannot generate")
        self.batch_size = max(1, int(batch_size))
        self._uid = 0  # the last row id handed to the decode batch
        self.reuse_prefixes = bool(reuse_prefixes)
        # None: `--memory-gb auto` (engine.memory.auto_budget: what this machine can give the KV
        # cache once the weights are loaded); 0: no cap.
        self.memory_auto_line: str | None = None
        if memory_budget_bytes is None:
            from breakthrough.engine.memory import auto_budget

            auto = auto_budget(model)
            memory_budget_bytes, self.memory_auto_line = auto.budget_bytes, auto.describe()
        self.memory_budget_bytes = int(memory_budget_bytes)
        # Report each step's most likely tokens (GenResult.top_ids / top_logprobs; bt serve).
        self.top_logprobs = 0
        # Per-token instrumentation (GenResult.signals, sampling.SIGNAL_FIELDS); off only to
        # measure its cost (bench/instrumentation_overhead.py). It never changes tokens.
        self.instrument = bool(instrument)
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.last_elapsed_s = 0.0
        # Occupancy, attention fill, rows and tokens/s by context depth (`stats`).
        self.counters = DecodeCounters()
        # Reuse state: the last few shared prefixes' caches, and the final caches of rows that
        # asked to be continued (bounded FIFO: an evicted state only costs a fresh prefill).
        self._prefixes: dict[str, tuple[SharedPrefix, PrefixCache]] = {}
        self._max_prefixes = max(1, shared_prefixes)
        # Shared prefixes kept now: `_max_prefixes`, fewer (down to MIN_PREFIX_SLOTS) when the
        # memory budget is tight (`plan`, `configure`; the scheduler reads the plan's).
        self._prefix_slots = self._max_prefixes
        self._kept: dict[str, tuple[list[int], list]] = {}
        self._max_kept = kept_states or 2 * self.batch_size
        self._kv_bytes: CacheBytes | None = None
        # Admission by bytes: what each row in flight and each kept state holds, and
        # the prefixes they point into (a released prefix stays alive while they do).
        self.book = MemoryBook()
        self.peak_memory_bytes = 0  # MLX's peak allocation during `generate` (weights included)
        # Keys of rows to drop before their end (`cancel`: bt serve's client went away).
        self._cancelled: set[str] = set()
        self._cancel_lock = threading.Lock()
        if attention == "group" and not self.group_eligible():
            raise BtError(
                "attention group: this engine cannot hold rows in group buffers (it needs "
                "full-precision keys and values, prefix reuse, a model whose layers are all plain "
                "attention and whose attention calls mlx-lm's function)"
            )

    def cancel(self, key: str) -> None:
        """Stop generating the in-flight row of request `key` (from any thread): at the next
        step it leaves the batch and `generate` yields its result so far with finish_reason
        "error" and error "cancelled". A key that is not in flight is ignored."""
        with self._cancel_lock:
            self._cancelled.add(key)

    def _drop_cancelled(self, batch: DecodeBatch, rows: dict) -> list[GenResult]:
        with self._cancel_lock:
            keys, self._cancelled = self._cancelled, set()
        uids = [uid for uid, row in rows.items() if row.req.key in keys]
        if not uids:
            return []
        batch.remove(uids)
        dropped = []
        for uid in uids:
            row = rows.pop(uid)
            self._retire(row.req.key)
            if self.groups is not None:
                self.groups.release(row.req.key)
            dropped.append(
                GenResult(
                    key=row.req.key,
                    tokens=row.tokens,
                    logprobs=np.asarray(row.logprobs, dtype=np.float32),
                    entropies=np.asarray(row.entropies, dtype=np.float32),
                    sampling_entropies=np.asarray(row.sampling_entropies, dtype=np.float32),
                    finish_reason="error",
                    elapsed_s=time.perf_counter() - row.t0,
                    prompt_tokens=len(row.req.prompt),
                    cached_tokens=row.cached,
                    error="cancelled",
                )
            )
        return dropped

    @classmethod
    def from_loaded(cls, loaded, **kwargs) -> MlxEngine:
        """From a `breakthrough.models.loading.LoadedModel`."""
        return cls(loaded.model, loaded.eos_ids, **kwargs)

    def identity(self) -> dict:
        """Recorded in the run manifest: a run never mixes backends (batch sizes and memory
        budgets do not change tokens and are left out, so a resumed run may change them)."""
        from importlib import metadata

        def version(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "absent"

        from breakthrough import __version__
        from breakthrough.engine.blas import blas_name
        from breakthrough.engine.sampling import SAMPLER_ID

        # The sampler's randomness scheme and the BLAS (last bits of CPU float matmuls) are part
        # of what produced the tokens.
        return {
            "backend": "mlx" if self.reuse_prefixes else "mlx-fresh",
            "bt": __version__,
            "mlx": version("mlx"),
            "mlx_lm": version("mlx-lm"),
            "sampler": SAMPLER_ID,
            "blas": blas_name(),
        }

    @property
    def occupancy(self) -> float | None:
        """Mean batch occupancy of the decode steps so far (`DecodeCounters.occupancy`)."""
        return self.counters.occupancy(self.batch_size)

    @property
    def attention_fill(self) -> float | None:
        """Real / padded attention positions of the decode steps so far: mlx-lm's batch cache
        pads every row to the longest one in flight, and on CPU that padded attention is a large
        part of a step at long contexts (what the scheduler's longest-context-first order
        reduces); 1.0 where rows share their prefix (`prefix_attention`, `row_attention`: no
        padding); None before the first step."""
        return self.counters.attention_fill

    def stats(self) -> EngineStats:
        return EngineStats(
            generated_tokens=self.generated_tokens,
            prefill_tokens=self.prefill_tokens,
            occupancy=self.occupancy,
            attention_fill=self.attention_fill,
            peak_memory_bytes=self.peak_memory_bytes,
            rows_in_flight_max=self.counters.rows_in_flight_max,
            rows_by_context=dict(self.counters.rows_by_context),
            decode_by_context={k: list(v) for k, v in self.counters.decode_by_context.items()},
            rows_by_attention=dict(self.rows_by_attention),
        )

    def _start(self, req: GenRequest) -> tuple[list, list[int], str | None, int]:
        """(row cache, ids to feed, shared-prefix key it points into or None, ids pushed
        through the model for it): the longest
        reusable state for `req.prompt` as a row that holds only its own tokens
        (`shared_kv.SharedRowCache` for plain attention layers: a reused prefix stays the one
        shared copy), prefilled at batch 1 up to the prompt's last id, which is fed to the batch
        (the row's first logits come from it)."""
        from breakthrough.engine.mlx_compat import KVCache, QuantizedKVCache
        from breakthrough.engine.prefix_cache import KV_GROUP_SIZE, make_cache, prefill
        from breakthrough.engine.shared_kv import QuantizedSharedRowCache, SharedRowCache

        target = self._group_target(req)
        self._targets.pop(req.key, None)  # admitted: its memo is done
        if target is not None:
            return self._start_group(req, target)
        prompt = [int(t) for t in req.prompt]
        cache, feed, key = self._reused(req, prompt)
        if cache is None:
            cache, feed = make_cache(self.model), prompt
        room = len(feed) + int(req.max_tokens) + 1  # the batch may run one step past the end
        row = []
        for layer in cache:
            if self.kv_bits and type(layer) in (KVCache, QuantizedKVCache):
                layer = QuantizedSharedRowCache.quantized_from(layer, self.kv_bits, KV_GROUP_SIZE)
            elif type(layer) is KVCache and self.share_prefixes:
                layer = SharedRowCache.from_cache(layer)
            if isinstance(layer, SharedRowCache):
                layer.reserve(room)
                layer.lane = req.lane
            row.append(layer)
        if len(feed) > 1:
            prefill(self.model, row, feed[:-1])
        return row, feed[-1:], key, len(feed)

    def _admit(self, req: GenRequest) -> tuple[list, list[int], int]:
        """Build `req`'s row (`_start`) and book what it holds: its own tokens' buffers at
        their final length, its final length (for the step transient) and the prefix it points
        into. Returns (row cache, the one id to feed, ids pushed through the model for it)."""
        cache, feed, prefix, fed = self._start(req)
        self.prefill_tokens += fed
        length = len(req.prompt) + int(req.max_tokens) + 1
        shared = self._kept_shared_len(cache)
        path = self._path(cache)
        self.rows_by_attention[path] = self.rows_by_attention.get(path, 0) + 1
        own = 0.0  # a group row's slot is its cell's (booked with the prefix)
        if self.memory_budget_bytes and path != "group":
            own = self.layout().own_row(length - shared)
        self.book.rows[req.key] = Booking(own, length, prefix)
        return cache, feed, fed

    def _retire(self, key: str) -> str | None:
        """Forget a finished row's booking; returns the prefix it pointed into."""
        return self.book.retire(key, set(self._prefixes))

    def _stop(self, req: GenRequest) -> StopMatcher:
        """The row's stop matcher: each EOS id, then the request's stop sequences."""
        from breakthrough.engine.decode_batch import StopMatcher

        seqs: list[tuple[int, ...]] = [(e,) for e in sorted(self.eos_ids)]
        seqs += [tuple(int(t) for t in s) for s in req.stop_sequences if len(s) > 0]
        return StopMatcher(seqs)

    def generate(self, requests: Iterable[GenRequest | None]) -> Iterator[GenResult]:
        import mlx.core as mx

        from breakthrough.engine.decode_batch import DecodeBatch

        batch = DecodeBatch(self.model)
        feed = _Feed(iter(requests))
        rows: dict[int, _Row] = {}
        self._start_groups()
        t_start = time.perf_counter()
        try:
            mx.reset_peak_memory()
        except Exception:  # pragma: no cover
            pass
        try:
            while True:
                if self._cancelled:
                    yield from self._drop_cancelled(batch, rows)
                self._refill(batch, feed, rows)
                if not rows:
                    if feed.done:
                        break
                    raise BtError("the request source had nothing ready while no row was in flight")
                step_start = time.perf_counter()
                responses = batch.step()
                if responses:
                    yield from self._record_step(rows, responses, time.perf_counter() - step_start)
                # the finished rows' kept caches are stored by now; dropped here, not when the
                # next step reassigns them, so their buffers are free before the next admission
                del responses
        finally:
            self.last_elapsed_s = time.perf_counter() - t_start
            if self.groups is not None:
                self.groups.release_all()
            batch.close()
            try:
                self.peak_memory_bytes = max(self.peak_memory_bytes, int(mx.get_peak_memory()))
            except Exception:  # pragma: no cover
                pass

    def _refill(self, batch: DecodeBatch, feed: _Feed, rows: dict[int, _Row]) -> None:
        """Fill free slots, admitting each request only while its bytes fit the budget; one that
        does not waits (`feed.held`) until rows finish."""
        from breakthrough.engine.batch_step import RowSpec
        from breakthrough.engine.decode_batch import NewRow

        new: list[tuple[GenRequest, list, list[int], int]] = []
        for parked in list(feed.parked):  # waiting for their group slot: first in line
            if len(rows) + len(new) >= self.batch_size:
                break
            if self._slot_ready(parked) and self._fits(parked, len(rows) + len(new)):
                feed.parked.remove(parked)
                new.append((parked, *self._admit(parked)))
        while len(rows) + len(new) < self.batch_size:
            req = feed.next()
            if req is None:
                break
            if not self._slot_ready(req):
                if len(feed.parked) >= self.batch_size:
                    break
                feed.parked.append(req)
                feed.held = None
                continue
            if not self._fits(req, len(rows) + len(new)):
                if rows or new:
                    break
                self._make_room(req)
            feed.held = None
            new.append((req, *self._admit(req)))
        if not new and not rows and feed.parked:  # every slot is free now: the first must go
            first = feed.parked.pop(0)
            self._make_room(first)
            new.append((first, *self._admit(first)))
        if not new:
            return
        specs = [
            RowSpec(r.seed, r.sampling, self.top_logprobs, self.instrument, r.hidden_stride)
            for r, _, _, _ in new
        ]
        joining = []
        for (r, cache, ids, fed), spec in zip(new, specs, strict=True):
            self._uid += 1
            stop = self._stop(r)
            keeps = bool(r.keep_state and self.reuse_prefixes)
            joining.append(
                NewRow(self._uid, ids[-1], spec, cache, int(r.max_tokens), stop, keeps_cache=keeps)
            )
            rows[self._uid] = _Row(r, spec, len(r.prompt) - fed)
        batch.add(joining)
        self.counters.admitted(len(rows))

    def _record_step(
        self, rows: dict[int, _Row], responses: list[StepToken], seconds: float
    ) -> Iterator[GenResult]:
        """Append one decode step's tokens and statistics to their rows, count the step, and
        yield the results of the rows it finished (their kept states stored first)."""
        contexts = []
        ready = []
        for resp in responses:
            row = rows[resp.uid]
            contexts.append(len(row.req.prompt) + len(row.tokens))  # before this token
            row.add(resp.token, resp.stats, self.instrument)
            if resp.finish_reason is None:
                continue
            del rows[resp.uid]
            prefix = self._retire(row.req.key)
            if row.req.keep_state and self.reuse_prefixes and resp.cache is not None:
                seq = [int(t) for t in row.req.prompt] + row.tokens
                cache = resp.cache
                if self.groups is not None and row.req.key in self.groups.held:
                    cache = self.groups.kept(cache)  # copied out before its slot is reused
                self._keep(row.req.key, seq, cache, prefix)
            if self.groups is not None:
                self.groups.release(row.req.key)
            ready.append(self._result(row, resp))
        shared = self.share_prefixes and self.row_attention  # shared rows: no padding
        self.counters.step(contexts, padded=not shared, seconds=seconds)
        self.generated_tokens += len(responses)
        yield from ready

    def _result(self, row: _Row, resp) -> GenResult:
        import mlx.core as mx

        if resp.finish_reason == "length":
            reason = "length"
        elif row.tokens[-1] in self.eos_ids:
            reason = "eos"
        else:
            reason = "stop_sequence"
        try:
            peak = int(mx.get_peak_memory())
        except Exception:  # pragma: no cover
            peak = 0
        return GenResult(
            key=row.req.key,
            tokens=row.tokens,
            logprobs=np.asarray(row.logprobs, dtype=np.float32),
            entropies=np.asarray(row.entropies, dtype=np.float32),
            sampling_entropies=np.asarray(row.sampling_entropies, dtype=np.float32),
            finish_reason=reason,
            elapsed_s=time.perf_counter() - row.t0,
            prompt_tokens=len(row.req.prompt),
            peak_memory_bytes=peak,
            cached_tokens=row.cached,
            top_ids=np.asarray([t[0] for t in row.top], dtype=np.int32) if row.top else None,
            top_logprobs=np.asarray([t[1] for t in row.top], dtype=np.float32) if row.top else None,
            signals=self._signals(row) if self.instrument else None,
            hidden=row.hidden(),
        )

    @staticmethod
    def _signals(row: _Row) -> dict[str, np.ndarray]:
        """The row's instrumentation as one float32 array per `sampling.SIGNAL_FIELDS` name."""
        from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS

        names = SIGNAL_FIELDS + HIDDEN_FIELDS
        table = np.asarray(row.signals, dtype=np.float32).reshape(len(row.signals), len(names))
        return {name: table[:, j].copy() for j, name in enumerate(names)}
