"""Issue 38: rows that point into one shared prefix attend over it together
(`engine.prefix_attention`), once per tile of rows and step, each over its own suffix apart,
combined exactly; a row's result never depends on the other rows in flight, and tokens equal
mlx-lm's per-row copies and fresh prefills."""

from __future__ import annotations

import numpy as np
import pytest
from models.tiny import geometry_model

from breakthrough.engine import mlx_compat, prefix_attention
from breakthrough.engine.contract import GenRequest, RowShape, SharedPrefix
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.engine.shared_kv import SharedRowCache

# mlx after breakthrough's engine: bt loads an optimised BLAS for MLX before MLX is imported
import mlx.core as mx  # noqa: E402  isort:skip

HEADS, Q_HEADS, DIM = 8, 32, 128  # Qwen3-4B's attention: 32 query heads over 8 KV heads
SCALE = DIM**-0.5
# (cell, prefix length, own positions) per row: two cells whose prefixes span several blocks,
# more rows of cell 0 than one tile holds, rows at different depths, rows with no prefix.
ROWS = [
    (0, 700, 5),
    (0, 300, 40),
    (0, 700, 5),
    (1, 137, 1),
    (None, 0, 60),
    (0, 10, 7),
    (1, 500, 3),
    (0, 600, 2),
    (0, 600, 2),
    (0, 256, 9),
    (0, 257, 1),
    (1, 500, 3),
    (0, 768, 4),
    (None, 0, 1),
]


def _bases(dtype, seed: int = 0) -> list[tuple]:
    """Two cells' prefix buffers ([1, heads, capacity, dim], capacities multiples of a block,
    as a `PrefixCache` holds them)."""
    rng = np.random.default_rng(seed)

    def kv(n: int):
        return mx.array(rng.standard_normal((1, HEADS, n, DIM)).astype(np.float32)).astype(dtype)

    return [(kv(768), kv(768)), (kv(512), kv(512))]


