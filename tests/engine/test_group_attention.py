"""Group buffers (`engine.group_kv`, `group_attention`, `group_rows`): a cell's prefix and its rows'
own tokens in one buffer per layer, one fused attention call per chunk of rows. A row's attention
never depends on the other rows in flight, the step's writes are in place, the ops per layer do
not grow with rows or prefix, and an engine whose rows all run there makes the tokens of fresh
prefills."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from models.tiny import geometry_model

from breakthrough.engine import group_attention, mlx_compat
from breakthrough.engine.contract import GenRequest, RowShape, SharedPrefix
from breakthrough.engine.group_kv import (
    GroupCell,
    GroupLayer,
    GroupRowCache,
    GroupShape,
    chunk_rows,
    group_step_write,
)
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.engine.shared_kv import SharedBatchCache, SharedRowCache
from breakthrough.errors import BtError

import mlx.core as mx  # noqa: E402  isort:skip

HEADS, Q_HEADS, DIM = 8, 32, 128  # Qwen3-4B's attention: 32 query heads over 8 KV heads
SCALE = DIM**-0.5
SHAPE = GroupShape(slots=16, slot_size=256, chunk=chunk_rows(Q_HEADS, HEADS), lanes=4)
# (cell, prefix length, lane, own positions) per row: two cells, anchors at several depths, rows
# of one anchor in neighbouring slots, a second anchor's row with the same lane, one row outside
# any group buffer (attended by prefix_attention beside them).
ROWS = [
    (0, 699, 0, 5),
    (0, 699, 1, 3),
    (0, 299, 0, 7),
    (1, 99, 2, 2),
    (None, 0, 0, 9),
    (1, 299, 0, 9),
    (0, 9, 3, 1),
    (0, 499, 1, 4),
    (0, 699, 2, 30),
]
STARTS = ((10, 100, 300, 500, 700), (10, 100, 300))


def _batch(dtype, seed: int = 0) -> tuple[list, mx.array, mx.array, mx.array]:
    """(rows, the step's new keys, values, queries): rows in their cells' group buffers (and one
    of its own), each holding its own positions already."""
    rng = np.random.default_rng(seed)

    def kv(n: int):
        return mx.array(rng.standard_normal((1, HEADS, n, DIM)).astype(np.float32)).astype(dtype)

    cells = [
        GroupCell(f"c{c}", [GroupLayer.from_prefix(kv(n), kv(n), n, SHAPE)], starts, SHAPE)
        for c, (n, starts) in enumerate(((700, STARTS[0]), (300, STARTS[1])))
    ]
    rows: list = []
    for cell, prefix, lane, own in ROWS:
        if cell is None:
            row = SharedRowCache()
            row.reserve(own + 2)
        else:
            c = cells[cell]
            row = GroupRowCache(c.layers[0], c, c.slot_for(prefix, lane), prefix)
        row.write(kv(own), kv(own))
        rows.append(row)
    n = len(rows)
    new = [
        mx.array(rng.standard_normal((n, heads, 1, DIM)).astype(np.float32)).astype(dtype)
        for heads in (HEADS, HEADS, Q_HEADS)
    ]
    return rows, new[0], new[1], new[2]


def _step(rows, keys, values, queries, idx: list[int]) -> np.ndarray:
    """One decode step of the rows `idx` (written, then attended), undone afterwards."""
    sub = [rows[i] for i in idx]
    sel = mx.array(idx)
    saved = [(r.suffix_len, r.offset) for r in sub]
    batch = SharedBatchCache(sub)
    fetched, _ = batch.update_and_fetch(keys[sel], values[sel])
    assert batch.rows_for_attention(queries[sel], fetched) is not None
    out = group_attention.attend_group(queries[sel], sub, SCALE)
    mx.eval(out)
    for r, (s, o) in zip(sub, saved, strict=True):
        r.suffix_len, r.offset = s, o
    return np.array(out.astype(mx.float32))


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_a_row_attends_the_same_alone_and_among_other_rows(dtype) -> None:
    """Batch invariance, bitwise: each row's attention is the same alone, in the whole batch and
    in a shuffled half of it; and it is the attention mlx-lm computes over the row's own keys."""
    rows, keys, values, queries = _batch(dtype)
    full = _step(rows, keys, values, queries, list(range(len(rows))))
    for i in range(len(rows)):
        assert (_step(rows, keys, values, queries, [i])[0] == full[i]).all(), f"row {i} alone"
    half = [int(i) for i in np.random.default_rng(3).permutation(len(rows))[:5]]
    mixed = _step(rows, keys, values, queries, half)
    for k, i in enumerate(half):
        assert (mixed[k] == full[i]).all(), f"row {i} in a shuffled half"
    # the reference: each row over its own prefix + own positions, this step's included
    for i, row in enumerate(rows):
        row.write(keys[i : i + 1], values[i : i + 1])
        k, v = row.padded(0)
        ref = mlx_compat.mlx_attention(queries[i : i + 1], k, v, cache=None, scale=SCALE, mask=None)
        tol = 1e-5 if dtype == mx.float32 else 2e-2
        np.testing.assert_allclose(full[i], np.array(ref.astype(mx.float32))[0], atol=tol)


def test_a_rows_slot_and_place_follow_its_request_alone() -> None:
    """A row's slot is its anchor's ordinal times the lanes plus its lane (modulo the slots), its
    place in its chunk the slot's; the chunk fits the fused kernels (query length <= 8, x query
    heads per KV head <= 32)."""
    cell = GroupCell("c", [], STARTS[0], SHAPE)
    assert [cell.slot_for(p, lane) for p, lane in ((9, 0), (9, 3), (99, 0), (699, 1))] == [
        0,
        3,
        4,
        1,  # ordinal 4 x 4 lanes + 1, modulo 16 slots
    ]
    assert chunk_rows(32, 8) == 8 and chunk_rows(32, 4) == 4 and chunk_rows(8, 8) == 8
    assert chunk_rows(64, 8) == 4 and chunk_rows(40, 1) == 1
    rows, *_ = _batch(mx.float32)
    assert all(r.lane == r.slot % SHAPE.chunk for r in rows if isinstance(r, GroupRowCache))


def test_a_step_writes_in_place_and_keeps_no_copy() -> None:
    """Twenty decode steps grow MLX's active memory by less than one step's new keys and values:
    the buffers are donated to the step's scatter (no copy of a cell's buffer per step), and the
    plan's masks are made once per step, not per layer."""
    rows, keys, values, queries = _batch(mx.float32, seed=4)
    rows = [r for r in rows if isinstance(r, GroupRowCache)]
    sel = mx.array(list(range(len(rows))))
    keys, values, queries = keys[sel], values[sel], queries[sel]
    mx.eval(keys, values, queries)
    one_step = 2 * keys.nbytes

    def step() -> None:
        group_step_write(rows, keys, values)
        mx.eval(group_attention.attend_group(queries, rows, SCALE))

    step()
    before = mx.get_active_memory()
    for _ in range(20):
        step()
    assert mx.get_active_memory() - before < one_step


def _cells(rng, n_cells, prompt_len, trace_len, anchors, branches, tokens, vocab=500):
    """Reasoning requests at `anchors` (lane = branch, state kept), each followed by an answer
    request (`_run`), plus one restart per cell; ids below `vocab`."""
    reqs, follow = [], []
    for c in range(n_cells):
        prompt = [int(t) for t in rng.integers(1, min(500, vocab), prompt_len)]
        trace = [int(t) for t in rng.integers(1, min(500, vocab), trace_len)]
        shared = SharedPrefix(
            f"cell{c}",
            tuple(prompt + trace),
            tuple([len(prompt)] + [len(prompt) + a for a in anchors]),
        )
        for a in anchors:
            for b in range(branches):
                key = f"c{c}p{a}:{b}"
                reqs.append(
                    GenRequest(
                        key,
                        prompt + trace[:a],
                        tokens,
                        seed=100 * a + b + c,
                        shared_prefix=shared,
                        keep_state=True,
                        lane=b,
                    )
                )
                follow.append((key, shared, b))
        reqs.append(GenRequest(f"c{c}r", prompt, tokens, seed=7 + c, shared_prefix=shared))
    return reqs, follow


def _run(engine: MlxEngine, reqs, follow, tokens: int) -> dict:
    """Every request, then an answer request following each reasoning row (its prompt + tokens +
    two close ids), as the pipeline's branches do."""
    first = {r.key: r for r in engine.generate(reqs)}
    prompts = {r.key: list(r.prompt) for r in reqs}
    answers = [
        GenRequest(
            f"{key}/a",
            prompts[key] + list(first[key].tokens) + [3, 4],
            tokens,
            seed=5,
            follows=key,
            shared_prefix=shared,
            lane=lane,
        )
        for key, shared, lane in follow
    ]
    return first | {r.key: r for r in engine.generate(answers)}


def _group_engine(model, **kwargs) -> MlxEngine:
    """An engine with rows in group buffers on any device, its slots sized for this test's rows
    (a plan as `bt continue` makes one)."""
    engine = MlxEngine(model, [511], attention="group", **{"batch_size": 16, **kwargs})
    engine.configure(engine.plan(RowShape(400, shared_tokens=300)))
    assert engine.groups is not None and engine.groups.shape.slot_size == 256
    return engine


@pytest.mark.model
def test_engine_group_tokens_equal_fresh_prefills_at_qwen3_4b_attention() -> None:
    """Qwen3-4B's attention (32 query heads over 8 KV heads x 128): every probe row, its answer
    phase (copied out of its slot and written back) and the restarts run in group buffers and make
    the tokens of fresh prefills (`mlx-fresh`), also two rows at a time and with fewer slots than
    a cell's rows (requests wait for their slot); the closing counts say which path served them."""
    model = geometry_model("qwen3-4b", vocab=512, layers=2)
    reqs, follow = _cells(np.random.default_rng(5), 2, 12, 262, (60, 130, 262), 4, 4)
    group = _group_engine(model)
    runs = {"group": _run(group, reqs, follow, 4)}
    assert group.stats().rows_by_attention == {"group": 2 * len(reqs) - 2}
    for name, engine in (
        ("fresh", MlxEngine(model, [511], batch_size=16, reuse_prefixes=False)),
        ("two", _group_engine(model, batch_size=2)),
        ("few slots", _group_engine(model, group_slots=8)),
    ):
        runs[name] = _run(engine, reqs, follow, 4)
    tokens = {name: {k: r.tokens for k, r in run.items()} for name, run in runs.items()}
    assert tokens["group"] == tokens["fresh"] == tokens["two"] == tokens["few slots"]
    for key, res in runs["two"].items():
        np.testing.assert_allclose(res.logprobs, runs["group"][key].logprobs, atol=1e-5)


def test_engine_group_tokens_equal_fresh_prefills_on_the_tiny_and_hub_models(float_or_4bit):
    """The tiny float32 llama and the study's 4-bit hub checkpoints (tiny, their real layout): a
    model whose layers are all plain attention runs every row in group buffers with the tokens of
    fresh prefills; one with sliding-window layers (Gemma-4) is refused in one line when the
    group path is forced."""
    loaded = float_or_4bit
    eos = sorted(loaded.eos_ids)
    vocab = int(loaded.config.get("vocab_size") or len(loaded.tokenizer))
    if not MlxEngine(loaded.model, eos).group_eligible():
        assert loaded.alias.startswith("gemma4")  # sliding-window layers
        with pytest.raises(BtError, match="attention group"):
            MlxEngine(loaded.model, eos, attention="group")
        return
    reqs, follow = _cells(np.random.default_rng(7), 1, 10, 140, (40, 140), 4, 3, vocab)
    group = MlxEngine(loaded.model, eos, attention="group", batch_size=8)
    group.configure(group.plan(RowShape(300, shared_tokens=200)))
    fresh = MlxEngine(loaded.model, eos, batch_size=8, reuse_prefixes=False)
    out = {k: r.tokens for k, r in _run(group, reqs, follow, 3).items()}
    ref = {k: r.tokens for k, r in _run(fresh, reqs, follow, 3).items()}
    assert out == ref
    assert group.stats().rows_by_attention == {"group": len(out)}


@pytest.mark.model
def test_the_device_rule_and_the_memory_rule(monkeypatch) -> None:
    """On the CPU "auto" keeps today's paths (shared-prefix attention in numpy, measured faster
    there); on a GPU it runs rows in group buffers from GPU_GROUP_SHARED_TOKENS shared tokens on,
    as many cells as the memory budget holds whole (prefix + slots), else today's rule."""
    from breakthrough.engine import group_path

    model = geometry_model("qwen3-4b", vocab=64, layers=2)
    deep = RowShape(4096, shared_tokens=4096 - 1536)
    cpu = MlxEngine(model, [0], batch_size=8, memory_budget_bytes=0)
    assert cpu.plan(deep).attention == "shared"
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)
    gpu = MlxEngine(model, [0], batch_size=8, memory_budget_bytes=0)
    assert gpu.plan(deep).attention == "group"
    short = group_path.GPU_GROUP_SHARED_TOKENS - 1
    assert gpu.plan(RowShape(short + 1536, shared_tokens=short)).attention != "group"
    b = gpu.layout()
    shape = gpu._group_shape(deep)
    cell = b.prefix_cache(deep.shared_tokens, 0) + b.plain_per_token * (
        shape.slots * shape.slot_size + 32
    )
    two = MlxEngine(model, [0], batch_size=8, memory_budget_bytes=int(2.5 * cell))
    plan = two.plan(deep)
    assert plan.attention == "group" and plan.prefix_slots == 2
    tight = MlxEngine(model, [0], batch_size=8, memory_budget_bytes=int(0.5 * cell))
    assert tight.plan(deep).attention != "group"


