"""`bt continue` against a reference-style loop on plain mlx-lm: same model, same work, one run.

Default workload (`--workload study8`): the study's proportions scaled by 1/8 on
`--cells N` cells (default 8: the study runs 89 problems x 2 models, so what matters
is how full the batch stays across many cells), each with its own problem prompt and base trace
of about 1,150 tokens: anchors 8,16,...,1024 x 4 branches, B = 128 reasoning tokens, a 64-token
answer phase, restarts at 128,256,512,1024 x 4 (each with its answer phase), no bisection
rounds, no top-ups: 14,848 generated tokens per cell when no row stops early (the random models
never do). bt's line also prints its batch occupancy (token-weighted mean rows in flight /
batch size, `MlxEngine.occupancy`). `--workload small` is a prefill-dominated one (8 anchors
64..1280 x 4, B = 16, answer 8, restarts 16 x 4).

bt side: the real pipeline, `breakthrough.pipeline.cell_loop.continue_run` on a run directory
built here (one cell, its base trace stored), exactly what `bt continue` runs: scheduler, engine,
grading, store. Every repeat continues a fresh copy of the run.
Reference side (protocol 3.3 as the study ran it), written with plain mlx-lm calls, not bt's
engine: `mlx_lm.generate.generate_step` with mlx-lm's `make_sampler`, a fresh prefill of prompt
+ prefix for every branch and again for every answer phase, one sequence at a time, tokens only
(no per-token entropies, which would only slow it down).

`--reference-cells K` runs the reference on the first K cells only: it is one sequence at a
time, so its tokens/s does not depend on how many cells it covers (the ratio printed is of the
two rates), and on a busy 2-core machine the full reference takes over two minutes per cell.

Both sides run in this process, so both use the same BLAS (see `breakthrough/engine/blas.py`;
`BT_BLAS=reference` measures MLX's bundled one). Repeats alternate bt / reference so machine load
hits both alike; prints tok/s of each, the ratio per repeat and the median.

bt's line also prints its attention fill, `MlxEngine.attention_fill` (real / padded attention
positions: mlx-lm pads a batch to its longest row).

    .venv/bin/python bench/continue_throughput.py                       # tiny: 4 layers, width 128
    .venv/bin/python bench/continue_throughput.py --model deep          # 8 layers, width 384
    .venv/bin/python bench/continue_throughput.py --workload small
    .venv/bin/python bench/continue_throughput.py --model smollm2-135m  # any alias or mlx-lm folder
    .venv/bin/python bench/continue_throughput.py --model wide-vocab  # 151,936-token head (Qwen's)
    .venv/bin/python bench/continue_throughput.py --cells 8 --reference-cells 1 --repeats 1
    .venv/bin/python bench/continue_throughput.py --model deep --reference-cells 1 \
        --reference-branches 1
    # the study's attention geometry (Qwen3-4B's 36 layers x 8 KV heads x 128 and 32 query
    # heads; study-geometry-ministral: 26 x 8 x 128; hidden size 256): issue 38's run, with
    # decode tok/s, rows in flight per context depth and peak memory
    .venv/bin/python bench/continue_throughput.py --model study-geometry --cells 4 \
        --trace-tokens 1024 --anchors 128,256,512,1024 --budget 128 --answer-budget 64 \
        --restarts 128,256 --reference-cells 1 --reference-branches 1 --repeats 1
    # the Hydragen curve: at each anchor, the cells' probes decode with shared-prefix attention
    # and row by row (same rows, same prefix caches), with the K/V bytes each reads per step
    .venv/bin/python bench/continue_throughput.py --model study-geometry --cells 4 \
        --trace-tokens 4096 --anchors 256,512,1024,2048,4096 --budget 16 --curve 16

`--attention group|shared|rowwise|copies` forces bt's attention path (default: the engine's
rule, `MlxEngine._sharing_pays` / `_group_pays`); the README's table of the rule comes from it.

`--peer batch-generate` adds the baseline a user who knows mlx-lm would write instead of bt, run
on the reference's cells (`--reference-cells`, every branch of them) in the same process: every
reasoning phase of every probe and restart through
mlx-lm's `batch_generate` (its continuous batching: a prefill and a KV cache of its own per
branch), then every answer phase the same way, with mlx-lm's `make_sampler` at the protocol's
settings (a reasoning phase is cut at the close marker afterwards, as such a user would).
`--bandwidth` prints the bytes of weights a decode step reads per second, for bt and each peer,
against this device's measured copy bandwidth (a lower bound on how close to the memory's limit
a step runs: K/V reads are not counted).

`--model qwen3-4b-real` is Qwen3-4B's real shape (36 layers, hidden 2560, intermediate 9728,
32 query x 8 KV heads x 128, vocabulary 151,936) with random weights quantized to 4 bits by
MLX's `nn.quantize`, built here through mlx-lm's classes (2.3 GB: for a GPU; bench/gpu_check.sh);
`--model qwen3-4b-toy` the same layout at toy size (2 layers, hidden 64) for the CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # mlx-lm's import notes PyTorch's absence

from breakthrough.engine.blas import blas_name
from breakthrough.engine.decode_counters import DecodeCounters
from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model
from breakthrough.models.segments import reasoning_length, segment_ids
from breakthrough.models.tokens import decode
from breakthrough.pipeline.branches import close_tokens
from breakthrough.pipeline.manifest import cell_id, run_manifest
from breakthrough.protocol import DEFAULT, Protocol
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.cohorts import load_cohort

WORKLOADS = {
    "study8": dict(
        trace_tokens=1150,
        anchors="8,16,32,64,128,256,512,1024",
        branches=4,
        budget=128,
        answer_budget=64,
        restarts="128,256,512,1024",
        restart_samples=4,
    ),
    "small": dict(
        trace_tokens=1500,
        anchors="64,128,256,384,512,768,1024,1280",
        branches=4,
        budget=16,
        answer_budget=8,
        restarts="16",
        restart_samples=4,
    ),
}
MODELS = {
    "tiny": dict(layers=4, hidden=128),
    "deep": dict(layers=8, hidden=384, heads=6, kv_heads=2, intermediate=1024),
    # Qwen's vocabulary size: the full-distribution pass per token is 3.1x SmolLM2's
    "wide-vocab": dict(layers=4, hidden=128, intermediate=256, vocab=151_936),
}
# The study models' attention geometry (layers x KV heads x head_dim and 32 query heads;
# tests/models/tiny.py STUDY_GEOMETRIES) with a small hidden size: the KV cache and the attention's
# work per token are the study model's, the weights a fraction.
GEOMETRY_MODELS = {"study-geometry": "qwen3-4b", "study-geometry-ministral": "ministral-3-3b"}
# The study model's real shapes, 4-bit (`write_geometry_model`), and the same layout at toy size.
REAL_MODELS = {
    "qwen3-4b-real": dict(
        hidden=2560, intermediate=9728, vocab=151_936, bits=4, dtype="bfloat16", heads=32
    ),
    "qwen3-4b-toy": dict(layers=2, hidden=64, intermediate=192, bits=4, heads=32),
}
GEOMETRY_QUERY_HEADS = 32  # Qwen3-4B's and Ministral-3's; --query-heads 8 for a cheaper model


ENGINES: list = []  # every MlxEngine this process built (the per-depth decode rates)


def force_attention(path: str) -> None:
    """Make every `MlxEngine` this process builds take `path`: "shared" (rows point into their
    cell's one prefix and attend over it together, `engine.prefix_attention`), "rowwise" (they
    point into it but attend one by one: the per-row path over shared storage), "copies"
    (mlx-lm's batch cache, a copy per row) or "auto" (the engine's rule); and remember it."""
    from breakthrough.engine import mlx_backend, row_attention

    init = mlx_backend.MlxEngine.__init__
    row_attention.GROUPED = path != "rowwise"

    def remembered(self, *a, **kw):
        if path == "group":
            kw["attention"] = "group"
        elif path != "auto":
            kw["share_prefixes"] = path != "copies"
        init(self, *a, **kw)
        ENGINES.append(self)

    mlx_backend.MlxEngine.__init__ = remembered  # type: ignore[method-assign]


def depth_line(engine) -> str:
    """Decode tokens/s by the longest context in flight (powers of two), with the most rows
    in flight at that depth: the Hydragen curve of a whole run."""
    stats = engine.stats()
    parts = [
        f"<={d:,}: {made / max(sec, 1e-9):.1f} ({stats.rows_by_context.get(d, 0)} rows)"
        for d, (made, sec) in sorted(stats.decode_by_context.items())
    ]
    return "    decode tok/s by longest context: " + ", ".join(parts)


def build_model(arg: str, query_heads: int = GEOMETRY_QUERY_HEADS) -> str:
    """A random-weight llama folder for `tiny` / `deep` / `wide-vocab` (SmolLM2 tokenizer; the
    wide-vocab model's head has 151,936 rows, whose ids past the tokenizer's decode to
    nothing), else `arg`."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/models/tiny.py
    from models.tiny import write_geometry_model, write_tiny_model

    from breakthrough.models.offline import tokenizer_from_gguf

    if arg in GEOMETRY_MODELS:
        out = Path(tempfile.mkdtemp(prefix="bt-bench-")) / f"bench-{arg}"
        return str(write_geometry_model(out, GEOMETRY_MODELS[arg], heads=query_heads))
    if arg in REAL_MODELS:
        out = Path(tempfile.mkdtemp(prefix="bt-bench-")) / f"bench-{arg}"
        shape = REAL_MODELS[arg]
        return str(write_geometry_model(out, "qwen3-4b", bench_tokenizer(), **shape))  # type: ignore[arg-type]
    if arg not in MODELS:
        return arg
    out = Path(tempfile.mkdtemp(prefix="bt-bench-")) / f"bench-{arg}"
    write_tiny_model(out, tokenizer_from_gguf(), **MODELS[arg])
    return str(out)


