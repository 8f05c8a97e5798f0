"""The MLX backend: mlx-lm's `BatchGenerator` (continuous batching) with one sampler per row.

Sampling (protocol 1.4). Each row gets its own sampler object; the k-th generated token of a
row is drawn with the key `[seed, k]` (a threefry key made from the row's 32-bit seed and the
token index), never from MLX's global RNG. The draw is a Gumbel-max over the row's own
candidate logits, so a row's tokens do not depend on what else shares its batch. The candidate
set follows mlx-lm's `make_sampler` order: top-p on the full distribution (keep a token while
the probability mass ranked above it is < top_p), then min-p, then the top-k of those; the
survivors are sampled at the given temperature. Temperature 0 is greedy (argmax), exactly as
mlx-lm's `greedy_sampler`. (The randomness is batch-independent by construction; the logits are
batch-independent as far as the kernels are: bit-identical on the tiny fp32 test model, while
quantized kernels may differ in the last bits between batch shapes, which can very rarely flip
a draw.) A second phase of the same sample (e.g. an answer phase) should use another seed, since
the token index restarts at 0 for every request.

Per-token statistics, both from the model's FULL next-token distribution at temperature 1
(log-softmax of the logits, before temperature, top-k and top-p; the same distribution the
reference recorder stored, whose normalised entropy divides by ln|V|):
  * logprob: log p(chosen token), <= 0;
  * entropy: -sum_v p(v) log p(v) in nats, >= 0.
They are thus comparable between greedy and sampled rows.

Reuse (the hints of the engine contract). A request with a `shared_prefix` starts from a cache of
that sequence cut back to the request's prompt (one prefill per shared prefix, see
`prefix_cache.PrefixCache`); a request that `follows` an earlier one whose state was kept
continues from that live cache (no second prefill). With `reuse_prefixes=False` (backend
"mlx-fresh") every hint is ignored and each prompt is prefilled afresh: the same tokens, the
reference procedure's cost."""
from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Iterator, Sequence

import numpy as np

from breakthrough.engine.contract import GenRequest, GenResult, SharedPrefix
from breakthrough.engine.prefix_cache import PrefixCache, cache_length, kv_bytes_per_token, trim_to
from breakthrough.errors import BtError
from breakthrough.protocol import Sampling


def _row_key(seed: int, step: int):
    import mlx.core as mx

    return mx.random.key(((int(seed) & 0xFFFFFFFF) << 32) | (step & 0xFFFFFFFF))


def candidates(logprobs, sampling: Sampling):
    """(ids, logprobs) of each row's sampling candidates, sorted by probability (descending);
    filtered-out entries have logprob -inf. Same set as mlx-lm's make_sampler (top-p on the
    full distribution, then min-p, then top-k), computed on the top-k only."""
    import mlx.core as mx

    vocab = logprobs.shape[-1]
    k = sampling.top_k if 0 < sampling.top_k < vocab else vocab
    if k < vocab:
        idx = mx.argpartition(-logprobs, kth=k - 1, axis=-1)[..., :k]
        cand = mx.take_along_axis(logprobs, idx, axis=-1)
    else:
        idx = mx.broadcast_to(mx.arange(vocab), logprobs.shape)
        cand = logprobs
    order = mx.argsort(-cand, axis=-1)
    cand = mx.take_along_axis(cand, order, axis=-1).astype(mx.float32)
    idx = mx.take_along_axis(idx, order, axis=-1)
    neg_inf = mx.array(-float("inf"), dtype=mx.float32)
    if 0.0 < sampling.top_p < 1.0:
        probs = mx.exp(cand)
        mass_before = mx.cumsum(probs, axis=-1) - probs
        cand = mx.where(mass_before < sampling.top_p, cand, neg_inf)
    if sampling.min_p > 0.0:
        floor = cand[..., :1] + float(np.log(sampling.min_p))
        cand = mx.where(cand >= floor, cand, neg_inf)
    return idx, cand