def _rows(bases, dtype, seed: int = 1) -> list[SharedRowCache]:
    """One row per entry of ROWS, lane = its index (so rows of a cell share tiles, and some
    of them a lane: those go to different tiles)."""
    rng = np.random.default_rng(seed)
    rows = []
    for lane, (cell, prefix, own) in enumerate(ROWS):
        if cell is None:
            row = SharedRowCache()
        else:
            k, v = bases[cell]
            row = SharedRowCache(k[..., :prefix, :], v[..., :prefix, :], (k, v))
        row.lane = lane
        row.reserve(own + 2)
        new = rng.standard_normal((2, 1, HEADS, own, DIM)).astype(np.float32)
        row.write(mx.array(new[0]).astype(dtype), mx.array(new[1]).astype(dtype))
        rows.append(row)
    return rows


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_a_row_attends_the_same_alone_and_among_other_cells_rows(dtype) -> None:
    """Batch invariance, bitwise: each row's attention is the same alone, in the whole batch,
    and in a shuffled half of it mixed with the other cell's rows; and it is the attention
    mlx-lm computes over the row's keys (float rounding apart)."""
    bases = _bases(dtype)
    rows = _rows(bases, dtype)
    rng = np.random.default_rng(2)
    queries = mx.array(rng.standard_normal((len(rows), Q_HEADS, 1, DIM)).astype(np.float32))
    queries = queries.astype(dtype)
    batch = prefix_attention.attend_shared(queries, rows, SCALE)
    mx.eval(batch)
    assert batch.shape == queries.shape and batch.dtype == dtype
    for i, row in enumerate(rows):
        alone = prefix_attention.attend_shared(queries[i : i + 1], [row], SCALE)
        assert mx.array_equal(alone, batch[i : i + 1]).item(), f"row {i} alone"
        keys, values = row.padded(0)
        mlx_lm = mlx_compat.mlx_attention(
            queries[i : i + 1], keys, values, cache=row, scale=SCALE, mask=None
        )
        tolerance = 2e-2 if dtype == mx.bfloat16 else 1e-5
        assert mx.allclose(alone, mlx_lm, atol=tolerance, rtol=tolerance).item(), f"row {i}"
    some = [int(i) for i in rng.permutation(len(rows))[: len(rows) // 2 + 1]]
    mixed = prefix_attention.attend_shared(queries[mx.array(some)], [rows[i] for i in some], SCALE)
    for place, i in enumerate(some):
        assert mx.array_equal(mixed[place : place + 1], batch[i : i + 1]).item(), f"row {i}"


def test_a_row_takes_its_lanes_place_and_an_anchors_samples_share_a_tile() -> None:
    """A BLAS rounds a product's row by its place among the rows (OpenBLAS on AMD Zen), so a
    row's place in its tile is its lane's, whatever else is in flight: the four samples of an
    anchor (lanes 0-3) fill one tile, a top-up's (4-7) the next, two rows of one lane never
    share a tile, and the deepest rows of each place come first."""

    class Row:
        def __init__(self, lane: int, prefix_len: int) -> None:
            self.lane, self.prefix_len = lane, prefix_len

    rows = [Row(lane, 512) for lane in range(8)] + [Row(1, 700), Row(2, 100)]
    tiles = prefix_attention._tiles(list(range(len(rows))), rows)
    assert tiles == [[0, 8, 2, 3], [4, 1, 6, 7], [None, 5, 9, None]]
    for tile in tiles:
        assert all(
            i is None or rows[i].lane % prefix_attention.TILE_ROWS == p for p, i in enumerate(tile)
        )
    assert prefix_attention._tiles([9], rows) == [[None, None, 9, None]]


def test_a_tile_holds_rows_of_one_buffer_and_one_number_of_blocks() -> None:
    """MLX's CUDA matmul rounds a batch's products by the batch's size (heads x blocks), so
    rows share a tile only when they reach the same number of blocks of the same buffer: a
    row's products are then the same whatever else is in flight. Rows with no shared buffer
    attend alone."""
    rows = _rows(_bases(mx.float32), mx.float32)
    tiles, alone = prefix_attention._plan_tiles(rows)
    assert sorted(alone) == [i for i, (cell, _, _) in enumerate(ROWS) if cell is None]
    for tile in tiles:
        present = [rows[i] for i in tile if i is not None]
        assert len({id(r.base[0]) for r in present}) == 1
        assert len({-(-r.prefix_len // prefix_attention.BLOCK) for r in present}) == 1
    assert sorted(i for tile in tiles for i in tile if i is not None) == sorted(
        i for i, (cell, _, _) in enumerate(ROWS) if cell is not None
    )


def test_a_tile_reads_its_prefix_once_without_copying_it() -> None:
    """The prefix is read in place: `_block_view` is a view of the buffer's storage (its blocks
    are the buffer's positions), and one tile covers up to TILE_ROWS rows of one buffer."""
    keys, _ = _bases(mx.float32)[0]
    blocks = prefix_attention._block_view(keys, 3)
    assert blocks.shape == (HEADS, 3, prefix_attention.BLOCK, DIM)
    assert mx.array_equal(blocks[:, 1], keys[0, :, 256:512, :]).item()
    bias = prefix_attention._prefix_bias((700, 10), 3, 4)
    assert bias.shape == (1, 3, 8, prefix_attention.BLOCK)
    assert (bias[0, 2, :4, : 700 - 512] == 0).all() and (bias[0, 2, :4, 700 - 512 :] < 0).all()
    assert (bias[0, 0, 4:, :10] == 0).all() and (bias[0, 0, 4:, 10:] < 0).all()


def _cells(rng, n_cells: int, prompt_len: int, trace_len: int, anchors, branches: int, tokens):
    """Probe requests at `anchors` of `n_cells` cells, plus one restart per cell."""
    reqs = []
    for c in range(n_cells):
        prompt = [int(t) for t in rng.integers(1, 500, prompt_len)]
        trace = [int(t) for t in rng.integers(1, 500, trace_len)]
        shared = SharedPrefix(
            f"cell{c}",
            tuple(prompt + trace),
            tuple([len(prompt)] + [len(prompt) + a for a in anchors]),
        )
        reqs += [
            GenRequest(
                f"c{c}p{a}:{b}",
                prompt + trace[:a],
                tokens,
                seed=100 * a + b + c,
                shared_prefix=shared,
            )
            for a in anchors
            for b in range(branches)
        ]
        reqs.append(GenRequest(f"c{c}r", prompt, tokens, seed=7 + c, shared_prefix=shared))
    return reqs


@pytest.mark.model  # builds its model at run time (tests/conftest.py)
def test_engine_tokens_equal_fresh_prefills_at_qwen3_4b_attention(monkeypatch) -> None:
    """Qwen3-4B's attention (8 KV heads x 128, 32 query heads; 4 of its 36 layers, each as the
    study model's), two cells whose prefixes span two blocks: rows sharing their cell's prefix
    make exactly the tokens of fresh prefills (`mlx-fresh`, today's reference path), and the
    same tokens two rows at a time."""
    model = geometry_model("qwen3-4b", vocab=512, layers=4)
    assert model.args.num_attention_heads == 32
    reqs = _cells(np.random.default_rng(5), 2, 12, 262, (60, 262), 2, 5)
    tiles = {"n": 0}
    original = prefix_attention._tile_scores

    def counted(*args):
        tiles["n"] += 1
        return original(*args)

    monkeypatch.setattr(prefix_attention, "_tile_scores", counted)
    shared = MlxEngine(model, [511], batch_size=16, share_prefixes=True)
    runs = {"shared": {r.key: r for r in shared.generate(reqs)}}
    assert tiles["n"] > 0 and shared.plan(RowShape(270, shared_tokens=262)).groups_by_prefix
    for name, kwargs in (
        ("fresh", {"reuse_prefixes": False}),
        ("two", {"share_prefixes": True, "batch_size": 2}),
    ):
        engine = MlxEngine(model, [511], **{"batch_size": 16, **kwargs})
        runs[name] = {r.key: r for r in engine.generate(reqs)}
    tokens = {name: {k: r.tokens for k, r in run.items()} for name, run in runs.items()}
    assert tokens["shared"] == tokens["fresh"] == tokens["two"]
    assert all(len(t) == 5 for t in tokens["shared"].values())
    for key, res in runs["two"].items():
        np.testing.assert_allclose(res.logprobs, runs["shared"][key].logprobs, atol=1e-5)


@pytest.mark.model
def test_sharing_follows_the_measured_rule() -> None:
    """Rows share their prefix (and attend over it together) where a row's attention over it,
    query heads x positions, reaches SHARED_ATTENTION_SCORES; otherwise they keep mlx-lm's
    per-row copies while memory allows (faster for a few heads over short prefixes)."""
    from breakthrough.engine.memory_plan import SHARED_ATTENTION_SCORES

    study = MlxEngine(
        geometry_model("qwen3-4b", vocab=64), [0], batch_size=8, memory_budget_bytes=0
    )
    plan = study.plan(RowShape(1200, shared_tokens=SHARED_ATTENTION_SCORES // 32))
    assert plan.share_prefixes and plan.groups_by_prefix
    few = MlxEngine(geometry_model("qwen3-4b", vocab=64, heads=8), [0], memory_budget_bytes=0)
    plan = few.plan(RowShape(1200, shared_tokens=1150))
    assert not plan.share_prefixes and not plan.groups_by_prefix
