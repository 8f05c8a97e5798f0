"""One decode step's attention of one layer at Qwen3-4B's shape (32 query heads over 8 KV heads
x 128), rows of a few cells sharing their prefixes, three ways in the same run on the same keys:

  * group: bt's group buffers (`group_kv`, `group_attention`: a cell's prefix and its rows' slots
    in one buffer, one fused `scaled_dot_product_attention` call per chunk of rows), the step's
    writes included;
  * shared: bt's per-row buffers over one prefix copy (`prefix_attention.attend_shared`), the
    writes included;
  * copies: mlx-lm's `BatchKVCache` (every row its own left-padded copy of its prefix) and its
    attention: what a user of mlx-lm's batch generation runs.

Rows: `--cells` cells x `--anchors` x `--branches` samples, each row holding `--own` tokens past
its prefix. Prints the median step time of each (alternating rounds) and the ratios, and with
`--check` whether every row's output is bitwise the same alone, in the whole batch and in a
shuffled half of it (batch invariance on this device; the suite checks it on the CPU).

`--count-ops` builds (does not evaluate) one layer's step for each path at 16, 32 and 80 rows and
two prefix lengths, the GPU branch of every path forced on any device, and prints one line each:

    count-ops path=group rows=32 prefix=1024 chunks=4 ops=18 sdpa=4

(ops: non-view ops of the layer's graph, an attention call counted as one; sdpa: fused attention
calls). On a device where MLX has no fused kernel (the CPU; CUDA with an array mask) an attention
call is built from MLX's composed fallback: its ops are counted once per call, from the same call
built alone.

    .venv/bin/python bench/prefix_attention_step.py --anchors 512,1024 --cells 2 --branches 4
    .venv/bin/python bench/prefix_attention_step.py --count-ops
    PYTHONPATH=<other checkout> .venv/bin/python bench/prefix_attention_step.py   # another commit
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter

import numpy as np

from breakthrough.engine import group_attention, mlx_compat, prefix_attention
from breakthrough.engine.group_kv import (
    GroupCell,
    GroupLayer,
    GroupRowCache,
    GroupShape,
    chunk_rows,
    group_step_write,
    slot_positions,
)
from breakthrough.engine.shared_kv import SharedBatchCache, SharedRowCache

import mlx.core as mx  # isort:skip  (after breakthrough: its BLAS first)

HEADS, Q_HEADS, DIM = 8, 32, 128
SCALE = DIM**-0.5
# The study's slot: B 1024 + answer 512 + slack (MlxEngine._group_shape).
STUDY_SLOT = slot_positions(1024 + 512 + 64)
# Primitives that make no new buffer (views), left out of `--count-ops`.
VIEWS = {
    "AsStrided",
    "Broadcast",
    "BroadcastAxes",
    "ExpandDims",
    "Flatten",
    "Reshape",
    "Slice",
    "Squeeze",
    "StopGradient",
    "Transpose",
    "Unflatten",
}
# (cells, anchors per cell, branches) of the step sizes the issue measured
COUNT_SIZES = ((2, 2, 4), (2, 4, 4), (4, 5, 4))
COUNT_PREFIXES = (1024, 8192)


def _kv(rng, n: int, dtype, heads: int = HEADS):
    return mx.array(rng.standard_normal((1, heads, n, DIM)).astype(np.float32)).astype(dtype)


class Step:
    """The rows of one decode step in all three layouts, on the same keys and values."""

    def __init__(
        self, cells: int, anchors: list[int], branches: int, dtype, own: int, slot_size: int
    ) -> None:
        rng = np.random.default_rng(0)
        self.spec = [(c, a, b) for c in range(cells) for a in anchors for b in range(branches)]
        n = len(self.spec)
        capacity = -(-max(anchors) // prefix_attention.BLOCK) * prefix_attention.BLOCK
        chunk = chunk_rows(Q_HEADS, HEADS)
        per_cell = len(anchors) * branches
        shape = GroupShape(-(-per_cell // chunk) * chunk, slot_size, chunk, branches)
        bases = [(_kv(rng, capacity, dtype), _kv(rng, capacity, dtype)) for _ in range(cells)]
        own_kv = [(_kv(rng, own, dtype), _kv(rng, own, dtype)) for _ in range(n)]
        self.new_keys = mx.array(rng.standard_normal((n, HEADS, 1, DIM)).astype(np.float32))
        self.new_values = mx.array(rng.standard_normal((n, HEADS, 1, DIM)).astype(np.float32))
        self.queries = mx.array(rng.standard_normal((n, Q_HEADS, 1, DIM)).astype(np.float32))
        self.new_keys, self.new_values, self.queries = (
            a.astype(dtype) for a in (self.new_keys, self.new_values, self.queries)
        )
        self.cells = [
            GroupCell(
                f"cell{c}",
                [GroupLayer.from_prefix(k, v, capacity, shape)],
                tuple(anchors),
                shape,
            )
            for c, (k, v) in enumerate(bases)
        ]
        self.shared_rows, self.group_rows = [], []
        for i, (c, a, b) in enumerate(self.spec):
            k, v = bases[c]
            row = SharedRowCache(k[..., :a, :], v[..., :a, :], (k, v))
            row.lane = b  # the pipeline's lane: the branch index (GenRequest.lane)
            row.reserve(own + 2)
            row.write(*own_kv[i])
            self.shared_rows.append(row)
            cell = self.cells[c]
            g = GroupRowCache(cell.layers[0], cell, cell.slot_for(a, b), a)
            g.write(*own_kv[i])
            self.group_rows.append(g)
        self.lengths = [a + own for _, a, _ in self.spec]
        mx.eval(
            [c.layers[0].keys for c in self.cells],
            [c.layers[0].values for c in self.cells],
            [r.keys for r in self.shared_rows],
        )
        self.chunks = len(
            {(c, r.slot // chunk) for (c, _, _), r in zip(self.spec, self.group_rows, strict=True)}
        )
        self._copies: tuple | None = None

    def copy_batch(self) -> tuple:
        """(keys, values, mask) of mlx-lm's batch cache: every row's own left-padded copy of its
        prefix and own tokens, and a position for the step's token (made on first use)."""
        if self._copies is None:
            n = len(self.spec)
            longest = max(self.lengths) + 1
            padded = [r.padded(longest - 1 - r.offset) for r in self.shared_rows]
            room = mx.zeros((n, HEADS, 1, DIM), self.queries.dtype)
            keys = mx.concatenate([mx.concatenate([k for k, _ in padded]), room], axis=2)
            values = mx.concatenate([mx.concatenate([v for _, v in padded]), room], axis=2)
            valid = np.zeros((n, 1, 1, longest), dtype=bool)
            for i, length in enumerate(self.lengths):
                valid[i, ..., longest - 1 - length :] = True
            mask = mx.array(valid)
            mx.eval(keys, values, mask)
            self._copies = (keys, values, mask)
        return self._copies

    # -- one layer's step per path: writes this step's keys and values, then attends ----------
    def group(self, idx: list[int] | None = None, force_fused: bool = False):
        rows = self.group_rows if idx is None else [self.group_rows[i] for i in idx]
        keys, values, queries = self._inputs(idx)
        saved = [(r.suffix_len, r.offset) for r in rows]
        group_step_write(rows, keys, values)
        out = group_attention.attend_group(queries, rows, SCALE, force_fused=force_fused)
        for r, (s, o) in zip(rows, saved, strict=True):  # the same step again next time
            r.suffix_len, r.offset = s, o
        return out

    def shared(self, idx: list[int] | None = None):
        rows = self.shared_rows if idx is None else [self.shared_rows[i] for i in idx]
        keys, values, queries = self._inputs(idx)
        saved = [(r.suffix_len, r.offset) for r in rows]
        batch = SharedBatchCache(rows)
        batch.update_and_fetch(keys, values)
        out = prefix_attention.attend_shared(queries, rows, SCALE)
        for r, (s, o) in zip(rows, saved, strict=True):
            r.suffix_len, r.offset = s, o
        return out

    def copies(self):
        keys, values, mask = self.copy_batch()
        keys[..., -1:, :] = self.new_keys  # BatchKVCache writes the step's position in place
        values[..., -1:, :] = self.new_values
        return mlx_compat.mlx_attention(
            self.queries, keys, values, cache=None, scale=SCALE, mask=mask, sinks=None
        )

    def _inputs(self, idx):
        if idx is None:
            return self.new_keys, self.new_values, self.queries
        sel = mx.array(idx)
        return self.new_keys[sel], self.new_values[sel], self.queries[sel]


