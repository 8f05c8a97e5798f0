"""One decode step split into the forward pass vs everything else, at batch 1, 8 and 32.

"Everything else" is the step minus the forward: sampling, the per-token statistics (chosen
log-prob, full-distribution entropy, sampling entropy), evaluation and mlx-lm's Python
bookkeeping. Target: at most 10 % of the step at batch 32 on the tiny model.

Three ways of running the same step, measured in the same run:
  * bt: bt's decode loop (`engine.decode_batch.DecodeBatch`), one batched seeded sampler for all
    rows, with
    the log-prob and the two entropies per token: what a continuation or restart stores
    (`bt continue` without `--instrument`);
  * bt+instr: the same with the protocol 2.2 instrumentation (base traces, `bt sample`,
    `bt continue --instrument`);
  * per-row (the baseline): mlx-lm's stock `BatchGenerator` with one `make_sampler` object per
    row (so one Python sampler call per row per step) and the full-vocabulary statistics
    evaluated per step from the stacked log-prob rows, as bt's engine did.
Step time: the median over `--steps` decode steps; forward time: the median of
`model(tokens, cache)` plus its evaluation on the same batch, timed half before and half after
the steps (the cache grows by one position per call, so the median sits at the steps' middle
length). Rounds alternate the ways. `--beside` also times the bare forward alone and with bt's
statistics job (`sampling.draw_stats_np`) running on a second thread, as bt's step runs it.

On CPU, bt's step draws the tokens on the forward's path and computes the statistics on a worker
thread beside the next forward (MLX's own CPU exp is scalar, so they stay out of the forward's
graph). On Apple silicon or CUDA the draw and the statistics are part of the step's MLX graph
(`sampling.mlx_path.sample_step`), and this split is the one to measure there.

    .venv/bin/python bench/decode_profile.py                  # tiny: 4 layers, width 128
    .venv/bin/python bench/decode_profile.py --model deep     # 8 layers, width 384
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from breakthrough.engine.blas import blas_name  # noqa: E402  (loads the BLAS before mlx)
from breakthrough.models.loading import load_model  # noqa: E402
from breakthrough.protocol import Sampling  # noqa: E402


def _prompts(loaded, n: int, length: int) -> list[list[int]]:
    from breakthrough.tasks.cohorts import load_cohort

    rows = load_cohort("math500")
    out = []
    for i in range(n):
        ids = loaded.encode(" ".join(r["problem"] for r in rows[i : i + 4]))
        out.append(ids[:length])
    return out


def _per_row_stats(responses):
    """The old engine's per-step statistics: stacked full log-prob rows, entropy, chosen."""
    import mlx.core as mx

    lp = mx.stack([r.logprobs for r in responses]).astype(mx.float32)
    p = mx.exp(lp)
    ent = -mx.sum(mx.where(p > 0, p * lp, 0.0), axis=-1)
    chosen = mx.take_along_axis(lp, mx.array([r.token for r in responses])[:, None], axis=-1)[:, 0]
    mx.eval(ent, chosen)
    return chosen.tolist(), ent.tolist()


class BtBatch:
    """bt's decode loop (`engine.decode_batch.DecodeBatch`) with rows prefilled at batch 1 as the
    engine hands them over, behind the calls these benches make (`next_generated`, the tokens
    and cache of the next forward)."""

    def __init__(self, model, prompts: list[list[int]], max_tokens: int, specs: list) -> None:
        from breakthrough.engine.decode_batch import DecodeBatch, NewRow, StopMatcher
        from breakthrough.engine.mlx_compat import make_prompt_cache
        from breakthrough.engine.prefix_cache import prefill

        self.batch = DecodeBatch(model)
        rows = []
        for uid, (prompt, spec) in enumerate(zip(prompts, specs, strict=True)):
            cache = make_prompt_cache(model)
            prefill(model, cache, prompt[:-1])
            rows.append(NewRow(uid, prompt[-1], spec, cache, max_tokens, StopMatcher([])))
        self.batch.add(rows)
        self.batch.step()  # every row's first forward (its prompt's last id)

    def next_generated(self) -> list:
        return self.batch.step()

    @property
    def next_tokens(self):
        return self.batch._next_tokens

    @property
    def cache(self) -> list:
        return self.batch.cache

    def close(self) -> None:
        self.batch.close()


class MlxLmBatch:
    """mlx-lm's stock `BatchGenerator` (the baseline) behind the same calls."""

    def __init__(self, model, prompts: list[list[int]], max_tokens: int, samplers: list) -> None:
        from mlx_lm.generate import BatchGenerator

        n = len(prompts)
        self.gen = BatchGenerator(model, completion_batch_size=n, prefill_batch_size=8)
        self.gen.insert(prompts, max_tokens=[max_tokens] * n, samplers=samplers)
        while len(self.gen._generation_batch) < n:  # prefill every row
            self.gen.next_generated()

    def next_generated(self) -> list:
        return self.gen.next_generated()

    @property
    def next_tokens(self):
        return self.gen._generation_batch._next_tokens

    @property
    def cache(self) -> list:
        return self.gen._generation_batch.prompt_cache

    def close(self) -> None:
        self.gen.close()


def _filled(batch_class, loaded, batch: int, steps: int, samplers: list):
    """A `BtBatch` or `MlxLmBatch` with `batch` rows of 200-token prompts prefilled, each with
    room for the steps to be timed."""
    return batch_class(loaded.model, _prompts(loaded, batch, 200), steps * 3 + 20, samplers)