def sample_candidates(logprobs, key, sampling: Sampling, with_entropy: bool = False):
    """Draw one token per row of `logprobs` ([n, V], log-softmax) with an explicit key:
    Gumbel-max over the candidates' logprobs divided by the temperature. With `with_entropy`,
    also return the entropy (nats) of that sampling distribution (candidates, temperature)."""
    import mlx.core as mx

    idx, cand = candidates(logprobs, sampling)
    scaled = cand * (1.0 / sampling.temperature)
    choice = mx.random.categorical(scaled, axis=-1, key=key)
    token = mx.take_along_axis(idx, choice[..., None].astype(idx.dtype), axis=-1)[..., 0]
    if not with_entropy:
        return token
    logp = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
    kept = mx.isfinite(logp)
    ent = -mx.sum(mx.where(kept, mx.exp(logp) * logp, 0.0), axis=-1)
    return token, ent


class RowSampler:
    """A per-row sampler for `BatchGenerator.insert(samplers=...)`: called exactly once per
    generated token of its row, in order (call k draws token k)."""

    def __init__(self, seed: int, sampling: Sampling):
        self.seed = int(seed)
        self.sampling = sampling
        self.step = 0
        # Entropy of the distribution each token was drawn from (after temperature, top-p,
        # top-k); 0 for greedy rows. Evaluated as it is made so no vocabulary-sized graph is kept.
        self.entropies: list = []

    def __call__(self, logprobs):
        import mlx.core as mx

        step = self.step
        self.step += 1
        if self.sampling.temperature <= 0:
            self.entropies.append(0.0)
            return mx.argmax(logprobs, axis=-1)
        token, ent = sample_candidates(logprobs, _row_key(self.seed, step), self.sampling, True)
        mx.async_eval(ent)
        self.entropies.append(ent)
        return token

    def sampling_entropies(self, n: int) -> np.ndarray:
        """The first n values (the generator samples one token ahead of what it emits)."""
        vals = [float(e.item()) if hasattr(e, "item") else float(e) for e in self.entropies[:n]]
        return np.asarray(vals + [float("nan")] * (n - len(vals)), dtype=np.float32)