def bench_tokenizer():
    """SmolLM2's tokenizer (from the offline package's GGUF), or where that package is not
    installed (a lent GPU machine: bench/gpu_check.sh) the tests' byte-level tokenizer with
    Qwen3's special tokens and chat template (tests/models/hub_checkpoints.py)."""
    from breakthrough.models.offline import tokenizer_from_gguf

    try:
        return tokenizer_from_gguf()
    except Exception:  # no offline model package: the byte-level stand-in
        from models.hub_checkpoints import SHAPES, byte_tokenizer

        return byte_tokenizer(SHAPES["qwen3-4b"])


def open_ids(loaded) -> list[int]:
    """The ids a base trace starts with (the thinking block's opening marker and a newline): a
    probe at anchor t cuts the trace after these and t more tokens."""
    return loaded.encode((loaded.family.open_marker or "") + "\n")


def base_trace(loaded, n_tokens: int, offset: int = 0) -> list[int]:
    """<think> + real MATH problem text (about n_tokens, from problem `offset` + 1 on) +
    </think> + a short solution."""
    body: list[int] = []
    rows = load_cohort("math500")
    for row in rows[1 + offset :] + rows[1 : 1 + offset]:
        body += loaded.encode(row["problem"] + "\n")
        if len(body) >= n_tokens:
            break
    fam = loaded.family
    return (
        open_ids(loaded) + body[:n_tokens] + loaded.encode((fam.close_marker or "") + "\n\nDone.")
    )


