"""Issue 28: the KV memory of the study's models at the study's context lengths.

Random-weight models with the study models' KV geometry (Qwen3-4B: 36 layers x 8 KV heads x
128; Ministral-3 3B: 26 x 8 x 128; built through mlx-lm's own qwen3 classes,
`models.tiny.geometry_model` with hidden size 64: no cache and no memory rule reads it),
the engine's own memory rule (`MlxEngine.plan`, `prefix_cache.CacheBytes`) and the
engine's real allocations."""

from __future__ import annotations

import numpy as np
import pytest
from models.tiny import STUDY_GEOMETRIES, geometry_model

from breakthrough.engine.contract import EnginePlan, GenRequest, RowShape, SharedPrefix
from breakthrough.engine.memory import GiB, auto_budget
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.engine.prefix_cache import cache_bytes
from breakthrough.engine.shared_kv import SharedBatchCache, SharedRowCache
from breakthrough.protocol import DEFAULT

# mlx after breakthrough's engine: bt loads an optimised BLAS for MLX before MLX is imported
import mlx.core as mx  # noqa: E402  isort:skip
from mlx_lm.models.cache import BatchKVCache, KVCache  # noqa: E402  isort:skip

# the residual stream's width: no cache holds it and no memory rule reads it (4x cheaper matmuls)
LEAN_HIDDEN = 64

PROMPT, CLOSE = 200, 3  # a chat prompt and a forced close, in tokens
B, ANSWER = DEFAULT.budget, DEFAULT.answer_budget  # 1,024 and 512


@pytest.fixture(scope="module", params=sorted(STUDY_GEOMETRIES))
def bf16_geometry(request):
    """(name, model) in bfloat16: the KV dtype on Apple silicon."""
    return request.param, geometry_model(
        request.param, vocab=1024, dtype="bfloat16", hidden=LEAN_HIDDEN
    )


def _probe(engine: MlxEngine, t: int) -> EnginePlan:
    """The engine's plan for probes at anchor t (its prefix held once), applied."""
    shared = PROMPT + t
    plan = engine.plan(RowShape(shared + B + CLOSE + ANSWER, shared_tokens=shared))
    engine.configure(plan)
    return plan


def test_capacity_table_at_the_study_geometry(bf16_geometry) -> None:
    """The issue's table from the engine's own rule: one row = prompt + t + B + close + answer,
    of which prompt + t is the cell's prefix, held once. At 24 GB, t = 8k admits >= 16 rows of
    4-branch probes (4 before), t = 16k >= 8 (2 before), restarts at 8k >= 12 (4 before); the
    4 GB that refused t >= 4k before admits rows at every depth."""
    name, model = bf16_geometry
    per_token = cache_bytes(model).plain_per_token
    g = STUDY_GEOMETRIES[name]
    assert per_token == g["layers"] * g["kv_heads"] * g["head_dim"] * 2 * 2  # K and V, bf16
    table = {}
    for gb in (4, 16, 24):
        engine = MlxEngine(model, [0], batch_size=256, memory_budget_bytes=gb * GiB)
        table[gb] = [_probe(engine, t).probe_rows for t in (1024, 4096, 8192, 16384)]
        restarts = RowShape(1, restart_tokens=PROMPT + 8192 + ANSWER)  # restarts at 8k
        table[gb].append(engine.plan(restarts).restart_rows)
    print(f"\n{name}: rows at t = 1k, 4k, 8k, 16k; restarts at 8k: {table}")
    rows_8k, rows_16k, restarts_8k = table[24][2], table[24][3], table[24][4]
    assert rows_8k >= 16 and rows_16k >= 8 and restarts_8k >= 12
    assert min(table[4][:4]) >= 1  # the old default refused t = 4k, 8k and 16k


def test_auto_never_refuses_a_study_cell(bf16_geometry) -> None:
    """`--memory-gb auto` on a 16 GB Mac (Metal's recommended working set about 10.7 GB) admits
    the deepest anchor of the study (t = 16k) with more than one row."""
    _, model = bf16_geometry
    auto = auto_budget(model, offered=(int(10.7 * GiB), "Metal recommended working set"))
    engine = MlxEngine(model, [0], batch_size=32, memory_budget_bytes=auto.budget_bytes)
    assert _probe(engine, 16384).probe_rows >= 2
    assert "Metal recommended working set" in auto.describe()


