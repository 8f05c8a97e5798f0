"""One decode step of bt's batch (`decode_batch.DecodeBatch`): the model's forward, then one
batched, seeded draw for every row.

mlx-lm's batch generator calls each row's sampler separately when rows have different samplers
(they do: every row has its own seed), which serialises the per-token work the batch should
share. `StepSampler` draws every row's next token in one fused graph
(`sampling.mlx_path.sample_step`) from its own identity key and computes its statistics,
evaluated asynchronously with the step. On MLX's CPU device the same sampler runs in numpy
(`sampling.numpy_draw`, `sampling.numpy_stats`) on the evaluated logits, since MLX's CPU exp and
argpartition are scalar code.

A row is described by a `RowSpec`: the row's seed, sampling setting and the index of its next
token. Each token's statistics are a `StepStats` (log-prob, entropy, sampling entropy, the
instrumentation fields when the row is instrumented, and the step's most likely ids and
log-probs when the row asks for them: `top`) instead of a full vocabulary vector, so nothing
vocabulary-sized leaves the step. The forward is the model's public call
(`model(inputs, cache=...)`)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from breakthrough.engine.sampling.keys import row_keys
from breakthrough.engine.sampling.mlx_path import RowParams, row_params, sample_step, top_logprobs
from breakthrough.engine.sampling.numpy_draw import RowSettingsNp, draw_np, row_settings_np
from breakthrough.engine.sampling.numpy_stats import draw_stats_np, top_logprobs_np
from breakthrough.engine.sampling.signals import (
    HIDDEN_FIELDS,
    hidden_signals,
    hidden_signals_np,
    token_signals,
    token_signals_np,
)
from breakthrough.engine.shared_kv import forward_rows_apart, rows_apart
from breakthrough.protocol import Sampling


class StepStats(NamedTuple):
    """One row's statistics for one generated token (nothing vocabulary-sized leaves the step)."""

    logprob: float  # log-probability of the drawn token under the full distribution
    entropy: float  # entropy of the model's full next-token distribution (nats)
    sampling_entropy: float  # entropy of the distribution the token was drawn from (0: greedy)
    signals: list[float]  # SIGNAL_FIELDS then HIDDEN_FIELDS when the batch is instrumented, else []
    top_ids: list[int] | None  # the step's `top` most likely ids, descending, when rows ask
    top_logprobs: list[float] | None  # their log-probs


class RowSpec:
    """One row's identity for the batched sampler: seed, sampling and its next token's index
    (token k of a row is drawn with the key of (seed, k), whatever batch it is in)."""

    __slots__ = (
        "seed",
        "sampling",
        "step",
        "top",
        "instrument",
        "prev",
        "prev_hidden",
        "hidden_stride",
        "hidden_rows",
    )

    def __init__(
        self,
        seed: int,
        sampling: Sampling,
        top: int = 0,
        instrument: bool = False,
        hidden_stride: int = 0,
    ):
        self.seed = int(seed) & 0xFFFFFFFF
        self.sampling = sampling
        self.step = 0
        self.top = int(top)  # also report each step's `top` most likely (ids, log-probs)
        # Also report the per-token instrumentation (sampling.SIGNAL_FIELDS); `prev` keeps this
        # row's previous log-distribution for the transition fields (KL, JS).
        self.instrument = bool(instrument)
        self.prev = None
        self.prev_hidden = None  # this row's previous final-normalised hidden state
        # Keep the final-normalised hidden vector (float16) of every `hidden_stride`-th token
        # (0: none): `hidden_rows` gets (k, vector) for token index k = 0, stride, 2 stride...,
        # the state whose logits drew token k (protocol 2.2's recorder), evaluated with its step
        # so that the step's whole [rows, d] state is not kept alive by a lazy slice. Rows may run
        # one token past the row's end (the step ahead); the reader drops indices >= its token
        # count.
        self.hidden_stride = max(0, int(hidden_stride))
        self.hidden_rows: list = []

    def keeps_hidden(self) -> bool:
        """Whether this step's hidden vector is kept for the row (its token index is a multiple
        of `hidden_stride`)."""
        return self.hidden_stride > 0 and self.step % self.hidden_stride == 0


