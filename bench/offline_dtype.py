"""Should the offline default model (SmolLM2-135M, Q4_1 GGUF) run 4-bit, or dequantized to
float32 / bfloat16, on this machine? Decode tok/s of each at batch 1 and 32, same run.

Why it is a question: on CPU, MLX's quantized matmuls are its own kernels, while float32 matmuls
go through BLAS (OpenBLAS when `breakthrough/engine/blas.py` found one) and bfloat16 ones through
MLX's fallback. Rounds alternate between the variants; prints medians.

    .venv/bin/python bench/offline_dtype.py [--steps 24] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from breakthrough.engine.blas import blas_name  # noqa: E402  (loads the BLAS before mlx)
from breakthrough.models.loading import load_model  # noqa: E402
from breakthrough.protocol import Sampling  # noqa: E402


def variant(kind: str, work: Path):
    """The offline model converted as `kind` ("q4" or "float32"), or the float32 conversion
    cast to bfloat16."""
    import mlx.core as mx
    from mlx.utils import tree_map

    from breakthrough.models.offline import convert_gguf, gguf_path

    weights = "q4" if kind == "q4" else "float32"
    folder = work / weights
    if not folder.exists():
        convert_gguf(gguf_path(), folder, weights=weights)
    loaded = load_model(str(folder))
    if kind == "bfloat16":
        loaded.model.update(tree_map(lambda a: a.astype(mx.bfloat16), loaded.model.parameters()))
        mx.eval(loaded.model.parameters())
    return loaded


def decode_rate(model, prompt: list[int], batch: int, steps: int) -> float:
    from decode_profile import BtBatch

    from breakthrough.engine.batch_step import RowSpec

    gen = BtBatch(
        model, [prompt] * batch, steps + 10, [RowSpec(i, Sampling()) for i in range(batch)]
    )
    gen.next_generated()
    t0 = time.perf_counter()
    for _ in range(steps):
        gen.next_generated()
    rate = batch * steps / (time.perf_counter() - t0)
    gen.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", default="1,32")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bt-offline-dtype-"))
    kinds = ("q4", "float32", "bfloat16")
    loaded = {k: variant(k, work) for k in kinds}
    models = {k: v.model for k, v in loaded.items()}
    prompt = loaded["q4"].encode("Find all real x such that x^2 - 5x + 6 = 0. " * 8)[:96]
    print(f"SmolLM2-135M (GGUF Q4_1) as 4-bit / float32 / bfloat16; BLAS: {blas_name()}")
    for batch in (int(b) for b in args.batches.split(",")):
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for k in kinds:
                rates[k].append(decode_rate(models[k], prompt, batch, args.steps))
        base = statistics.median(rates["q4"])
        for k in kinds:
            r = statistics.median(rates[k])
            print(f"batch {batch:3d}  {k:9s} {r:8.1f} tok/s  ({r / base:.2f}x q4)", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