def test_shared_batch_cache_hands_attention_the_same_keys_as_batch_kv_cache() -> None:
    """Rows with prefixes of different lengths (views of one buffer) and their own suffixes: the
    keys, values and mask the attention sees equal mlx-lm's BatchKVCache's, bit for bit."""
    rng = np.random.default_rng(0)
    heads, dim = 2, 8
    trace = mx.array(rng.standard_normal((1, heads, 40, dim)).astype(np.float32))
    lengths, own = [40, 25, 25, 7], [3, 5, 1, 9]
    rows, plain = [], []
    for n, m in zip(lengths, own, strict=True):
        mine = mx.array(rng.standard_normal((1, heads, m, dim)).astype(np.float32))
        row = SharedRowCache(trace[..., :n, :], trace[..., :n, :] * 2)
        row.reserve(m + 4)
        row.update_and_fetch(mine, mine * 2)
        rows.append(row)
        full = KVCache()
        full.update_and_fetch(
            mx.concatenate([trace[..., :n, :], mine], axis=2),
            mx.concatenate([trace[..., :n, :] * 2, mine * 2], axis=2),
        )
        plain.append(full)
    shared, batch = SharedBatchCache(rows), BatchKVCache.merge(plain)
    mask = batch.make_mask(1)  # what the next step's attention sees: its keys after the write
    assert mx.array_equal(shared.make_mask(1), mask).item()
    assert shared.offset.tolist() == batch.offset.tolist()
    new = mx.array(rng.standard_normal((4, heads, 1, dim)).astype(np.float32))
    (k1, v1), (k2, v2) = shared.update_and_fetch(new, -new), batch.update_and_fetch(new, -new)
    valid = np.asarray(mask)[:, 0, 0, :]
    for i in range(4):
        keep = np.asarray(valid[i]).astype(bool)
        assert np.array_equal(np.asarray(k1)[i][:, keep], np.asarray(k2)[i][:, keep])
        assert np.array_equal(np.asarray(v1)[i][:, keep], np.asarray(v2)[i][:, keep])
    assert k1.shape == k2.shape
    # filtering and extending move rows only; a row's own buffer was allocated once
    shared.filter([2, 0])
    assert shared.offset.tolist() == [lengths[2] + own[2] + 1, lengths[0] + own[0] + 1]
    assert all(r.keys.shape[2] == m + 4 for r, m in zip(rows, own, strict=True))


@pytest.fixture(scope="module")
def fp32_qwen3():
    """Qwen3-4B's KV cache (36 x 8 x 128) with 8 query heads: MLX's CPU attention is unfused, so
    the study's 32 would make every prefill four times slower without changing the cache."""
    return geometry_model("qwen3-4b", vocab=512, heads=8, hidden=LEAN_HIDDEN)


def _probes(trace: list[int], prompt: list[int], anchors, branches: int, max_tokens: int):
    shared = SharedPrefix(
        "cell", tuple(prompt + trace), tuple([len(prompt)] + [len(prompt) + a for a in anchors])
    )
    return [
        GenRequest(
            f"p{a}:{b}", prompt + trace[:a], max_tokens, seed=100 * a + b, shared_prefix=shared
        )
        for a in anchors
        for b in range(branches)
    ]


def test_branches_hold_one_copy_of_their_prefix_and_equal_fresh_prefills(fp32_qwen3) -> None:
    """Two branches at each of two anchors of a 400-token trace on the Qwen3-4B geometry: the
    engine's peak allocation stays under two copies of the prefix (the old path held one per
    branch plus the prefix cache: five), and every token equals a fresh prefill of its prompt
    (`mlx-fresh`) and a run in which the budget admits only two rows at a time."""
    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(1, 500, 16)]
    trace = [int(t) for t in rng.integers(1, 500, 384)]
    reqs = _probes(trace, prompt, (256, 384), 2, 4)
    layout = cache_bytes(fp32_qwen3)
    prefix = layout.prefix_cache(len(prompt) + len(trace), 3)
    mx.eval(fp32_qwen3.parameters())
    mx.clear_cache()
    before = mx.get_active_memory()
    engine = MlxEngine(fp32_qwen3, [511], batch_size=8, share_prefixes=True)
    shared = {r.key: r.tokens for r in engine.generate(reqs)}
    assert engine.stats().rows_in_flight_max == 4
    assert engine.peak_memory_bytes - before < 2 * prefix
    fresh = MlxEngine(fp32_qwen3, [511], batch_size=8, reuse_prefixes=False)
    assert {r.key: r.tokens for r in fresh.generate(reqs)} == shared
    copies = MlxEngine(fp32_qwen3, [511], batch_size=8, share_prefixes=False)  # mlx-lm's cache
    assert {r.key: r.tokens for r in copies.generate(reqs)} == shared
    # a budget that holds the prefix and two rows: admitted two at a time, the same tokens
    longest = len(prompt) + 384 + 5
    row = layout.own_row(5) + layout.step_transient(1, longest)
    tight = MlxEngine(
        fp32_qwen3,
        [511],
        batch_size=8,
        share_prefixes=True,
        memory_budget_bytes=int(prefix + 2.5 * row),
    )
    assert {r.key: r.tokens for r in tight.generate(reqs)} == shared
    assert tight.stats().rows_in_flight_max == 2