def build_run(run_dir: Path, loaded, cells: list[tuple[dict, list[int], list[int]]]) -> None:
    """A run directory with these cells (item, prompt, base trace) and their base traces stored
    (what `bt base` would have stored)."""
    with RunStore(run_dir, create=True) as store:
        store.ensure_manifest(
            run_manifest(loaded, [c[0] for c in cells], DEFAULT, "bench", "bench", "plain")
        )
        for item, prompt, trace in cells:
            cid = cell_id(loaded.alias, item["id"])
            store.add_cells(
                [{"cell_id": cid, "model": loaded.alias, "item": item, "prompt_ids": prompt}]
            )
            seg = segment_ids(loaded.tokenizer, trace, loaded.family)
            rec = SampleRecord(
                cell_id=cid,
                kind="base",
                anchor=-1,
                budget=0,
                branch=0,
                seed=11,
                prefix_len=0,
                token_ids=np.asarray(trace, np.int32),
                text=decode(loaded.tokenizer, trace),
                finish_reason="eos",
                segments=seg,
            )
            store.add_samples([rec], reasoning_tokens={cid: reasoning_length(seg)})


def run_bt(
    template: Path,
    work: Path,
    loaded,
    protocol: Protocol,
    batch_size: int,
    rep: int,
    instrument: bool = False,
    memory_bytes: int | None = None,
    name: str = "bt",
):
    """One `bt continue` of a fresh copy of the run: (seconds, generated tokens, occupancy,
    attention fill: real / padded attention positions, the ContinueReport, the samples'
    tokens by key)."""
    from breakthrough.engine.contract import EngineSpec
    from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run

    run_dir = work / f"{name}-{rep}"
    shutil.copytree(template, run_dir)
    opts = ContinueOptions(
        protocol=protocol,
        topup=(),
        instrument=instrument,
        engine=EngineSpec("mlx", batch_size=batch_size, memory_budget_bytes=memory_bytes),
    )
    commits: list[float] = []  # when each batch of samples was committed (kill safety)
    add_samples = RunStore.add_samples

    def timed(self, *a, **kw):
        commits.append(time.perf_counter())
        return add_samples(self, *a, **kw)

    RunStore.add_samples = timed  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        report = continue_run(run_dir, loaded, opts)
    finally:
        RunStore.add_samples = add_samples  # type: ignore[method-assign]
    seconds = time.perf_counter() - t0
    if commits:
        print(
            f"    first sample committed after {commits[0] - t0:.0f} s of {seconds:.0f} s; "
            f"{len(commits)} commits"
        )
    with RunStore(run_dir, readonly=True) as store:
        df = store.samples_frame(kind=None)
    tokens = {
        (r.cell_id, r.kind, r.anchor, r.budget, r.branch): list(r.token_ids)
        for r in df.itertuples()
        if r.kind != "base"
    }
    return seconds, report.generated_tokens, report.occupancy, report.attention_fill, report, tokens


