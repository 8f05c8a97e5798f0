"""The MLX backend: mlx-lm's `BatchGenerator` (continuous batching) with one batched sampler.

Sampling (protocol 1.4; `sampling.py`, driven by `batch_step.py`). One call per decode step
draws every row's next token: a Gumbel-max over the row's candidate log-probs divided by the
temperature, with Gumbel noise hashed from (row seed, token index, token id), never from MLX's
global RNG, so a row's tokens do not depend on what else shares its batch. The candidate set
follows mlx-lm's `make_sampler` order: top-p on the full distribution (keep a token while the
probability mass ranked above it is < top_p), then min-p, then the top-k of those.
Temperature 0 is greedy (argmax), exactly as mlx-lm's `greedy_sampler`. (The randomness is
batch-independent by construction; the logits are batch-independent as far as the kernels are:
bit-identical on the tiny fp32 test model with the bundled and with OpenBLAS, while quantized
kernels may differ in the last bits between batch shapes, which can very rarely flip a draw.) A
second phase of the same sample (e.g. an answer phase) should use another seed, since the token
index restarts at 0 for every request.

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
from collections import deque
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np

from breakthrough.engine.contract import GenRequest, GenResult, SharedPrefix, check_request
from breakthrough.engine.prefix_cache import PrefixCache, cache_bytes, cache_length, trim_to
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT

if TYPE_CHECKING:  # batch_step imports mlx at its top; this module imports it only to generate
    from breakthrough.engine.batch_step import RowSpec

_noticed = False
# The fewest shared-prefix caches an engine keeps under a tight memory budget (`capacity`): a
# few cells' probes in flight at once.
MIN_PREFIX_SLOTS = 4


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


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading ids `a` and `b` share."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if list(a[:mid]) == list(b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


class _Row:
    """One request in flight: what its responses have delivered so far, and its `RowSpec`
    (`spec`), whose `hidden_rows` collect the kept hidden vectors (`hidden_stride`)."""

    __slots__ = ("req", "spec", "tokens", "logprobs", "entropies", "sampling_entropies", "t0",
                 "cached", "top", "signals")

    def __init__(self, req: GenRequest, spec: "RowSpec", cached: int):
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

    def hidden(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(token indices int32 [m], vectors float16 [m, d]) of the kept vectors of this row's
        tokens (a row may have run one step past its last token: that vector is dropped); None
        when the request asked for none."""
        if self.spec.hidden_stride <= 0:
            return None
        import mlx.core as mx

        kept = [(k, v) for k, v in self.spec.hidden_rows if k < len(self.tokens)]
        if not kept:
            raise BtError(f"request {self.req.key!r}: hidden vectors were asked for (hidden_stride "
                          f"{self.spec.hidden_stride}) but the model's final norm could not be read")
        stacked = mx.stack([v for _, v in kept])
        mx.eval(stacked)
        return (np.asarray([k for k, _ in kept], dtype=np.int32),
                np.array(stacked, dtype=np.float16))