@pytest.fixture(scope="module")
def quantized_probes(fp32_qwen3):
    """The quantized tests' probes and their results on the model's own float32 cache (the
    same for both bit widths: computed once)."""
    rng = np.random.default_rng(2)
    prompt = [int(t) for t in rng.integers(1, 500, 16)]
    trace = [int(t) for t in rng.integers(1, 500, 96)]
    reqs = _probes(trace, prompt, (64, 96), 2, 6)
    plain = {r.key: r for r in MlxEngine(fp32_qwen3, [511], batch_size=8).generate(reqs)}
    return reqs, plain


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_kv_keeps_the_engine_guarantees(fp32_qwen3, quantized_probes, bits) -> None:
    """`--kv-bits`: a reused prefix equals a fresh prefill and a row alone equals it in a batch,
    with the cache quantized; it takes (bits + 1)/32 of the float32 cache (packed values
    plus a float32 scale and bias per 64), and it changes the model's distribution (so a run
    records it)."""
    reqs, plain = quantized_probes
    runs = {}
    for name, kwargs in (
        ("shared", {}),
        ("fresh", {"reuse_prefixes": False}),
        ("alone", {"batch_size": 1}),
    ):
        engine = MlxEngine(fp32_qwen3, [511], **{"batch_size": 8, "kv_bits": bits, **kwargs})
        runs[name] = {r.key: r for r in engine.generate(reqs)}
    tokens = {k: {key: r.tokens for key, r in v.items()} for k, v in runs.items()}
    assert tokens["shared"] == tokens["fresh"] == tokens["alone"]
    full = cache_bytes(fp32_qwen3).plain_per_token
    assert cache_bytes(fp32_qwen3, bits).plain_per_token == pytest.approx(full * (bits + 1) / 32)
    assert any(not np.array_equal(plain[k].logprobs, runs["shared"][k].logprobs) for k in plain)


@pytest.mark.parametrize("bits", [8, 4])
def test_a_quantized_row_computes_what_it_computes_alone(fp32_qwen3, quantized_probes, bits):
    """Issue 52: under `--kv-bits` a row's log-probs and entropies, not only its tokens, are
    bitwise those of `--batch-size 1` at batch sizes 3 and 8 (with restarts from an empty
    prefix beside the probes). The batched projections rounded a row's new key by the batch
    (OpenBLAS on Zen), and quantization moved that last bit to another level: a sampled token
    followed `--batch-size`. Each row now runs its forward alone (`shared_kv.rows_apart`)."""
    reqs, _ = quantized_probes
    rng = np.random.default_rng(4)
    prompt = [int(t) for t in rng.integers(1, 500, 12)]
    restarts = [GenRequest(f"r{b}", prompt, 6, seed=900 + b) for b in range(3)]
    runs = {}
    for size in (1, 3, 8):
        engine = MlxEngine(fp32_qwen3, [511], batch_size=size, kv_bits=bits)
        runs[size] = {r.key: r for r in engine.generate(reqs + restarts)}
    for key, alone in runs[1].items():
        for size in (3, 8):
            other = runs[size][key]
            assert other.tokens == alone.tokens, (key, size)
            assert np.array_equal(other.logprobs, alone.logprobs), (key, size)
            assert np.array_equal(other.entropies, alone.entropies), (key, size)