def memory_lines(report, memory_bytes: int | None) -> list[str]:
    """Rows in flight per context depth, peak memory (MLX and the process's RSS) against the
    budget, what the budget admits at the deepest anchor (issue 28)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    budget = "auto" if memory_bytes is None else f"{memory_bytes / 2**30:g} GB"
    depths = ", ".join(f"<={d:,}: {n}" for d, n in sorted(report.rows_by_context.items()))
    return [
        f"    {report.memory}",
        f"    rows in flight by longest context (tokens): {depths}",
        f"    peak memory: MLX {report.peak_memory_bytes / 2**30:.2f} GB, process RSS "
        f"{rss / 2**30:.2f} GB (both with the weights); budget {budget}",
    ]


def decode_curve(loaded, cells, protocol: Protocol, tokens: int) -> None:
    """At each anchor t, every cell's `protocol.samples` probes at t decode `tokens` tokens in
    one batch, first with shared-prefix attention, then row by row over the same storage (one
    engine, so both read the same prefix caches, prefilled once per cell beforehand). Prints
    decode tokens/s of each (the engine's step time, no prefill), their ratio, whether the
    tokens agree, and the K/V bytes each reads per step (all layers; the suffix at its mean
    length over the run)."""
    from breakthrough.engine import prefix_attention, row_attention
    from breakthrough.engine.contract import GenRequest, SharedPrefix
    from breakthrough.engine.mlx_backend import MlxEngine
    from breakthrough.engine.prefix_cache import cache_bytes

    opened = len(open_ids(loaded))
    rows = len(cells) * protocol.samples
    engine = MlxEngine.from_loaded(
        loaded,
        batch_size=rows,
        memory_budget_bytes=0,
        shared_prefixes=len(cells),
        share_prefixes=True,
        instrument=False,
    )
    per_token = cache_bytes(loaded.model).plain_per_token
    shared = [
        SharedPrefix(
            f"cell{i}",
            tuple(prompt + trace),
            tuple([len(prompt)] + [len(prompt) + opened + t for t in protocol.anchors]),
        )
        for i, (_, prompt, trace) in enumerate(cells)
    ]

    def probes(t: int, n: int, tag: str) -> list:
        return [
            GenRequest(
                f"{tag}{i}:{t}:{b}",
                list(sp.ids[: len(cells[i][1]) + opened + t]),
                n,
                seed=1000 * t + b,
                shared_prefix=sp,
                lane=b,
            )
            for i, sp in enumerate(shared)
            for b in range(protocol.samples)
        ]

    t0 = time.perf_counter()
    list(engine.generate(probes(protocol.anchors[-1], 1, "warm")))  # one prefill per cell
    print(f"prefill of {len(cells)} prefixes: {time.perf_counter() - t0:.0f} s")
    print(
        f"{'anchor':>8}{'rows':>6}{'shared tok/s':>14}{'row by row':>12}{'ratio':>8}"
        f"{'K/V read/step shared':>22}{'row by row':>12}  tokens"
    )
    mean_suffix = 1 + tokens / 2
    for t in protocol.anchors:
        rates, made = [], []
        for grouped in (True, False):
            row_attention.GROUPED = grouped
            engine.counters = DecodeCounters()  # this anchor's steps only
            out = {r.key[1:]: r.tokens for r in engine.generate(probes(t, tokens, "ab"[grouped]))}
            n = sum(m for m, _ in engine.counters.decode_by_context.values())
            sec = sum(x for _, x in engine.counters.decode_by_context.values())
            rates.append(n / sec)
            made.append(out)
        row_attention.GROUPED = True
        prefixes = [len(c[1]) + opened + t for c in cells]
        tiles = -(-protocol.samples // prefix_attention.TILE_ROWS)
        block = prefix_attention.BLOCK
        grouped_read = sum(tiles * -(-p // block) * block for p in prefixes) + rows * mean_suffix
        by_row_read = sum(protocol.samples * p for p in prefixes) + rows * mean_suffix
        print(
            f"{t:8d}{rows:6d}{rates[0]:14.1f}{rates[1]:12.1f}{rates[0] / rates[1]:7.2f}x"
            f"{grouped_read * per_token / 1e9:19.2f} GB{by_row_read * per_token / 1e9:9.2f} GB"
            f"  {'identical' if made[0] == made[1] else 'DIFFER'}",
            flush=True,
        )


def ref_generate(
    model,
    ids: list[int],
    max_tokens: int,
    seed: int,
    protocol: Protocol,
    eos: frozenset[int],
    stop: tuple[int, ...] = (),
) -> list[int]:
    """Plain mlx-lm: a fresh prefill of `ids`, then up to max_tokens sampled one at a time."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    s = protocol.sampling
    mx.random.seed(seed)
    sampler = make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)
    out: list[int] = []
    for tok, _ in generate_step(mx.array(ids), model, max_tokens=max_tokens, sampler=sampler):
        out.append(int(tok))
        if out[-1] in eos or (stop and tuple(out[-len(stop) :]) == stop):
            break
    return out