class _NormWatch:
    """Stands in for the inner model's final norm during one forward and keeps its output: the
    final-normalised hidden state (also for Gemma, whose inner model returns the state before
    that norm: protocol 11), read without changing the computation that gives the logits."""

    def __init__(self, norm):
        self.norm = norm
        self.last = None

    def __call__(self, x, *args, **kwargs):
        self.last = self.norm(x, *args, **kwargs)
        return self.last


def forward_with_hidden(model, inputs, cache):
    """(last-position logits [n, V], final-normalised hidden state [n, d] or None) of one
    decode forward; None where the model has no final norm to watch (or it is not [n, 1, d])."""
    lm = getattr(model, "language_model", model)
    inner = getattr(lm, "model", None)
    norm = getattr(inner, "norm", None) if inner is not None else None
    if inner is None or norm is None:
        return model(inputs, cache=cache)[:, -1, :], None
    watch = _NormWatch(norm)
    inner["norm"] = watch  # mlx.nn.Module is a dict: `inner.norm` is looked up in it
    try:
        logits = model(inputs, cache=cache)[:, -1, :]
    finally:
        inner["norm"] = norm
    h = watch.last
    if h is None or h.ndim != 3 or h.shape[0] != logits.shape[0]:
        return logits, None
    return logits, h[:, -1, :]


_WORKER: ThreadPoolExecutor | None = None