def check_invariance(step: Step, name: str) -> None:
    """Print how many rows' outputs differ (bitwise) alone or in a shuffled half of the batch
    from the whole batch's."""
    fn = getattr(step, name)
    n = len(step.spec)
    batch = fn()
    mx.eval(batch)
    alone = sum(not mx.array_equal(fn([i]), batch[i : i + 1]).item() for i in range(n))
    some = [int(i) for i in np.random.default_rng(3).permutation(n)[: n // 2 + 1]]
    mixed = fn(some)
    shuffled = sum(
        not mx.array_equal(mixed[k : k + 1], batch[i : i + 1]).item() for k, i in enumerate(some)
    )
    print(
        f"batch invariance ({name}): {alone} of {n} rows differ alone, "
        f"{shuffled} of {len(some)} in a shuffled half"
    )


def graph_ops(*outputs) -> Counter:
    """The primitives of the graph that computes `outputs` (not evaluated), by name, views
    left out (MLX's own DOT export: one node per primitive)."""
    fd, path = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    try:
        mx.export_to_dot(path, *outputs)
        text = open(path, encoding="utf-8").read()
    finally:
        os.unlink(path)
    names = Counter()
    for line in text.splitlines():
        if "label =" in line and "shape=rectangle" in line:
            label = line.split('label ="', 1)[1].split('"', 1)[0]
            if label not in VIEWS:
                names[label] += 1
    return names


def sdpa_fallback_ops(step: Step, dtype) -> int:
    """Non-view ops of one attention call with the group path's shapes, built alone: 1 where
    MLX builds its fused primitive, more where it composes the fallback."""
    layer = step.cells[0].layers[0]
    chunk = step.cells[0].shape.chunk
    q = mx.zeros((1, Q_HEADS, chunk, DIM), dtype)
    mask = mx.zeros((1, 1, chunk, layer.length), mx.bool_)
    mx.eval(q, mask)
    out = mx.fast.scaled_dot_product_attention(q, layer.keys, layer.values, scale=SCALE, mask=mask)
    return sum(graph_ops(out).values())


def count_ops(dtype, slot_size: int, paths: list[str]) -> None:
    prefix_attention.LAZY_ON_CPU = True  # the shared path's GPU branch, lazily, on any device
    try:
        for cells, anchors_n, branches in COUNT_SIZES:
            for prefix in COUNT_PREFIXES:
                anchors = [prefix * (i + 1) // anchors_n for i in range(anchors_n)]
                step = Step(cells, anchors, branches, dtype, 8, slot_size)
                rows = len(step.spec)
                fallback = sdpa_fallback_ops(step, dtype)
                per_call = {"group": fallback, "copies": fallback}
                calls = {"group": step.chunks, "shared": 0, "copies": 1}
                for name in paths:
                    ops = graph_ops(getattr(step, name)())
                    total = sum(ops.values())
                    if name in per_call and per_call[name] > 1:
                        total -= calls[name] * (per_call[name] - 1)  # a call counts once
                    extra = f" chunks={step.chunks}" if name == "group" else ""
                    print(
                        f"count-ops path={name} rows={rows} prefix={prefix}{extra} "
                        f"ops={total} sdpa={calls[name]}",
                        flush=True,
                    )
    finally:
        prefix_attention.LAZY_ON_CPU = False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=2)
    ap.add_argument("--anchors", default="512,1024", help="prefix lengths, comma-separated")
    ap.add_argument("--branches", type=int, default=4, help="rows per anchor")
    ap.add_argument("--own", type=int, default=8, help="tokens each row holds past its prefix")
    ap.add_argument(
        "--slot-size", type=int, default=STUDY_SLOT, help="positions per group slot (the study's)"
    )
    ap.add_argument("--steps", type=int, default=20, help="timed calls per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the paths")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="default", choices=["default", "cpu", "gpu"])
    ap.add_argument(
        "--paths", default="group,shared,copies", help="paths to time (or count), comma-separated"
    )
    ap.add_argument("--check", action="store_true", help="also check batch invariance, bitwise")
    ap.add_argument(
        "--force-fused",
        action="store_true",
        help="ask MLX for its fused attention kernel in the group path (an error where none fits)",
    )
    ap.add_argument(
        "--count-ops", action="store_true", help="count each path's ops per layer (module doc)"
    )
    args = ap.parse_args()
    if args.device != "default":
        mx.set_default_device(getattr(mx, args.device))
    dtype = getattr(mx, args.dtype)
    if args.count_ops:
        count_ops(dtype, args.slot_size, [p for p in args.paths.split(",") if p])
        return
    anchors = [int(a) for a in args.anchors.split(",")]
    step = Step(args.cells, anchors, args.branches, dtype, args.own, args.slot_size)
    if args.force_fused:
        try:
            mx.eval(step.group(force_fused=True))
            device = mx.default_device()
            print(f"force_fused: the group path's attention runs MLX's fused kernel on {device}")
        except Exception as err:  # MLX's own refusal, printed as the finding
            print(f"force_fused: refused on {mx.default_device()}: {str(err).splitlines()[0]}")
    if args.check:
        for name in ("group", "shared"):
            check_invariance(step, name)
    paths = [p for p in args.paths.split(",") if p]
    times: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(args.rounds):
        for name in paths:
            fn = getattr(step, name)
            mx.eval(fn())
            for _ in range(args.steps):
                start = time.perf_counter()
                mx.eval(fn())
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    ratios = ""
    if "copies" in med:
        ratios = "; copies/path " + ", ".join(
            f"{name} {med['copies'] / ms:.2f}x" for name, ms in med.items() if name != "copies"
        )
    print(
        f"rows {len(step.spec)} ({args.cells} cells x anchors {args.anchors} x {args.branches}), "
        f"chunks {step.chunks}, {args.dtype}, {mx.default_device()}: "
        + ", ".join(f"{name} {ms:.2f} ms/step" for name, ms in med.items())
        + ratios,
        flush=True,
    )


if __name__ == "__main__":
    main()