@pytest.mark.model
def test_quantized_and_window_models_keep_their_paths() -> None:
    """`--kv-bits` rows attend row by row (their own path); forcing the group path on them is
    refused in one line."""
    model = geometry_model("qwen3-4b", vocab=64, layers=2)
    with pytest.raises(BtError, match="attention group"):
        MlxEngine(model, [0], attention="group", kv_bits=8)
    with pytest.raises(BtError, match="attention"):
        MlxEngine(model, [0], attention="fused")


def test_count_ops_stay_few_and_flat() -> None:
    """`bench/prefix_attention_step.py --count-ops`: the group path's non-view ops per layer are at
    most 6 + 4 x chunks, its attention calls equal its chunks, and neither grows with the prefix,
    at 16, 32 and 80 rows."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "prefix_attention_step.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--count-ops", "--slot-size", "256", "--paths", "group"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    group: dict[int, dict[int, tuple[int, int, int]]] = {}
    for line in out.splitlines():
        if line.startswith("count-ops path=group"):
            f = dict(kv.split("=") for kv in line.split()[1:])
            chunks = int(f["chunks"])
            group.setdefault(int(f["rows"]), {})[int(f["prefix"])] = (
                int(f["ops"]),
                int(f["sdpa"]),
                chunks,
            )
            assert int(f["ops"]) <= 6 + 4 * chunks and int(f["sdpa"]) == chunks, line
    assert sorted(group) == [16, 32, 80]
    for by_prefix in group.values():
        assert len(by_prefix) == 2 and len(set(by_prefix.values())) == 1


@pytest.mark.model  # builds models at run time (the bench's toy Qwen3-4B layout)
def test_the_gpu_check_runs_at_toy_size_on_the_cpu(tmp_path) -> None:
    """`bench/gpu_check.sh --device cpu --toy`: every step of the GPU check (the step bench with
    --check and --force-fused in float32 and bfloat16, --count-ops, bt against the plain loop and
    batch_generate with the bandwidth lines) runs at toy sizes, everything under $OUT."""
    import os

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(root / "bench" / "gpu_check.sh"), "--device", "cpu", "--toy"],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (tmp_path / "gpu_check.log").read_text()
    assert "step failed" not in log, log[-3000:]
    for dtype in ("float32", "bfloat16"):
        assert f"chunks 2, {dtype}, Device(cpu" in log
    assert log.count("batch invariance (group): 0 of 16 rows differ alone, 0 of 9") == 2
    assert "force_fused: refused on Device(cpu" in log  # MLX has no fused kernel on the CPU
    assert log.count("count-ops path=group") == 6
    assert re.search(r"batch_generate #1 .* bt / batch_generate \d+\.\d+x", log)
    assert re.search(r"reference #1 ", log) and "speed-up median" in log
    assert "copy bandwidth of Device(cpu" in log and "gpu_check done in" in log
