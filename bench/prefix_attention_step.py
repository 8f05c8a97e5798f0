"""One decode step's attention of one layer at Qwen3-4B's shape (32 query heads over 8 KV heads
x 128), rows of a few cells sharing their prefixes: bt's `prefix_attention.attend_shared`
against mlx-lm's attention over the left-padded [rows, heads, T, dim] batch that mlx-lm's
`BatchKVCache` holds (every row its own copy of its prefix), in the same run, on the same keys.

Rows: `--cells` cells x `--anchors` x `--branches` samples, each anchor's rows holding a few own
tokens. Prints the median step time of each (alternating rounds) and their ratio, and with
`--check` whether every row's output is bitwise the same alone, in the whole batch and in a
shuffled half of it (batch invariance on this device; the suite checks it on the CPU).

    .venv/bin/python bench/prefix_attention_step.py --anchors 512,1024 --cells 2 --branches 4
    PYTHONPATH=<other checkout> .venv/bin/python bench/prefix_attention_step.py   # another commit
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from breakthrough.engine import mlx_compat, prefix_attention
from breakthrough.engine.shared_kv import SharedRowCache

import mlx.core as mx  # isort:skip  (after breakthrough: its BLAS first)

HEADS, Q_HEADS, DIM = 8, 32, 128
OWN = 8  # tokens each row holds past its prefix


def build(cells: int, anchors: list[int], branches: int, dtype) -> tuple:
    """(queries [rows, q_heads, 1, dim], shared rows, padded keys, padded values, mask)."""
    rng = np.random.default_rng(0)
    capacity = -(-max(anchors) // prefix_attention.BLOCK) * prefix_attention.BLOCK

    def kv(n: int, heads: int = HEADS):
        return mx.array(rng.standard_normal((1, heads, n, DIM)).astype(np.float32)).astype(dtype)

    rows = []
    for _ in range(cells):
        base = (kv(capacity), kv(capacity))
        for anchor in anchors:
            for branch in range(branches):
                row = SharedRowCache(base[0][..., :anchor, :], base[1][..., :anchor, :], base)
                row.lane = branch  # the pipeline's lane: the branch index (GenRequest.lane)
                row.reserve(OWN + 1)
                row.write(kv(OWN), kv(OWN))
                rows.append(row)
    longest = max(r.offset for r in rows)
    padded = [r.padded(longest - r.offset) for r in rows]
    keys = mx.concatenate([k for k, _ in padded], axis=0)
    values = mx.concatenate([v for _, v in padded], axis=0)
    valid = np.zeros((len(rows), 1, 1, longest), dtype=bool)
    for i, r in enumerate(rows):
        valid[i, ..., longest - r.offset :] = True
    queries = mx.array(rng.standard_normal((len(rows), Q_HEADS, 1, DIM)).astype(np.float32)).astype(
        dtype
    )
    mx.eval(keys, values, queries)
    return queries, rows, keys, values, mx.array(valid)


def check_invariance(queries, rows: list, scale: float) -> None:
    """Print how many rows' outputs differ (bitwise) alone or in a shuffled half of the batch
    from the whole batch's."""
    batch = prefix_attention.attend_shared(queries, rows, scale)
    alone = sum(
        not mx.array_equal(
            prefix_attention.attend_shared(queries[i : i + 1], [rows[i]], scale), batch[i : i + 1]
        ).item()
        for i in range(len(rows))
    )
    some = [int(i) for i in np.random.default_rng(3).permutation(len(rows))[: len(rows) // 2 + 1]]
    mixed = prefix_attention.attend_shared(queries[mx.array(some)], [rows[i] for i in some], scale)
    shuffled = sum(
        not mx.array_equal(mixed[k : k + 1], batch[i : i + 1]).item() for k, i in enumerate(some)
    )
    print(
        f"batch invariance: {alone} of {len(rows)} rows differ alone, "
        f"{shuffled} of {len(some)} in a shuffled half"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=2)
    ap.add_argument("--anchors", default="512,1024", help="prefix lengths, comma-separated")
    ap.add_argument("--branches", type=int, default=4, help="rows per anchor")
    ap.add_argument("--steps", type=int, default=20, help="timed calls per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of both")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="default", choices=["default", "cpu", "gpu"])
    ap.add_argument("--check", action="store_true", help="also check batch invariance, bitwise")
    args = ap.parse_args()
    if args.device != "default":
        mx.set_default_device(getattr(mx, args.device))
    dtype = getattr(mx, args.dtype)
    anchors = [int(a) for a in args.anchors.split(",")]
    queries, rows, keys, values, mask = build(args.cells, anchors, args.branches, dtype)
    scale = DIM**-0.5

    def shared():
        return prefix_attention.attend_shared(queries, rows, scale)

    def copies():
        return mlx_compat.mlx_attention(
            queries, keys, values, cache=None, scale=scale, mask=mask, sinks=None
        )

    if args.check:
        check_invariance(queries, rows, scale)
    times: dict[str, list[float]] = {"bt shared": [], "mlx-lm copies": []}
    for _ in range(args.rounds):
        for name, fn in (("bt shared", shared), ("mlx-lm copies", copies)):
            mx.eval(fn())
            for _ in range(args.steps):
                start = time.perf_counter()
                mx.eval(fn())
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(
        f"rows {len(rows)} ({args.cells} cells x anchors {args.anchors} x {args.branches}), "
        f"{args.dtype}, {mx.default_device()}: "
        + ", ".join(f"{name} {ms:.2f} ms/step" for name, ms in med.items())
        + f"; ratio {med['mlx-lm copies'] / med['bt shared']:.2f}x"
    )


if __name__ == "__main__":
    main()