def _stats_worker() -> ThreadPoolExecutor:
    """The one thread that computes CPU steps' statistics, in submission order (a row's
    transition fields need its previous step's state, so the order matters)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bt-step-stats")
    return _WORKER


class _CpuStats:
    """One CPU step's statistics (`numpy_stats.draw_stats_np`, the instrumentation, the top
    log-probs) from its logits and draw. Holds the MLX logits so that the numpy view `x` of
    their memory stays valid.

    `start()` hands it to the stats worker; the next step calls it just before it blocks in
    the forward pass's evaluation (which releases the GIL), so the worker's Python never
    competes with the step's own bookkeeping for the GIL. `result()` waits for it (or runs it
    here if it was never started)."""

    __slots__ = ("logits", "x", "draw", "k", "specs", "instrument", "hidden", "top", "future")

    def __init__(self, logits, x, draw, k, specs, instrument, hidden, top):
        self.logits, self.x, self.draw, self.k = logits, x, draw, k
        self.specs, self.instrument, self.hidden, self.top = specs, instrument, hidden, top
        self.future: Future | None = None

    def start(self) -> None:
        if self.future is None:
            self.future = _stats_worker().submit(self)

    def result(self) -> tuple:
        self.start()
        return self.future.result()  # type: ignore[union-attr]

    def __call__(self) -> tuple:
        x, specs, hidden = self.x, self.specs, self.hidden
        stats, full = draw_stats_np(x, self.draw, self.k, keep_probs=self.instrument)
        if self.instrument:
            signals, states = token_signals_np(x, self.draw.tokens, [s.prev for s in specs], full)
            if hidden is not None:
                hid = hidden_signals_np(hidden, [s.prev_hidden for s in specs])
            else:
                hid = np.full((len(specs), len(HIDDEN_FIELDS)), np.nan, dtype=np.float32)
            stats = np.concatenate([stats, signals, hid], axis=1)
            for i, (s, state) in enumerate(zip(specs, states, strict=True)):
                s.prev = state if s.instrument else None
                s.prev_hidden = hidden[i] if s.instrument and hidden is not None else None
        return (stats,) + (top_logprobs_np(x, self.top) if self.top > 0 else ())


class StepSampler:
    """The forward and the batched draw of one decode step (`DecodeBatch.step` calls them in
    order: `forward`, `start_previous`, `draw`, then `read` of the previous step's statistics).
    Keeps the rows' sampling settings between steps (rebuilt only when they change)."""

    def __init__(self, model) -> None:
        self.model = model
        self._settings_key: tuple = ()
        self._settings: RowParams | RowSettingsNp | None = None

    def _row_settings(self, specs: list[RowSpec], vocab: int, build):
        """`build(samplings, vocab)` (mlx_path.row_params or numpy_draw.row_settings_np),
        rebuilt only when the rows' samplings change: rows come and go between steps, but most
        steps see the same batch."""
        key = (build, vocab) + tuple(s.sampling for s in specs)  # compared by value
        if self._settings is None or key != self._settings_key:
            self._settings = build([s.sampling for s in specs], vocab)
            self._settings_key = key
        return self._settings

    def forward(self, cache: list, inputs, with_hidden: bool):
        """(last-position logits [n, V], final-normalised hidden state [n, d] or None) of the
        rows' one-token `inputs` [n], lazily; the hidden state only when `with_hidden`.
        Quantized rows (`--kv-bits`) run their forwards one by one (`shared_kv.rows_apart`)."""
        if rows_apart(cache):

            def one(row_inputs, row_cache):
                if with_hidden:
                    return forward_with_hidden(self.model, row_inputs[:, None], row_cache)
                return self.model(row_inputs[:, None], cache=row_cache)[:, -1, :], None

            return forward_rows_apart(cache, one, inputs)
        if with_hidden:
            return forward_with_hidden(self.model, inputs[:, None], cache)
        return self.model(inputs[:, None], cache=cache)[:, -1, :], None

    @staticmethod
    def start_previous(bundles: list) -> None:
        """Hand the previous step's CPU statistics to their worker, to run beside this forward
        (`bundles`: each row's (bundle, index) or None)."""
        jobs = {id(b[0]): b[0] for b, _ in filter(None, bundles) if isinstance(b[0], _CpuStats)}
        for job in jobs.values():
            job.start()

    def draw(self, logits, hidden, specs: list[RowSpec]) -> tuple[mx.array, tuple, list]:
        """(tokens uint32 [n], the step's statistics bundle, the hidden vectors kept this step)
        for rows `specs` in batch order: each row's token k drawn with the key of (seed, k),
        whatever batch it is in; every spec's token index then moves on by one."""
        instrument = any(s.instrument for s in specs)
        keep_hidden = [s.keeps_hidden() for s in specs]
        keys = row_keys([s.seed for s in specs], [s.step for s in specs])
        kept = _keep_hidden_rows(specs, hidden, keep_hidden)
        for s in specs:
            s.step += 1
        top = max((s.top for s in specs), default=0)
        if mx.default_device() == mx.cpu:
            tokens, bundle = self._draw_cpu(logits, hidden, keys, specs, instrument, top)
        else:
            tokens, bundle = self._draw_mlx(logits, hidden, keys, specs, instrument, top)
        return tokens, bundle, kept

    @staticmethod
    def wants_hidden(specs: list[RowSpec]) -> bool:
        """Whether this step's forward must also give the hidden state: some row is
        instrumented or keeps this step's vector."""
        return any(s.instrument or s.keeps_hidden() for s in specs)

    def _draw_cpu(
        self, logits, hidden, keys, specs: list[RowSpec], instrument: bool, top: int
    ) -> tuple[mx.array, tuple]:
        """(tokens, bundle) on MLX's CPU device: MLX's CPU exp / argpartition are scalar, so the
        vocabulary-sized work runs in numpy on a view of the evaluated logits (the same
        definition as `mlx_path.sample_step`). Only the draw is on the path of the next forward;
        the statistics and instrumentation (`_CpuStats`, the bundle) run on a worker thread
        beside that forward and are read one step later."""
        logits = logits.astype(mx.float32)
        hidden_np = None
        if hidden is not None:
            hidden = hidden.astype(mx.float32)
            mx.eval(logits, hidden)
            hidden_np = np.asarray(hidden)
        else:
            mx.eval(logits)
        x = np.asarray(logits)
        settings = self._row_settings(specs, x.shape[1], row_settings_np)
        draw = draw_np(x, keys, settings)
        job = _CpuStats(logits, x, draw, settings.k, list(specs), instrument, hidden_np, top)
        return mx.array(draw.tokens.astype(np.uint32)), (job,)

    def _draw_mlx(
        self, logits, hidden, keys, specs: list[RowSpec], instrument: bool, top: int
    ) -> tuple[mx.array, tuple]:
        """(tokens, bundle of lazy arrays: the statistics [n, C], then the top ids and log-probs
        when rows ask for them) as one MLX graph (Metal / CUDA devices)."""
        tokens, stats = sample_step(
            logits, mx.array(keys), self._row_settings(specs, logits.shape[-1], row_params)
        )
        if instrument:
            stats = mx.concatenate([stats, *_mlx_signals(logits, hidden, tokens, specs)], axis=1)
        return tokens, (stats,) + (top_logprobs(logits, top) if top > 0 else ())

    @staticmethod
    def read(bundles: list, inputs) -> list[StepStats | None]:
        """Each row's `StepStats` of the token it fed this step (evaluated now, one step after
        it was drawn), from its (bundle, index); None for a row whose fed token was its
        prompt's last id (a row's first step). Evaluates `inputs` with them."""
        held = {id(b): b for b, _ in filter(None, bundles)}
        arrays = {k: b[0].result() if isinstance(b[0], _CpuStats) else b for k, b in held.items()}
        mx.eval(inputs, *[a for b in arrays.values() for a in b if isinstance(a, mx.array)])
        lists = {k: [a.tolist() for a in b] for k, b in arrays.items()}
        return [None if x is None else _row_stats(lists[id(x[0])], x[1]) for x in bundles]


def _keep_hidden_rows(specs: list[RowSpec], hidden, keep_hidden: list[bool]) -> list:
    """Append this step's hidden vector (float16) to each row that keeps it (`RowSpec.
    hidden_rows`, under the row's current token index); returns the vectors, to be evaluated
    with the step so that their buffer then goes."""
    kept: list = []
    if hidden is not None and any(keep_hidden):
        for i, s in enumerate(specs):
            if keep_hidden[i]:
                kept.append(hidden[i].astype(mx.float16))
                s.hidden_rows.append((s.step, kept[-1]))
    return kept


def _previous(values: list, width: int):
    """(rows' previous states stacked [n, width], has-previous bool [n]) for the transition
    fields, rows without one as zeros; None when no row has one."""
    if all(v is None for v in values):
        return None
    zero = mx.zeros((width,), dtype=mx.float32)
    return (
        mx.stack([zero if v is None else v for v in values]),
        mx.array([v is not None for v in values]),
    )


def _mlx_signals(logits, hidden, tokens, specs: list[RowSpec]) -> tuple[mx.array, mx.array]:
    """The instrumentation columns of one MLX step: (SIGNAL_FIELDS [n, F], HIDDEN_FIELDS [n, H],
    NaN without a hidden state); updates each instrumented row's previous
    log-distribution and hidden state for the next step's transition fields."""
    prev = _previous([s.prev for s in specs], logits.shape[-1])
    signals, logp = token_signals(logits, tokens, prev)
    if hidden is not None:
        hidden = hidden.astype(mx.float32)
        hid = hidden_signals(hidden, _previous([s.prev_hidden for s in specs], hidden.shape[-1]))
    else:
        hid = mx.full((len(specs), len(HIDDEN_FIELDS)), float("nan"))
    for i, s in enumerate(specs):
        s.prev = logp[i] if s.instrument else None
        s.prev_hidden = hidden[i] if s.instrument and hidden is not None else None
    return signals, hid


def _row_stats(columns: list[list], i: int) -> StepStats:
    """Row i's `StepStats` from a step's bundle as lists: the statistics [n, C] (then the top ids
    and log-probs [n, k] when rows asked for them)."""
    row = columns[0][i]
    top_ids, top_lps = (columns[1][i], columns[2][i]) if len(columns) == 3 else (None, None)
    return StepStats(row[0], row[1], row[2], row[3:], top_ids, top_lps)