def peer_jobs(loaded, prompt: list[int], trace: list[int], protocol: Protocol) -> list[list[int]]:
    """The reasoning prompts of one cell's probes (prompt + trace to each anchor, x samples) and
    restarts (the prompt, x restart samples), as `run_reference` runs them."""
    opened = len(open_ids(loaded))
    jobs = [prompt + trace[: opened + t] for t in protocol.anchors for _ in range(protocol.samples)]
    jobs += [
        list(prompt) for c in protocol.restart_budgets for _ in range(protocol.restart_samples)
    ]
    return jobs


def run_batch_generate(loaded, cells, protocol: Protocol, batch_size: int) -> tuple[float, int]:
    """Every probe and restart of `cells` as a user of mlx-lm's batch generation would run them:
    all reasoning phases through `batch_generate` (budgets per row), each cut at the close marker
    (or closed by the forced close), then all answer phases through `batch_generate`: (seconds,
    generated tokens kept)."""
    import mlx.core as mx
    from mlx_lm.generate import batch_generate
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    close, forced, eos = close_tokens(loaded)
    s = protocol.sampling
    sampler = make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)
    tokenizer = TokenizerWrapper(loaded.tokenizer, eos_token_ids=sorted(eos))
    prompts, budgets = [], []
    for _, prompt, trace in cells:
        jobs = peer_jobs(loaded, prompt, trace, protocol)
        n_probes = len(protocol.anchors) * protocol.samples
        prompts += jobs
        budgets += [protocol.budget] * n_probes + [
            c for c in protocol.restart_budgets for _ in range(protocol.restart_samples)
        ]
    mx.random.seed(0)
    t0 = time.perf_counter()
    first = batch_generate(
        loaded.model,
        tokenizer,
        prompts,
        max_tokens=budgets,
        sampler=sampler,
        completion_batch_size=batch_size,
        return_token_ids=True,
    )
    answers, kept = [], 0
    for ctx, out in zip(prompts, first.token_ids or [], strict=True):
        out = list(out)
        cut = next(
            (
                i + len(close)
                for i in range(len(out))
                if close and tuple(out[i : i + len(close)]) == close
            ),
            None,
        )
        reasoning = out[:cut] if cut is not None else [t for t in out if t not in eos]
        kept += len(reasoning)
        answers.append(list(ctx) + reasoning + ([] if cut is not None else list(forced)))
    second = batch_generate(
        loaded.model,
        tokenizer,
        answers,
        max_tokens=protocol.answer_budget,
        sampler=sampler,
        completion_batch_size=batch_size,
        return_token_ids=True,
    )
    kept += sum(len(t) for t in second.token_ids or [])
    return time.perf_counter() - t0, kept


def copy_bandwidth() -> float:
    """This device's copy bandwidth in bytes/s (bytes read + written), from a 1 GiB copy."""
    import mlx.core as mx

    a = mx.zeros((2**28,), dtype=mx.float32)
    mx.eval(a)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        mx.eval(a * 1)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best


