"""What does the per-token instrumentation (protocol 2.2,
`engine/sampling/signals.py:token_signals*`) cost? Generated tokens/s of the MLX engine with full
instrumentation vs log-prob-only (`MlxEngine(instrument=False)`: log-prob and the two entropies
only), same requests, same run.

Target: at most 15 % slower on the tiny test model and on SmolLM2-135M. Rounds
alternate between the two settings; prints the median rate of each and their ratio.

    nice -n 10 .venv/bin/python bench/instrumentation_overhead.py \
        [--tokens 64] [--rows 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from breakthrough.engine.blas import blas_name  # noqa: E402  (loads the BLAS before mlx)
from breakthrough.engine.contract import GenRequest  # noqa: E402
from breakthrough.engine.mlx_backend import MlxEngine  # noqa: E402
from breakthrough.models.families import build_prompt_ids  # noqa: E402
from breakthrough.models.loading import load_model  # noqa: E402
from breakthrough.tasks.family import user_message  # noqa: E402


def rate(loaded, prompts: list[list[int]], tokens: int, instrument: bool) -> float:
    """Generated tokens/s of one `generate` call over the prompts (fixed length: no EOS stop)."""
    eng = MlxEngine.from_loaded(loaded, batch_size=len(prompts), instrument=instrument)
    eng.eos_ids = frozenset({-1})  # every row runs its full budget, both settings alike
    reqs = [GenRequest(f"r{i}", p, tokens, seed=100 + i) for i, p in enumerate(prompts)]
    for _ in eng.generate(reqs):
        pass
    return eng.generated_tokens / eng.last_elapsed_s


def measure(name: str, loaded, args) -> None:
    prompts = [
        build_prompt_ids(
            loaded.tokenizer,
            loaded.family,
            user_message({"problem": f"What is {i} times {i + 3}?"}),
        )
        for i in range(args.rows)
    ]
    rate(loaded, prompts[:1], 4, True)  # warm-up (kernels, allocations)
    on: list[float] = []
    off: list[float] = []
    for _ in range(args.rounds):
        off.append(rate(loaded, prompts, args.tokens, False))
        on.append(rate(loaded, prompts, args.tokens, True))
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(
        f"{name}: log-prob only {m_off:,.0f} tok/s, instrumented {m_on:,.0f} tok/s, "
        f"instrumented / log-prob only = {m_on / m_off:.3f} "
        f"({(1 - m_on / m_off) * 100:+.1f} % slower); "
        f"{args.rows} rows x {args.tokens} tokens, median of {args.rounds} rounds"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-smollm2", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/models/tiny.py
    from models.tiny import write_tiny_model

    from breakthrough.models.offline import tokenizer_from_gguf

    print(f"BLAS: {blas_name()}")
    tiny = write_tiny_model(
        Path(tempfile.mkdtemp(prefix="bt-instr-")) / "tiny", tokenizer_from_gguf()
    )
    measure("tiny model (2 layers, d=64)", load_model(str(tiny)), args)
    if not args.skip_smollm2:
        measure("SmolLM2-135M", load_model("smollm2-135m"), args)


if __name__ == "__main__":
    main()