def profile(loaded, batch: int, steps: int, way: str, sampling: Sampling) -> tuple[float, float]:
    """(median step seconds, median forward seconds) of one way at one batch size."""
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler

    from breakthrough.engine.batch_step import RowSpec

    if way.startswith("bt"):
        gen = _filled(
            BtBatch,
            loaded,
            batch,
            steps,
            [RowSpec(1000 + i, sampling, instrument=way == "bt+instr") for i in range(batch)],
        )
    else:
        gen = _filled(
            MlxLmBatch,
            loaded,
            batch,
            steps,
            [
                make_sampler(
                    temp=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    min_p=sampling.min_p,
                )
                for _ in range(batch)
            ],
        )
    for _ in range(3):
        gen.next_generated()

    def forwards(n: int) -> list[float]:
        # The bare forward on the batch's state (it appends to the cache like a step: the
        # tokens it leaves there are not the rows' own, which only the timing here reads).
        tokens = gen.next_tokens
        mx.eval(tokens)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            logits = loaded.model(tokens[:, None], cache=gen.cache)[:, -1, :]
            mx.eval(logits)
            times.append(time.perf_counter() - t0)
        return times

    # Forwards before and after the steps: the cache grows by one position per call, so their
    # median is the forward at the steps' middle length.
    fwd_times = forwards(steps // 2)
    step_times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        responses = gen.next_generated()
        if way == "per-row":
            _per_row_stats(responses)
        step_times.append(time.perf_counter() - t0)
    fwd_times += forwards(steps - steps // 2)
    gen.close()
    return statistics.median(step_times), statistics.median(fwd_times)


def beside(loaded, batch: int, steps: int, sampling: Sampling) -> tuple[float, float, float]:
    """(forward alone, forward with the step's statistics job on a second thread, the job
    alone) in seconds, medians at one batch state: how much the statistics that bt runs beside
    the next forward lengthen it on this machine."""
    from concurrent.futures import ThreadPoolExecutor

    import mlx.core as mx
    import numpy as np

    from breakthrough.engine.batch_step import RowSpec
    from breakthrough.engine.sampling import keys, numpy_draw, numpy_stats

    gen = _filled(
        BtBatch,
        loaded,
        batch,
        steps,
        [RowSpec(1000 + i, sampling) for i in range(batch)],
    )
    tokens = gen.next_tokens
    mx.eval(tokens)
    x = np.array(loaded.model(tokens[:, None], cache=gen.cache)[:, -1, :].astype(mx.float32))
    settings = numpy_draw.row_settings_np([sampling] * batch, x.shape[1])
    draw = numpy_draw.draw_np(x, keys.row_keys(range(batch), [0] * batch), settings)

    def job() -> float:
        t0 = time.perf_counter()
        numpy_stats.draw_stats_np(x, draw, settings.k)
        return time.perf_counter() - t0

    alone, together, job_times = [], [], []
    with ThreadPoolExecutor(max_workers=1) as pool:
        for i in range(2 * steps):  # alternate, so the growing cache hits both alike
            logits = loaded.model(tokens[:, None], cache=gen.cache)[:, -1, :]
            t0 = time.perf_counter()
            future = pool.submit(job) if i % 2 else None
            mx.eval(logits)
            (together if future else alone).append(time.perf_counter() - t0)
            if future:
                job_times.append(future.result())
    gen.close()
    return statistics.median(alone), statistics.median(together), statistics.median(job_times)


WAYS = ("per-row", "bt", "bt+instr")


def main() -> None:
    from continue_throughput import MODELS, build_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny, deep, an alias or an mlx-lm folder")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both ways")
    ap.add_argument(
        "--ways",
        default=",".join(WAYS),
        help=f"which of {', '.join(WAYS)} to time (per-row is slow at batch 32)",
    )
    ap.add_argument(
        "--beside",
        action="store_true",
        help="also measure how much bt's statistics job lengthens a forward it runs beside",
    )
    args = ap.parse_args()
    ways = tuple(w for w in args.ways.split(",") if w)
    if not ways or set(ways) - set(WAYS):
        ap.error(f"--ways: expected some of {', '.join(WAYS)}, got {args.ways!r}")
    loaded = load_model(build_model(args.model), family="qwen" if args.model in MODELS else None)
    sampling = Sampling()
    print(f"model {loaded.alias}; BLAS: {blas_name()}; sampling {sampling}")
    print(
        f"{'batch':>5} {'way':>8} {'step ms':>9} {'forward ms':>11} {'other ms':>9} {'other %':>8}"
        f" {'tok/s':>8}"
    )
    for batch in (int(b) for b in args.batches.split(",")):
        res: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        for _ in range(args.rounds):
            for way in ways:
                res[way].append(profile(loaded, batch, args.steps, way, sampling))
        for way, vals in res.items():
            step = statistics.median(v[0] for v in vals)
            fwd = statistics.median(v[1] for v in vals)
            other = max(step - fwd, 0.0)
            print(
                f"{batch:5d} {way:>8} {1e3 * step:9.2f} {1e3 * fwd:11.2f} {1e3 * other:9.2f}"
                f" {100 * other / step:7.1f}% {batch / step:8.0f}",
                flush=True,
            )
        if args.beside:
            alone, together, job = beside(loaded, batch, args.steps, sampling)
            print(
                f"{batch:5d} forward alone {1e3 * alone:.2f} ms, with the statistics job beside it"
                f" {1e3 * together:.2f} ms (+{1e3 * (together - alone):.2f}); the job alone"
                f" {1e3 * job:.2f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