def _token_stats(rows, tokens: Sequence[int]):
    """(chosen logprob, entropy) for each row of stacked full log-softmax vectors."""
    import mlx.core as mx

    lp = mx.stack(rows).astype(mx.float32)
    p = mx.exp(lp)
    ent = -mx.sum(mx.where(p > 0, p * lp, 0.0), axis=-1)
    chosen = mx.take_along_axis(lp, mx.array(tokens)[:, None], axis=-1)[:, 0]
    mx.eval(ent, chosen)
    return chosen.tolist(), ent.tolist()


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
    __slots__ = ("req", "sampler", "tokens", "logprobs", "entropies", "t0", "cached")

    def __init__(self, req: GenRequest, sampler: RowSampler, cached: int):
        self.req = req
        self.sampler = sampler
        self.cached = cached
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.entropies: list[float] = []
        self.t0 = time.perf_counter()


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
        shared_prefixes: int = 2,
    ):
        self.model = model
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        if not self.eos_ids:
            raise BtError("the model has no EOS token id; cannot generate")
        self.batch_size = max(1, int(batch_size))
        self.prefill_batch_size = prefill_batch_size or min(self.batch_size, 8)
        self.prefill_step_size = prefill_step_size
        self.reuse_prefixes = bool(reuse_prefixes)
        self.memory_budget_bytes = int(memory_budget_bytes)
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.last_elapsed_s = 0.0
        # Reuse state: the last few shared prefixes' caches, and the final caches of rows that
        # asked to be continued (bounded FIFO: an evicted state only costs a fresh prefill).
        self._prefixes: dict[str, tuple[SharedPrefix, PrefixCache]] = {}
        self._max_prefixes = max(1, shared_prefixes)
        self._kept: dict[str, tuple[list[int], list]] = {}
        self._max_kept = kept_states or 2 * self.batch_size
        self._kv_bytes: float | None = None

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

        return {"backend": "mlx" if self.reuse_prefixes else "mlx-fresh",
                "mlx": version("mlx"), "mlx_lm": version("mlx-lm")}

    def capacity(self, row_tokens: int) -> int:
        """`batch_size`, lowered so that the rows' KV caches fit `memory_budget_bytes`."""
        if not self.memory_budget_bytes:
            return self.batch_size
        if self._kv_bytes is None:
            self._kv_bytes = kv_bytes_per_token(self.model)
        fit = int(self.memory_budget_bytes // max(self._kv_bytes * max(row_tokens, 1), 1.0))
        return max(1, min(self.batch_size, fit))

    # -- reuse -------------------------------------------------------------------------------
    def _prefix_cache(self, shared: SharedPrefix) -> PrefixCache:
        have = self._prefixes.get(shared.key)
        if have is not None and (have[0] is shared or have[0].ids == shared.ids):
            return have[1]
        cache = PrefixCache(self.model, shared.ids, snapshot_at=[s - 1 for s in shared.starts])
        self._prefixes.pop(shared.key, None)
        self._prefixes[shared.key] = (shared, cache)
        while len(self._prefixes) > self._max_prefixes:
            self._prefixes.pop(next(iter(self._prefixes)))
        return cache

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
                return trim_to(cache, keep), prompt[keep:]
        shared = req.shared_prefix
        if shared is not None:
            n = min(common_prefix_length(shared.ids, prompt), len(prompt) - 1)
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
        from mlx_lm.generate import BatchGenerator

        pending = iter(requests)
        gen = BatchGenerator(
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
                # Refill free slots.
                new: list[GenRequest] = []
                while not exhausted and len(rows) + len(new) < self.batch_size:
                    try:
                        req = next(pending)
                    except StopIteration:
                        exhausted = True
                        break
                    self._check(req, keys)
                    new.append(req)
                if new:
                    samplers = [RowSampler(r.seed, r.sampling) for r in new]
                    starts = [self._start(r) for r in new]
                    uids = gen.insert(
                        [feed for _, feed in starts],
                        max_tokens=[int(r.max_tokens) for r in new],
                        caches=[cache for cache, _ in starts],
                        samplers=samplers,
                        stop_sequences=[self._stop(r) for r in new],
                    )
                    for uid, r, smp, (_, feed) in zip(uids, new, samplers, starts):
                        rows[uid] = _Row(r, smp, len(r.prompt) - len(feed))
                        self.prefill_tokens += len(feed)
                if not rows:
                    break
                responses = gen.next_generated()
                if not responses:
                    continue
                chosen, ents = _token_stats(
                    [r.logprobs for r in responses], [r.token for r in responses]
                )
                for resp, lp, ent in zip(responses, chosen, ents):
                    row = rows[resp.uid]
                    row.tokens.append(int(resp.token))
                    row.logprobs.append(lp)
                    row.entropies.append(ent)
                    if resp.finish_reason is None:
                        continue
                    del rows[resp.uid]
                    if row.req.keep_state and self.reuse_prefixes and resp.prompt_cache is not None:
                        self._keep(row.req.key, [int(t) for t in row.req.prompt] + row.tokens,
                                   resp.prompt_cache)
                    ready.append(self._result(row, resp))
                self.generated_tokens += len(responses)
                while ready:
                    yield ready.popleft()
        finally:
            self.last_elapsed_s = time.perf_counter() - t_start
            gen.close()

    def _check(self, req: GenRequest, keys: set[str]) -> None:
        if req.key in keys:
            raise BtError(f"duplicate request key {req.key!r} in one generate call")
        keys.add(req.key)
        if len(req.prompt) == 0:
            raise BtError(f"request {req.key!r} has an empty prompt")
        if req.max_tokens <= 0:
            raise BtError(f"request {req.key!r}: max_tokens must be > 0")

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
            sampling_entropies=row.sampler.sampling_entropies(len(row.tokens)),
            finish_reason=reason,
            elapsed_s=time.perf_counter() - row.t0,
            prompt_tokens=len(row.req.prompt),
            peak_memory_bytes=peak,
            cached_tokens=row.cached,
        )
