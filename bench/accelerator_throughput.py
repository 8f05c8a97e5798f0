"""The issue-15 comparison on Apple silicon (Metal) or an NVIDIA GPU (`pip install -e '.[cuda]'`)
with a real 4-bit model: `bt continue` against the plain mlx-lm reference loop, same run.

It runs `continue_throughput.py`'s study-proportions workload (`--workload study8`: anchors
8..1024 x 4, B = 128, answer 64, restarts 128..1024 x 4) with a real model, by default `qwen3-4b`
(mlx-community/Qwen3-4B-4bit, which must already be in the local Hugging Face cache:
`hf download mlx-community/Qwen3-4B-4bit`), and a larger batch, since a GPU forward
pass is cheap per row. Prints the device, tok/s of both sides and the ratio per repeat and the
median. A real model can stop early (EOS, its own </think>), so the two sides' token counts may
differ a little; the ratio is of tok/s. Not run in CI; on a CPU-only machine it refuses unless
--allow-cpu (the CPU numbers come from continue_throughput.py on the random models).

    python bench/accelerator_throughput.py                       # qwen3-4b, batch 64, 2 repeats
    python bench/accelerator_throughput.py --model gemma4-e4b --batch-size 128
    python bench/accelerator_throughput.py --workload small --repeats 3
    python bench/accelerator_throughput.py --model study-geometry --trace-tokens 16384 \
        --anchors 1024,4096,8192,16384 --budget 1024 --answer-budget 512 --restarts 1024 --bt-only
        # the study's KV geometry at its context lengths (rows in flight per depth,
        # peak memory against --memory-gb, which defaults to auto)
    python bench/accelerator_throughput.py --model study-geometry --cells 4 --trace-tokens 16384 \
        --anchors 1024,2048,4096,8192,16384 --budget 16 --curve 32
        # the Hydragen curve on the device: shared-prefix attention against row by row per
        # anchor depth (add --attention copies to a run for mlx-lm's fused per-row kernel)
"""

from __future__ import annotations

import argparse
import sys

import continue_throughput  # noqa: E402  (imports breakthrough first: BLAS before mlx)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Any other option (--workload study8|small, ...) is passed on to "
        "continue_throughput.py; see `python bench/continue_throughput.py --help`.",
    )
    ap.add_argument("--model", default="qwen3-4b", help="a registry alias, hub id or mlx-lm folder")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--allow-cpu", action="store_true", help="run even without a GPU")
    args, rest = ap.parse_known_args()
    import mlx.core as mx

    if mx.default_device() == mx.cpu and not args.allow_cpu:
        print(
            "no GPU device for MLX here (Metal on Apple silicon, or mlx[cuda]); "
            "use continue_throughput.py on CPU, or pass --allow-cpu",
            file=sys.stderr,
        )
        raise SystemExit(2)
    continue_throughput.main(
        [
            "--model",
            args.model,
            "--batch-size",
            str(args.batch_size),
            "--repeats",
            str(args.repeats),
            *rest,
        ]
    )


if __name__ == "__main__":
    main()