def test_kv_bits_refuses_a_head_dimension_it_cannot_quantize(tiny_model) -> None:
    from breakthrough.errors import BtError

    with pytest.raises(BtError, match="--kv-bits: this model's head dimension"):
        MlxEngine.from_loaded(tiny_model, kv_bits=8)
    with pytest.raises(BtError, match="expected 4 or 8"):
        MlxEngine(geometry_model("qwen3-4b", vocab=64, heads=8, hidden=LEAN_HIDDEN), [0], kv_bits=3)


def test_a_run_records_its_kv_bits_and_never_mixes_them(tmp_path) -> None:
    from breakthrough.errors import BtError
    from breakthrough.pipeline.cell_loop import continuation_identity, run_kv_bits

    assert "kv_bits" not in continuation_identity(False)  # runs continued before keep theirs
    assert continuation_identity(False, 8)["kv_bits"] == 8
    assert run_kv_bits({}, None, tmp_path) is None
    assert run_kv_bits({"continuation": continuation_identity(False, 4)}, None, tmp_path) == 4
    with pytest.raises(BtError, match="--kv-bits 8: the run was continued with the model's own"):
        run_kv_bits({"continuation": continuation_identity(False)}, 8, tmp_path)


def test_rows_share_their_prefix_where_it_pays_or_memory_needs_it(bf16_geometry) -> None:
    """At the study models' attention (32 query heads over prefixes of 1k+) rows always share
    their prefix's one copy (`prefix_attention` reads it once per tile of rows: faster than
    per-row copies, README "Memory and speed at the study's scale"), whatever the budget. With
    few query heads over a short prefix they keep mlx-lm's per-row copies while the budget
    holds `--batch-size` of them, and share when it cannot."""
    name, model = bf16_geometry
    roomy = MlxEngine(model, [0], batch_size=4, memory_budget_bytes=64 * GiB)
    assert roomy.row_attention
    plan = _probe(roomy, 1024)
    assert plan.probe_rows == 4
    assert plan.share_prefixes and plan.admits_by_memory and plan.groups_by_prefix
    assert roomy.share_prefixes  # configured
    few = geometry_model(name, vocab=64, heads=8, dtype="bfloat16", hidden=LEAN_HIDDEN)
    roomy_few = MlxEngine(few, [0], batch_size=4, memory_budget_bytes=64 * GiB)
    plan = _probe(roomy_few, 1024)
    assert plan.probe_rows == 4
    assert not plan.share_prefixes and not plan.admits_by_memory and not roomy_few.share_prefixes
    tight = MlxEngine(few, [0], batch_size=32, memory_budget_bytes=24 * GiB)
    planned = tight.plan(RowShape(PROMPT + 16384 + B + CLOSE + ANSWER, PROMPT + 16384))
    assert not tight.share_prefixes  # planning changes nothing
    plan = _probe(tight, 16384)
    assert plan == planned and plan.probe_rows >= 8
    assert plan.share_prefixes and plan.admits_by_memory and tight.share_prefixes
    assert MlxEngine(model, [0], kv_bits=8).share_prefixes  # quantized rows are always shared


def test_quantized_rows_continue_a_kept_state(fp32_qwen3) -> None:
    """An answer phase (`follows`) continues its probe's kept quantized row: the row's buffers
    are (packed, scales, biases) triples, which `reserve` sizes like arrays (issue 40: this
    crashed with "'tuple' object has no attribute 'shape'"), with the tokens of fresh prefills."""
    rng = np.random.default_rng(3)
    prompt = [int(t) for t in rng.integers(1, 500, 16)]
    trace = [int(t) for t in rng.integers(1, 500, 64)]
    shared = SharedPrefix("cell", tuple(prompt + trace), (len(prompt), len(prompt) + 64))
    probe = GenRequest("p", prompt + trace, 4, seed=1, shared_prefix=shared, keep_state=True)
    engine = MlxEngine(fp32_qwen3, [511], batch_size=4, kv_bits=8)
    (first,) = engine.generate([probe])
    more = prompt + trace + first.tokens + [5, 6]
    (answer,) = engine.generate([GenRequest("a", more, 4, seed=2, follows="p")])
    assert answer.cached_tokens >= len(prompt) + len(trace)
    fresh = MlxEngine(fp32_qwen3, [511], batch_size=4, kv_bits=8, reuse_prefixes=False)
    (again,) = fresh.generate([GenRequest("a", more, 4, seed=2)])
    assert answer.tokens == again.tokens