class MlxEngine:
    """Continuous batching on mlx-lm's `BatchGenerator`.

    `generate(requests)` pulls requests lazily, keeps at most `batch_size` rows in flight,
    refills free slots as rows finish and yields each `GenResult` when its row finishes.
    """

    def __init__(
        self,
        model,
        eos_ids: Iterable[int],
        *,
        batch_size: int = 8,
        prefill_batch_size: int | None = None,
        prefill_step_size: int = 2048,
        reuse_prefixes: bool = True,
        memory_budget_bytes: int = 0,
        kept_states: int | None = None,
        shared_prefixes: int = 8,
        instrument: bool = True,
    ):
        self.model = model
        _blas_notice_once()
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        if not self.eos_ids:
            raise BtError("the model has no EOS token id; cannot generate")
        self.batch_size = max(1, int(batch_size))
        self.prefill_batch_size = prefill_batch_size or min(self.batch_size, 8)
        self.prefill_step_size = prefill_step_size
        self.reuse_prefixes = bool(reuse_prefixes)
        self.memory_budget_bytes = int(memory_budget_bytes)
        # Report each step's most likely tokens (GenResult.top_ids / top_logprobs; bt serve).
        self.top_logprobs = 0
        # Per-token instrumentation (GenResult.signals, sampling.SIGNAL_FIELDS); off only to
        # measure its cost (bench/instrumentation_overhead.py). It never changes tokens.
        self.instrument = bool(instrument)
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.last_elapsed_s = 0.0
        # Batch occupancy: over every decode step, the sum of rows in flight (= tokens made)
        # and of its square; `occupancy` is their ratio (token-weighted mean rows) / batch_size.
        self.step_rows = 0
        self.step_rows_sq = 0
        # Attention positions of every decode step: the rows' own context lengths, and the rows
        # times the longest one (mlx-lm pads a batch's cache to its longest row); their ratio is
        # `attention_fill`.
        self.attention_real = 0
        self.attention_padded = 0
        # Reuse state: the last few shared prefixes' caches, and the final caches of rows that
        # asked to be continued (bounded FIFO: an evicted state only costs a fresh prefill).
        self._prefixes: dict[str, tuple[SharedPrefix, PrefixCache]] = {}
        self._max_prefixes = max(1, shared_prefixes)
        # Shared prefixes kept now: `_max_prefixes`, fewer (down to MIN_PREFIX_SLOTS) when the
        # memory budget is tight (`capacity`). The scheduler reads it as `prefix_slots`.
        self._prefix_slots = self._max_prefixes
        self._kept: dict[str, tuple[list[int], list]] = {}
        self._max_kept = kept_states or 2 * self.batch_size
        self._kv_bytes: float | None = None
        # Keys of rows to drop before their end (`cancel`: bt serve's client went away).
        self._cancelled: set[str] = set()
        self._cancel_lock = threading.Lock()

    def cancel(self, key: str) -> None:
        """Stop generating the in-flight row of request `key` (from any thread): at the next
        step it leaves the batch and `generate` yields its result so far with finish_reason
        "error" and error "cancelled". A key that is not in flight is ignored."""
        with self._cancel_lock:
            self._cancelled.add(key)

    def _drop_cancelled(self, gen, rows: dict) -> list[GenResult]:
        with self._cancel_lock:
            keys, self._cancelled = self._cancelled, set()
        uids = [uid for uid, row in rows.items() if row.req.key in keys]
        if not uids:
            return []
        gen.remove(uids)
        dropped = []
        for uid in uids:
            row = rows.pop(uid)
            dropped.append(GenResult(
                key=row.req.key, tokens=row.tokens, logprobs=np.asarray(row.logprobs, dtype=np.float32),
                entropies=np.asarray(row.entropies, dtype=np.float32),
                sampling_entropies=np.asarray(row.sampling_entropies, dtype=np.float32),
                finish_reason="error", elapsed_s=time.perf_counter() - row.t0,
                prompt_tokens=len(row.req.prompt), cached_tokens=row.cached, error="cancelled"))
        return dropped

    @classmethod
    def from_loaded(cls, loaded, **kwargs) -> "MlxEngine":
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
        return {"backend": "mlx" if self.reuse_prefixes else "mlx-fresh", "bt": __version__,
                "mlx": version("mlx"), "mlx_lm": version("mlx-lm"),
                "sampler": SAMPLER_ID, "blas": blas_name()}

    @property
    def occupancy(self) -> float | None:
        """Mean batch occupancy of every decode step so far: the token-weighted mean of rows in
        flight (a step with r rows makes r tokens, so sum r^2 / sum r) divided by `batch_size`;
        None before the first step. Why token-weighted: it says how full the batch was for the
        average generated token, which is what the throughput depends on."""
        if not self.step_rows:
            return None
        return self.step_rows_sq / self.step_rows / self.batch_size

    @property
    def prefix_slots(self) -> int | None:
        """How many shared-prefix caches (one per cell: prompt + base trace) this engine keeps
        at once; None when it keeps none (`mlx-fresh`). The scheduler lets no more cells probe
        at once, so none of their prefixes is dropped and prefilled again."""
        return self._prefix_slots if self.reuse_prefixes else None

    @property
    def attention_fill(self) -> float | None:
        """Share of the attention positions of every decode step so far that are the rows' own
        tokens, not padding: mlx-lm's batch cache pads every row to the longest one in flight,
        and on CPU that padded attention is a large part of a step at long contexts (what the
        scheduler's longest-context-first order reduces); None before the first step."""
        if not self.attention_padded:
            return None
        return self.attention_real / self.attention_padded

    def capacity(self, row_tokens: int) -> int:
        """`batch_size`, lowered so that the rows' caches (twice: the growth transient) plus the
        shared-prefix caches this engine may hold (`prefix_slots` of them, each a full prefix
        of up to `row_tokens` plus its snapshots of untrimmable layers,
        `prefix_cache.CacheBytes`) fit `memory_budget_bytes`; BtError when not even one row
        fits. Under a tight budget the engine keeps fewer prefixes first (down to
        MIN_PREFIX_SLOTS, while they would take more than half of it), then fewer rows."""
        if not self.memory_budget_bytes:
            return self.batch_size
        if self._kv_bytes is None:
            self._kv_bytes = cache_bytes(self.model)
        b, tokens = self._kv_bytes, max(row_tokens, 1)
        snapshots = max([len(pc.snapshot_at) for _, pc in self._prefixes.values()]
                        + [len(DEFAULT.anchors) + 1])
        reserve = 0.0
        if self.reuse_prefixes:
            per_prefix = b.prefix_cache(tokens, snapshots)
            slots = self._max_prefixes
            while slots > MIN_PREFIX_SLOTS and slots * per_prefix > self.memory_budget_bytes / 2:
                slots -= 1
            self._prefix_slots = slots
            reserve = slots * per_prefix
        # x2: mlx-lm grows (and extends) a batch's cache by concatenation, so for one step the
        # old and the new buffers of every row are alive together (bench/long_trace.py)
        row = 2 * b.row(tokens)
        fit = int((self.memory_budget_bytes - reserve) // max(row, 1.0))
        if fit < 1:
            need = (reserve + row) / 2**30
            raise BtError(f"--memory-gb {self.memory_budget_bytes / 2**30:.3g} cannot hold one row of "
                          f"{tokens} tokens and the shared-prefix caches ({need:.3g} GB needed)")
        return min(self.batch_size, fit)

    # -- reuse -------------------------------------------------------------------------------
    def _prefix_cache(self, shared: SharedPrefix) -> PrefixCache:
        have = self._prefixes.get(shared.key)
        if have is not None and (have[0] is shared or have[0].ids == shared.ids):
            return have[1]
        cache = PrefixCache(self.model, shared.ids, snapshot_at=[s - 1 for s in shared.starts])
        self._prefixes.pop(shared.key, None)
        self._prefixes[shared.key] = (shared, cache)
        while len(self._prefixes) > self._prefix_slots:
            self._prefixes.pop(next(iter(self._prefixes)))
        return cache

    def release_prefix(self, key: str) -> None:
        """Drop the shared-prefix cache kept under `key` (a cell whose probes are all done:
        its restarts start from the chat prompt alone), so that the next cell's prefix does
        not evict one that queued probes still need. A later request naming it rebuilds it."""
        self._prefixes.pop(key, None)

    def _start(self, req: GenRequest) -> tuple[object, list[int]]:
        """(cache or None, ids to feed): the longest reusable state for `req.prompt`; at least
        the prompt's last id is always fed (the row's first logits come from it)."""
        prompt = [int(t) for t in req.prompt]
        if not self.reuse_prefixes:
            return None, prompt
        if req.follows is not None and req.follows in self._kept:
            seq, cache = self._kept.pop(req.follows)
            keep = min(cache_length(cache), common_prefix_length(seq, prompt), len(prompt) - 1)
            if keep > 0:
                try:
                    return trim_to(cache, keep), prompt[keep:]
                except ValueError:  # a recurrent state (Qwen3.5) cannot be cut back: rebuild below
                    pass
        shared = req.shared_prefix
        if shared is not None:
            n = min(common_prefix_length(shared.ids, prompt), len(prompt) - 1)
            if n > 0 and shared.key not in self._prefixes and shared.starts \
                    and len(prompt) <= shared.starts[0] and len(shared.ids) > 4 * len(prompt):
                # A request that uses only the prefix's first start (a restart: the chat prompt
                # alone) does not build the whole prefix's cache (a base trace of up to 16K
                # tokens) when it is not held and is much longer: a fresh prefill of its own
                # prompt is far cheaper (the scheduler runs restarts after the cell's probes,
                # by when that cache may have made room for other cells').
                return None, prompt
            if n > 0:
                pc = self._prefix_cache(shared)
                before = pc.prefill_tokens
                state = pc.state(n)
                self.prefill_tokens += pc.prefill_tokens - before
                return state, prompt[n:]
        return None, prompt

    def _keep(self, key: str, seq: list[int], cache) -> None:
        self._kept.pop(key, None)
        self._kept[key] = (seq, cache)
        while len(self._kept) > self._max_kept:
            self._kept.pop(next(iter(self._kept)))

    def _stop(self, req: GenRequest):
        from mlx_lm.generate import StopSequences

        seqs = [(e,) for e in sorted(self.eos_ids)]
        seqs += [tuple(int(t) for t in s) for s in req.stop_sequences if len(s) > 0]
        return StopSequences(seqs)

    def generate(self, requests: Iterable[GenRequest]) -> Iterator[GenResult]:
        import mlx.core as mx

        from breakthrough.engine.batch_step import RowSpec, SeededBatchGenerator

        pending = iter(requests)
        gen = SeededBatchGenerator(
            self.model,
            completion_batch_size=self.batch_size,
            prefill_batch_size=self.prefill_batch_size,
            prefill_step_size=self.prefill_step_size,
        )
        rows: dict[int, _Row] = {}
        keys: set[str] = set()
        exhausted = False
        t_start = time.perf_counter()
        try:
            mx.reset_peak_memory()
        except Exception:  # pragma: no cover
            pass
        ready: deque[GenResult] = deque()
        try:
            while True:
                if self._cancelled:
                    yield from self._drop_cancelled(gen, rows)
                # Refill free slots.
                new: list[GenRequest] = []
                while not exhausted and len(rows) + len(new) < self.batch_size:
                    try:
                        req = next(pending)
                    except StopIteration:
                        exhausted = True
                        break
                    if req is None:  # the source has nothing ready now (contract: Engine)
                        break
                    check_request(req, keys)
                    new.append(req)
                if new:
                    starts = [self._start(r) for r in new]
                    specs = [RowSpec(r.seed, r.sampling, self.top_logprobs, self.instrument,
                                     hidden_stride=r.hidden_stride) for r in new]
                    uids = gen.insert(
                        [feed for _, feed in starts],
                        max_tokens=[int(r.max_tokens) for r in new],
                        caches=[cache for cache, _ in starts],
                        samplers=specs,
                        stop_sequences=[self._stop(r) for r in new],
                    )
                    for uid, r, spec, (_, feed) in zip(uids, new, specs, starts):
                        rows[uid] = _Row(r, spec, len(r.prompt) - len(feed))
                        self.prefill_tokens += len(feed)
                if not rows:
                    if exhausted:
                        break
                    raise BtError("the request source had nothing ready while no row was in flight")
                responses = gen.next_generated()
                if not responses:
                    continue
                longest = 0
                for resp in responses:
                    row = rows[resp.uid]
                    context = len(row.req.prompt) + len(row.tokens)  # before this token
                    self.attention_real += context
                    longest = max(longest, context)
                    # This token's statistics from the batched step (batch_step.py):
                    # [[log-prob, entropy, sampling entropy]] (+ [top ids], [top log-probs]).
                    stats = resp.logprobs
                    row.tokens.append(int(resp.token))
                    row.logprobs.append(stats[0][0])
                    row.entropies.append(stats[0][1])
                    row.sampling_entropies.append(stats[0][2])
                    if self.instrument:
                        row.signals.append(stats[0][3:])
                    if len(stats) == 3:
                        row.top.append((stats[1], stats[2]))
                    if resp.finish_reason is None:
                        continue
                    del rows[resp.uid]
                    if row.req.keep_state and self.reuse_prefixes and resp.prompt_cache is not None:
                        self._keep(row.req.key, [int(t) for t in row.req.prompt] + row.tokens,
                                   resp.prompt_cache)
                    ready.append(self._result(row, resp))
                self.attention_padded += len(responses) * longest
                self.generated_tokens += len(responses)
                self.step_rows += len(responses)
                self.step_rows_sq += len(responses) ** 2
                while ready:
                    yield ready.popleft()
        finally:
            self.last_elapsed_s = time.perf_counter() - t_start
            gen.close()

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