def weights_rate(loaded, report_or_tokens, seconds: float, rows: float) -> float:
    """Bytes of weights read per second by decode steps: one read of the weights per step, steps
    = generated tokens / mean rows in flight (K/V reads not counted: a lower bound)."""
    from breakthrough.engine.memory import weights_bytes

    steps = report_or_tokens / max(rows, 1.0)
    return weights_bytes(loaded.model) * steps / max(seconds, 1e-9)


def run_reference(
    loaded, prompt: list[int], trace: list[int], protocol: Protocol, branches: int | None = None
):
    """Every probe and restart of one cell as the study ran them: (seconds, generated tokens).
    (A plain-family branch whose reasoning ends at EOS gets no answer phase, as in bt:
    pipeline.branches.)"""
    close, forced, eos = close_tokens(loaded)
    opened = len(open_ids(loaded))
    per_anchor = min(branches or protocol.samples, protocol.samples)
    per_budget = min(branches or protocol.restart_samples, protocol.restart_samples)
    jobs = [
        (trace[: opened + t], protocol.budget, 1000 * t + b)
        for t in protocol.anchors
        for b in range(per_anchor)
    ]
    jobs += [([], c, 7 + 1000 * c + b) for c in protocol.restart_budgets for b in range(per_budget)]
    t0, n = time.perf_counter(), 0
    for prefix, budget, seed in jobs:
        ctx = prompt + list(prefix)
        reasoning = ref_generate(loaded.model, ctx, budget, seed, protocol, eos, close)
        closed = bool(close) and tuple(reasoning[-len(close) :]) == close
        if not close and not forced and reasoning and reasoning[-1] in eos:
            n += len(reasoning)
            continue
        if not closed and reasoning and reasoning[-1] in eos:
            reasoning = reasoning[:-1]
        inserted = [] if closed else list(forced)
        answer = ref_generate(
            loaded.model,
            ctx + reasoning + inserted,
            protocol.answer_budget,
            seed + 1,
            protocol,
            eos,
        )
        n += len(reasoning) + len(answer)
    return time.perf_counter() - t0, n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        default="tiny",
        help="tiny (4 layers, width 128) or deep (8 layers, width 384), built here; "
        "or an alias / mlx-lm folder",
    )
    ap.add_argument("--workload", default="study8", choices=sorted(WORKLOADS))
    ap.add_argument("--trace-tokens", type=int)
    ap.add_argument("--anchors")
    ap.add_argument("--branches", type=int)
    ap.add_argument("--budget", type=int)
    ap.add_argument("--answer-budget", type=int)
    ap.add_argument("--restarts", help="restart budgets, comma-separated")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument(
        "--cells",
        type=int,
        default=8,
        help="cells (problems, each with its own base trace) continued in one run",
    )
    ap.add_argument(
        "--reference-cells",
        type=int,
        help="run the reference loop (and --peer batch-generate, every branch) on the first K "
        "cells only (default: all); the loop's tokens/s is a per-token rate, one sequence at "
        "a time, so it does not depend on how many cells it covers",
    )
    ap.add_argument(
        "--reference-branches",
        type=int,
        help="the reference runs K branches per anchor and per restart budget "
        "(default: all): every anchor and budget in the same proportion, so "
        "the same per-token rate in 1/4 of the time at K=1",
    )
    ap.add_argument(
        "--instrument",
        action="store_true",
        help="bt continue --instrument (the protocol 2.2 signals per token)",
    )
    ap.add_argument("--repeats", type=int, default=2, help="alternating bt / reference rounds")
    ap.add_argument("--memory-gb", default="auto", help="bt continue's --memory-gb (default auto)")
    ap.add_argument(
        "--compare-memory-gb",
        type=float,
        help="also run bt at this --memory-gb once and compare its occupancy and "
        "tokens with the first run's (issue 28: 4 against 64)",
    )
    ap.add_argument("--bt-only", action="store_true", help="skip the reference (profiling bt)")
    ap.add_argument(
        "--peer",
        choices=("reference", "batch-generate", "both"),
        default="reference",
        help="the baseline(s) bt is measured against in the same run: the plain one-sequence loop "
        "(reference), mlx-lm's batch_generate over every branch (batch-generate), or both",
    )
    ap.add_argument(
        "--bandwidth",
        action="store_true",
        help="also print the weights' bytes a decode step reads per second against this "
        "device's measured copy bandwidth",
    )
    ap.add_argument("--device", default="default", choices=["default", "cpu", "gpu"])
    ap.add_argument(
        "--attention",
        choices=("auto", "group", "shared", "rowwise", "copies"),
        default="auto",
        help="bt's attention path: auto (the engine's rule), group (a cell's rows in one buffer "
        "per layer, one fused attention call per chunk of rows: the GPU path), shared (rows "
        "point into their "
        "cell's one prefix and attend over it together: engine.prefix_attention), rowwise "
        "(they point into it and attend one by one) or copies (mlx-lm's batch cache, a copy "
        "of the prefix per row)",
    )
    ap.add_argument(
        "--query-heads",
        type=int,
        default=GEOMETRY_QUERY_HEADS,
        help="query heads of the study-geometry models (default 32, the study models'; 8 "
        "hides three quarters of the attention's work)",
    )
    ap.add_argument(
        "--curve",
        type=int,
        metavar="TOKENS",
        help="instead of the run: at each anchor, every cell's probes at that anchor decode "
        "TOKENS tokens, shared-prefix attention against row by row (the same rows, the same "
        "prefix caches), with the K/V bytes each reads per step",
    )
    args = ap.parse_args(argv)
    import mlx.core as mx

    if args.device != "default":
        mx.set_default_device(getattr(mx, args.device))
    force_attention(args.attention)
    w = dict(WORKLOADS[args.workload])
    for key in ("trace_tokens", "anchors", "branches", "budget", "answer_budget", "restarts"):
        if getattr(args, key) is not None:
            w[key] = getattr(args, key)

    built = args.model in MODELS or args.model in GEOMETRY_MODELS or args.model in REAL_MODELS
    loaded = load_model(build_model(args.model, args.query_heads), family="qwen" if built else None)
    memory_bytes = None if args.memory_gb == "auto" else int(float(args.memory_gb) * 2**30)
    protocol = replace(
        DEFAULT,
        anchors=tuple(int(a) for a in str(w["anchors"]).split(",")),
        samples=w["branches"],
        budget=w["budget"],
        answer_budget=w["answer_budget"],
        refinement_rounds=0,
        restart_budgets=tuple(int(c) for c in str(w["restarts"]).split(",")),
        restart_samples=w["restart_samples"],
    ).validate()
    rows = load_cohort("math500")
    cells = []
    for i in range(max(1, args.cells)):
        item = {**rows[i % len(rows)], "id": f"bench-{i}"}
        prompt = build_prompt_ids(loaded.tokenizer, loaded.family, item["problem"])
        cells.append((item, prompt, base_trace(loaded, w["trace_tokens"], offset=7 * i)))
    ref_cells = cells[: args.reference_cells or len(cells)]
    work = Path(tempfile.mkdtemp(prefix="bt-bench-runs-"))
    template = work / "template"
    build_run(template, loaded, cells)

    vocab = int(loaded.config.get("vocab_size") or 0)
    print(
        f"model {loaded.alias} ({loaded.model_id}, vocabulary {vocab:,}); device "
        f"{mx.default_device()}; BLAS: {blas_name()}"
    )
    print(
        f"workload {args.workload}: {len(cells)} cells, prompts {min(len(c[1]) for c in cells)}-"
        f"{max(len(c[1]) for c in cells)} + traces {min(len(c[2]) for c in cells)}-"
        f"{max(len(c[2]) for c in cells)} tokens; anchors "
        f"{','.join(map(str, protocol.anchors))} x {protocol.samples}; B={protocol.budget}, answer "
        f"{protocol.answer_budget}; restarts {','.join(map(str, protocol.restart_budgets))} x "
        f"{protocol.restart_samples}; bt batch size {args.batch_size}"
        f"{', --instrument' if args.instrument else ''}; reference on {len(ref_cells)} of "
        f"{len(cells)} cells"
        + (
            f", {args.reference_branches} branch(es) per anchor and budget"
            if args.reference_branches
            else ""
        )
    )
    if args.curve:
        decode_curve(loaded, cells, protocol, args.curve)
        return
    bandwidth = copy_bandwidth() if args.bandwidth else 0.0
    if args.bandwidth:
        print(f"copy bandwidth of {mx.default_device()}: {bandwidth / 1e9:.0f} GB/s (read + write)")
    print(f"{'':16}{'seconds':>10}{'generated':>11}{'tok/s':>9}")
    ratios, bt_rates, ref_rates, occupancies, bg_rates = [], [], [], [], []
    try:
        for rep in range(args.repeats):
            bt_s, bt_n, occ, fill, report, tokens = run_bt(
                template,
                work,
                loaded,
                protocol,
                args.batch_size,
                rep,
                args.instrument,
                memory_bytes,
            )
            print("\n".join(memory_lines(report, memory_bytes)))
            print(depth_line(ENGINES[-1]))
            if args.compare_memory_gb and rep == 0:
                other = int(args.compare_memory_gb * 2**30)
                o_s, o_n, o_occ, _, o_rep, o_tokens = run_bt(
                    template,
                    work,
                    loaded,
                    protocol,
                    args.batch_size,
                    rep,
                    args.instrument,
                    other,
                    name="compare",
                )
                print(
                    f"{'bt --memory-gb ' + format(args.compare_memory_gb, 'g'):16}{o_s:10.1f}"
                    f"{o_n:11d}{o_n / o_s:9.1f}   occupancy {o_occ or 0.0:.1%}; "
                    f"tokens {'identical' if o_tokens == tokens else 'DIFFER'} "
                    f"({len(tokens)} samples); occupancy ratio {(occ or 0) / (o_occ or 1):.2f} "
                    f"(--memory-gb {args.memory_gb} / {args.compare_memory_gb:g})"
                )
                print("\n".join(memory_lines(o_rep, other)), flush=True)
            occupancies.append(occ or 0.0)
            paths = ", ".join(f"{k} {v}" for k, v in sorted(report.rows_by_attention.items()))
            bt_line = (
                f"{f'bt continue #{rep + 1}':16}{bt_s:10.1f}{bt_n:11d}{bt_n / bt_s:9.1f}"
                f"   occupancy {occupancies[-1]:.1%}, attention fill {fill or 0.0:.1%}"
                f", rows by attention path: {paths or '-'}"
            )
            if args.bandwidth:
                rows_mean = (occ or 0.0) * args.batch_size
                rate = weights_rate(loaded, bt_n, bt_s, rows_mean)
                print(
                    f"    bt: weights read at {rate / 1e9:.1f} GB/s by decode steps = "
                    f"{rate / bandwidth:.1%} of this device's copy bandwidth (a lower bound)"
                )
            if args.bt_only:
                print(bt_line, flush=True)
                continue
            if args.peer in ("batch-generate", "both"):
                bg_s, bg_n = run_batch_generate(loaded, ref_cells, protocol, args.batch_size)
                bg_rates.append(bg_n / bg_s)
                print(
                    f"{f'batch_generate #{rep + 1}':16}{bg_s:10.1f}{bg_n:11d}{bg_rates[-1]:9.1f}"
                    f"   bt / batch_generate {bt_n / bt_s / bg_rates[-1]:.2f}x",
                    flush=True,
                )
                if args.bandwidth:
                    rate = weights_rate(loaded, bg_n, bg_s, args.batch_size)
                    print(
                        f"    batch_generate: weights read at most at {rate / 1e9:.1f} GB/s "
                        f"({rate / bandwidth:.1%} of the copy bandwidth; full batches assumed)"
                    )
            bt_rates.append(bt_n / bt_s)
            if args.peer == "batch-generate":
                print(bt_line, flush=True)
                continue
            ref_s = ref_n = 0.0
            for _, prompt, trace in ref_cells:
                s_, n_ = run_reference(loaded, prompt, trace, protocol, args.reference_branches)
                ref_s, ref_n = ref_s + s_, ref_n + n_
            ref_rates.append(ref_n / ref_s)
            ratios.append(bt_rates[-1] / ref_rates[-1])
            print(f"{f'reference #{rep + 1}':16}{ref_s:10.1f}{int(ref_n):11d}{ref_rates[-1]:9.1f}")
            if args.bandwidth:
                rate = weights_rate(loaded, ref_n, ref_s, 1.0)
                print(
                    f"    reference: weights read at {rate / 1e9:.1f} GB/s "
                    f"({rate / bandwidth:.1%} of the copy bandwidth)"
                )
            print(f"{bt_line}   ratio {ratios[-1]:.2f}x", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if bg_rates:
        print(
            f"median tok/s: bt {statistics.median(bt_rates):.1f}, batch_generate "
            f"{statistics.median(bg_rates):.1f}; bt / batch_generate "
            f"{statistics.median(bt_rates) / statistics.median(bg_rates):.2f}x"
        )
    if not ratios:
        return
    print(
        f"median tok/s: bt {statistics.median(bt_rates):.1f}, reference "
        f"{statistics.median(ref_rates):.1f}; speed-up median {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} repeats); bt occupancy "
        f"median {statistics.median(occupancies):.1%}"
    )


if __name__ == "__main__":
    main()
