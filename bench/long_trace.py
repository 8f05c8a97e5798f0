"""The study's lengths on a tiny model: a 16,384-token base trace through `bt continue` with the
full anchor grid (64 ... 8,192) and restarts up to 8,192, under a `--memory-gb` budget.

Prints, per phase, wall time, samples and generated tokens, and the memory picture:
  * the shared-prefix cache of the cell (`PrefixCache.nbytes`: the full plain layers plus the
    snapshots of untrimmable layers) against `CacheBytes.prefix_cache`, the bound `MlxEngine.plan`
    reserves for it;
  * MLX's peak memory during `bt continue` minus the model's weights (rows' caches, prefix
    caches, logits, scratch) against the budget, and the rows the engine let run together.
The ratio column compares each measure with the budget measured in the same run.

The model is a tiny random-weight architecture of tests/models/architectures.py (default
`gemma4_text` with the study's 512-token sliding window, so the snapshot path runs; `qwen3` for
plain caches), the tokenizer SmolLM2's with the model's special tokens; its EOS and close-marker
tokens get a zero head row, so the base trace runs the full 16,384 tokens, all thinking, and
every grid anchor up to 8,192 exists. B and the answer budget are small by default (the
lengths, not the branch widths, are what this measures); the default --memory-gb 0.04 is set so
that the budget, not --batch-size, bounds the rows of the longest restarts.

    nice -n 10 .venv/bin/python bench/long_trace.py                        # gemma4_text, 16,384
    nice -n 10 .venv/bin/python bench/long_trace.py --arch qwen3 --memory-gb 0.1
    .venv/bin/python bench/long_trace.py --max-tokens 2048 --anchors 64,128,256,512,1024 \\
        --restarts 256,512,1024                                            # a quick look
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from models.architectures import ARCHITECTURES, write_architecture  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from breakthrough.cli import app  # noqa: E402
from breakthrough.engine import (
    EngineSpec,  # noqa: E402
    mlx_backend,  # noqa: E402
)
from breakthrough.engine.contract import RowShape  # noqa: E402
from breakthrough.engine.prefix_cache import PrefixCache, cache_bytes  # noqa: E402
from breakthrough.models.offline import tokenizer_from_gguf  # noqa: E402
from breakthrough.pipeline.cell_loop import ContinueOptions, continue_runs  # noqa: E402
from breakthrough.store import RunStore  # noqa: E402

GRID = "64,128,256,512,1024,2048,4096,8192"


class RecordingPrefixCache(PrefixCache):
    """PrefixCache that records its prefill time and the bytes it holds (bench only)."""

    seen: list[RecordingPrefixCache] = []

    def _prefill(self) -> None:
        t0 = time.perf_counter()
        super()._prefill()
        self.prefill_s = time.perf_counter() - t0
        self.held = self.nbytes
        RecordingPrefixCache.seen.append(self)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--arch", default="gemma4_text", choices=sorted(ARCHITECTURES))
    ap.add_argument("--window", type=int, default=512, help="sliding window (gemma4_text)")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--anchors", default=GRID)
    ap.add_argument("--restarts", default="1024,2048,4096,8192")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--answer-budget", type=int, default=16)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--memory-gb", type=float, default=0.04)
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    args = ap.parse_args()

    import mlx.core as mx

    root = Path(tempfile.mkdtemp(prefix="bt-long-trace-"))
    arch = ARCHITECTURES[args.arch]
    if "sliding_window" in arch.config:
        arch = replace(arch, config={**arch.config, "sliding_window": args.window})
    from breakthrough.models.families import FAMILIES

    # EOS and the close marker silenced: the random model writes the full trace, all thinking
    silence = arch.eos_tokens + (FAMILIES[arch.family].close_marker,)
    folder = write_architecture(root / args.arch, arch, tokenizer_from_gguf(), silence=silence)
    runs = root / "runs"
    times: dict[str, float] = {}

    t0 = time.perf_counter()
    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--limit",
            "1",
            "--model",
            str(folder),
            "--runs-dir",
            str(runs),
            "--run",
            "long",
            "--max-tokens",
            str(args.max_tokens),
            "--batch-size",
            "1",
        ],
    )
    times["base"] = time.perf_counter() - t0
    if res.exit_code != 0:
        raise SystemExit(f"bt base failed: {res.output}")
    with RunStore(runs / "long") as s:
        base = s.samples_frame(kind="base").iloc[0]
        reasoning = int((base.segments == 0).sum())

    # bt continue, in process so the prefix cache and MLX's peak memory can be read
    mlx_backend.PrefixCache = RecordingPrefixCache
    phase_t: dict[str, list[float]] = defaultdict(list)
    phase_n: dict[str, int] = defaultdict(int)
    engines = []

    def drive(run):
        def on_start(info, engine):
            engines.append(engine)

        def on_sample(phase: str, n: int) -> None:
            phase_t[phase].append(time.perf_counter())
            phase_n[phase] += n

        return run(on_start, on_sample)

    anchors = tuple(int(a) for a in args.anchors.split(","))
    restarts = tuple(int(c) for c in args.restarts.split(","))
    settings = dict(
        budget=args.budget,
        answer_budget=args.answer_budget,
        samples=args.samples,
        restart_samples=args.samples,
        topup_samples=2 * args.samples,
        restart_budgets=restarts,
        anchors=anchors,
        tau=0.75,
    )
    budget = int(args.memory_gb * 2**30)
    opts = ContinueOptions(
        engine=EngineSpec(backend="mlx", batch_size=args.batch_size, memory_budget_bytes=budget)
    )
    mx.synchronize()
    mx.reset_peak_memory()
    t0 = time.perf_counter()
    (rep,) = continue_runs([runs / "long"], settings, opts, drive=drive)
    times["continue"] = time.perf_counter() - t0
    peak = mx.get_peak_memory()
    engine = engines[0]
    model_bytes = sum(v.nbytes for _, v in _leaves(engine.model.parameters()))
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["classify", str(runs / "long")])
    times["classify"] = time.perf_counter() - t0

    layout = cache_bytes(engine.model)
    pcs = RecordingPrefixCache.seen
    held = max((p.held for p in pcs), default=0)
    prefix_tokens = max((len(p.sequence) for p in pcs), default=0)
    snaps = max((len(p.snapshots) for p in pcs), default=0)
    bound = layout.prefix_cache(prefix_tokens, snaps)
    row_tokens = prefix_tokens + max(args.budget, *restarts) + args.answer_budget
    rows = engine.plan(RowShape(row_tokens, shared_tokens=prefix_tokens)).probe_rows

    mb = 2**20
    print(
        f"model {args.arch} (window {args.window if 'sliding_window' in arch.config else '-'}), "
        f"base trace {len(base.token_ids):,} tokens ({reasoning:,} thinking), "
        f"anchors {args.anchors}, restarts {args.restarts}, B={args.budget}, "
        f"answer {args.answer_budget}, samples {args.samples}, --memory-gb {args.memory_gb:g}"
    )
    print(
        f"cache layout per token: plain {layout.plain_per_token:.0f} B, sliding "
        f"{layout.bounded_per_token:.0f} B up to {layout.window}, fixed {layout.fixed:.0f} B/row"
    )
    print("\nphase        wall s   samples  (first..last sample, s after continue start)")
    print(f"base       {times['base']:8.1f}         1")
    start = min((v[0] for v in phase_t.values()), default=0.0)
    if pcs:
        print(
            f"  prefix prefill + snapshots {sum(p.prefill_s for p in pcs):.2f} s for "
            f"{sum(p.prefill_tokens for p in pcs):,} tokens ({len(pcs)} prefix cache(s))"
        )
    for phase, ts in phase_t.items():
        print(
            f"{phase:<10} {ts[-1] - ts[0]:8.1f} {phase_n[phase]:9d}  "
            f"({ts[0] - start:.1f}..{ts[-1] - start:.1f})"
        )
    print(
        f"continue   {times['continue']:8.1f} {sum(phase_n.values()):9d}  "
        f"({rep.generated_tokens:,} generated, {rep.prefill_tokens:,} prefilled)"
    )
    print(f"classify   {times['classify']:8.1f}")
    print("\nmemory                                   MiB    / budget")
    for label, value in (
        ("budget (--memory-gb)", budget),
        ("prefix cache held (full + snapshots)", held),
        ("  bound reserved by plan()", bound),
        ("MLX peak during continue", peak),
        ("  minus model weights", peak - model_bytes),
    ):
        print(f"{label:<38} {value / mb:8.2f}  {value / budget:6.3f}")
    print(
        f"rows per batch allowed for {row_tokens:,}-token rows: {rows} "
        f"(--batch-size {args.batch_size}); snapshots {snaps}, prefix {prefix_tokens:,} tokens"
    )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"run kept in {runs / 'long'}")


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{prefix}.{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _leaves(v, f"{prefix}.{i}")
    else:
        yield prefix, tree


if __name__ == "__main__":
    main()
