"""bt's continuation scheduler against a reference-style loop, same model, same work, one run.

Work: one trace of about 1,500 tokens, 8 anchors x 4 continuations, small budgets (B=16 reasoning
tokens, 8 answer tokens by default). bt: one prefill of prompt + trace, every branch from a cut
copy of that cache, answer phase on the live cache, rows batched. Reference (protocol 3.3 as the
study ran it): a fresh prefill of prompt + prefix for every branch and again for every answer
phase, one sequence at a time. Both use the same engine, seeds and sampling, and produce the same
tokens (checked). Prints generated tokens/s of each, the speed-up ratio and prefill tokens.

What the ratio measures: per generated token both paths pay the same decode step (on this CPU
dominated by the 49,152-word output layer through MLX's reference BLAS, which batching barely
speeds up); bt saves the prefills. So the ratio grows with trace length and model depth and falls
as B grows (measured here: B=16/8 about 4.8x, B=32/16 2.8-3.6x with machine load).

    .venv/bin/python bench/continue_throughput.py                 # tiny random model (CPU)
    .venv/bin/python bench/continue_throughput.py --model smollm2-135m   # on Apple silicon
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from breakthrough.tasks.cohorts import load_cohort
from breakthrough.engine import EngineSpec, make_engine
from breakthrough.engine.contract import SharedPrefix
from breakthrough.pipeline.branches import Branch, BranchRunner, reference_branch
from breakthrough.pipeline.cell_loop import similar_length_chunks
from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model
from breakthrough.protocol import DEFAULT
from breakthrough.seeds import probe_seed
from breakthrough.tasks.family import user_message


def build_model(arg: str) -> str:
    if arg != "tiny":
        return arg
    from breakthrough.models.offline import tokenizer_from_gguf, write_tiny_model

    out = Path(tempfile.mkdtemp(prefix="bt-bench-")) / "bench-llama"
    write_tiny_model(out, tokenizer_from_gguf(), layers=4, hidden=128)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny (built here), an alias or an mlx-lm folder")
    ap.add_argument("--trace-tokens", type=int, default=1500)
    ap.add_argument("--anchors", default="64,128,256,384,512,768,1024,1280")
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--answer-budget", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="alternating bt/reference rounds")
    args = ap.parse_args()

    loaded = load_model(build_model(args.model))
    protocol = DEFAULT.with_overrides(budget=args.budget, answer_budget=args.answer_budget)
    rows = load_cohort("math500")
    prompt = build_prompt_ids(loaded.tokenizer, loaded.family, user_message(rows[0]))
    trace: list[int] = []
    for row in rows[1:]:  # real MATH text as the "base trace"
        trace += loaded.encode(row["problem"] + "\n")
        if len(trace) >= args.trace_tokens:
            break
    trace = trace[: args.trace_tokens]
    anchors = [int(a) for a in args.anchors.split(",")]
    branches = [Branch(f"{t}:{b}", "probe", t, args.budget, b, probe_seed("bench", t, b), t)
                for t in anchors for b in range(args.branches)]
    engine = make_engine(EngineSpec("mlx", batch_size=args.batch_size, memory_budget_bytes=0), loaded)
    print(f"model {loaded.alias} ({loaded.model_id}); prompt {len(prompt)} + trace {len(trace)} tokens; "
          f"{len(anchors)} anchors x {args.branches} branches; B={args.budget}, answer {args.answer_budget}")

    def run_bt():
        """bt: one prefill, cut caches, batched rows of similar prefix length."""
        t0, g0, p0 = time.perf_counter(), engine.generated_tokens, engine.prefill_tokens
        # A new SharedPrefix object (new key) per round: every round pays its one prefill.
        shared = SharedPrefix(f"bench-{time.perf_counter()}", tuple(prompt + trace[: max(anchors)]))
        runner = BranchRunner(engine, loaded, prompt, trace, protocol, shared)
        out = [r for chunk in similar_length_chunks(branches, args.batch_size) for r in runner.run(chunk)]
        out.sort(key=lambda r: branches.index(r.branch))
        return out, time.perf_counter() - t0, engine.generated_tokens - g0, engine.prefill_tokens - p0

    ref_engine = make_engine(EngineSpec("mlx-fresh", batch_size=1, memory_budget_bytes=0), loaded)

    def run_ref():
        """Reference: fresh prefill per branch and per answer phase, one sequence at a time."""
        t0, g0 = time.perf_counter(), ref_engine.generated_tokens
        out = [reference_branch(ref_engine, loaded, prompt, trace[: b.cut], b.budget, b.seed, protocol)
               for b in branches]
        return out, time.perf_counter() - t0, ref_engine.generated_tokens - g0

    ratios = []
    print(f"{'':14}{'seconds':>10}{'generated':>11}{'tok/s':>9}{'prefill tokens':>16}")
    for rep in range(args.repeats):  # alternate, so load changes hit both sides alike
        ours, bt_s, bt_gen, bt_prefill = run_bt()
        ref, ref_s, ref_gen = run_ref()
        ref_prefill = sum(2 * (len(prompt) + b.cut) + r.extra["reasoning_tokens"] + r.extra["inserted_tokens"]
                          for b, r in zip(branches, ours))
        same = sum(o.tokens == r for o, r in zip(ours, ref))
        ratios.append((bt_gen / bt_s) / (ref_gen / ref_s))
        print(f"{f'reference #{rep + 1}':14}{ref_s:10.2f}{ref_gen:11d}{ref_gen / ref_s:9.1f}{ref_prefill:16,d}")
        print(f"{f'bt #{rep + 1}':14}{bt_s:10.2f}{bt_gen:11d}{bt_gen / bt_s:9.1f}{bt_prefill:16,d}"
              f"   ratio {ratios[-1]:.2f}x, identical branches {same}/{len(branches)}")
    print(f"speed-up (bt tok/s / reference tok/s): median {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} repeats)")
    digest = hashlib.sha256(json.dumps([o.tokens for o in ours]).encode()).hexdigest()[:16]
    print(f"bt tokens sha256 (all {len(ours)} branches): {digest}")
    print(f"bt prefill tokens per cell / trace length: {bt_prefill / (len(prompt) + len(trace)):.3f} "
          f"(reference: {ref_prefill / (len(prompt) + len(trace)):.1f})")

if __name__ == "__main__":
    main()
