"""bt's decode loop (`decode_batch.DecodeBatch`, the model's public forward on bt's caches) hands
each row a `StepStats` per token: named fields, the instrumentation columns only when the batch
is instrumented, the top ids only when asked; the same on the CPU branch (numpy) and the
MLX-graph branch (run on this CPU). Rows stop at their cap or a stop sequence of generated
tokens, and leave with their cache when they keep it, and free of it when they do not."""

from __future__ import annotations

import gc

import mlx.core as mx
import pytest

from breakthrough.engine import batch_step
from breakthrough.engine.batch_step import RowSpec, StepStats
from breakthrough.engine.decode_batch import DecodeBatch, NewRow, StopMatcher
from breakthrough.engine.mlx_compat import make_prompt_cache
from breakthrough.engine.prefix_cache import prefill
from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS
from breakthrough.protocol import Sampling

STEPS = 6


def _row(
    model, uid: int, prompt: list[int], spec: RowSpec, cap: int, stop=(), keeps_cache=True
) -> NewRow:
    """A row as the engine hands it over: prefilled at batch 1 up to its prompt's last id."""
    cache = make_prompt_cache(model)
    prefill(model, cache, prompt[:-1])
    return NewRow(uid, prompt[-1], spec, cache, cap, StopMatcher(stop), keeps_cache=keeps_cache)


def _stats(model, specs: list[RowSpec]) -> dict[int, list[StepStats]]:
    batch = DecodeBatch(model)
    batch.add([_row(model, i, [1, 2, 3 + i], s, STEPS) for i, s in enumerate(specs)])
    out: dict[int, list[StepStats]] = {i: [] for i in range(len(specs))}
    try:
        while len(batch):
            for resp in batch.step():
                out[resp.uid].append(resp.stats)
    finally:
        batch.close()
    return out


@pytest.mark.parametrize("branch", ["cpu", "accelerator"])
def test_each_token_gets_named_statistics(tiny_model, monkeypatch, branch: str) -> None:
    if branch == "accelerator":
        monkeypatch.setattr(batch_step.mx, "default_device", lambda: "accelerator")
    plain = _stats(
        tiny_model.model, [RowSpec(1, Sampling()), RowSpec(2, Sampling(temperature=0.0))]
    )
    for rows in plain.values():
        assert len(rows) == STEPS
        for s in rows:
            assert isinstance(s, StepStats) and s.logprob <= 0 and s.entropy >= 0
            assert s.signals == [] and s.top_ids is None and s.top_logprobs is None
    greedy = list(plain.values())[1]
    assert all(s.sampling_entropy == 0 for s in greedy)  # greedy rows: a point mass

    rich = _stats(
        tiny_model.model,
        [RowSpec(3, Sampling(), top=4, instrument=True), RowSpec(4, Sampling(), instrument=True)],
    )
    for rows in rich.values():
        for s in rows:
            assert len(s.signals) == len(SIGNAL_FIELDS) + len(HIDDEN_FIELDS)
            assert len(s.top_ids) == len(s.top_logprobs) == 4  # the batch's largest `top`
            assert s.top_logprobs == sorted(s.top_logprobs, reverse=True)
            assert s.top_logprobs[0] >= s.logprob


def test_rows_stop_at_their_cap_or_a_generated_stop_sequence_and_leave_with_their_cache(
    tiny_model,
) -> None:
    """A row finishes with "length" at its cap, or "stop" when its generated tokens end with a
    stop sequence (never matched against the prompt); finished rows leave the batch with a cache
    holding prompt + tokens (the token drawn one step ahead is never fed), and a row
    joining mid-run gets the tokens it gets alone."""
    model = tiny_model.model
    greedy = Sampling(temperature=0.0)

    def run(rows: list[NewRow], late: list[NewRow] = ()) -> dict:
        batch, out, ended = DecodeBatch(model), {}, {}
        batch.add(rows)
        try:
            steps = 0
            while len(batch) or late:
                if steps == 2 and late:
                    batch.add(list(late))
                    late = []
                for resp in batch.step():
                    out.setdefault(resp.uid, []).append(resp.token)
                    if resp.finish_reason is not None:
                        ended[resp.uid] = (resp.finish_reason, resp.cache)
                steps += 1
        finally:
            batch.close()
        return out, ended

    prompt = [1, 2, 3, 4]
    alone, ended = run([_row(model, 0, prompt, RowSpec(5, greedy), 7)])
    tokens = alone[0]
    assert len(tokens) == 7 and ended[0][0] == "length"
    assert ended[0][1][0].offset == len(prompt) + 7  # each token read was fed; the next never
    stop = tuple(tokens[2:4])
    got, ended = run(
        [
            _row(model, 0, prompt, RowSpec(5, greedy), 7, stop=[stop]),
            _row(model, 1, prompt + list(stop), RowSpec(5, greedy), 3, stop=[stop]),
        ],
        late=[_row(model, 2, prompt, RowSpec(5, greedy), 7)],
    )
    first = next(i for i in range(2, 7) if tuple(tokens[i - 1 : i + 1]) == stop)
    assert got[0] == tokens[: first + 1] and ended[0][0] == "stop"
    assert ended[1][0] == "length" and len(got[1]) == 3  # its prompt's ending never matched
    assert got[2] == tokens  # joined late, between steps: the tokens it gets alone


@pytest.mark.parametrize("keeps_cache", [False, True])
def test_a_finished_row_frees_its_cache_unless_it_keeps_it(tiny_model, keeps_cache) -> None:
    """A finished row's `StepToken` carries its cache only when the row asked to keep it: a
    cache handed back and held by the caller (the engine holds a step's tokens while it stores
    them) keeps the row's buffers alive, which the engine's memory plan has already released
    for the next rows it admits."""
    model = tiny_model.model
    gc.collect()
    before = mx.get_active_memory()
    greedy = Sampling(temperature=0.0)
    prompt = [1 + (i % 50) for i in range(400)]
    rows = [_row(model, i, prompt, RowSpec(i, greedy), 3, keeps_cache=keeps_cache) for i in (0, 1)]
    held = sum(layer.nbytes for row in rows for layer in row.cache)
    batch = DecodeBatch(model)
    batch.add(rows)
    del rows
    ended = []
    while len(batch):
        ended += [resp for resp in batch.step() if resp.finish_reason is not None]
    batch.close()
    gc.collect()
    left = mx.get_active_memory() - before
    assert len(ended) == 2
    if keeps_cache:
        assert all(resp.cache is not None for resp in ended)
        assert left >= held // 2  # the two rows' caches, still alive in the tokens held
    else:
        assert left < held // 8  # gone with the rows, though their last tokens are held
        assert all(resp.cache is None for resp in ended)


def test_a_removed_row_leaves_and_the_others_go_on(tiny_model) -> None:
    model = tiny_model.model
    spec = lambda: RowSpec(9, Sampling(temperature=0.0))  # noqa: E731
    alone = _stats_tokens(model, [_row(model, 0, [1, 2, 3], spec(), 6)])
    batch = DecodeBatch(model)
    batch.add([_row(model, 0, [1, 2, 3], spec(), 6), _row(model, 1, [3, 2, 1], spec(), 6)])
    out: dict[int, list[int]] = {0: [], 1: []}
    batch.step()
    batch.remove([1])
    while len(batch):
        for resp in batch.step():
            out[resp.uid].append(resp.token)
    batch.close()
    assert out[1] == [] and out[0] == alone[0]


def _stats_tokens(model, rows: list[NewRow]) -> dict[int, list[int]]:
    batch = DecodeBatch(model)
    batch.add(rows)
    out: dict[int, list[int]] = {r.uid: [] for r in rows}
    while len(batch):
        for resp in batch.step():
            out[resp.uid].append(resp.token)
    batch.close()
    return out


@pytest.mark.parametrize("arch", ["gemma4_text", "ministral3", "qwen3", "qwen3_5"])
@pytest.mark.parametrize("attention", ["copies", "shared"])
def test_every_row_the_engine_builds_joins_as_a_batch_layer_cache(
    architecture_models, arch: str, attention: str
) -> None:
    """The decode loop calls only `BatchLayerCache` between forwards: the rows `MlxEngine._start`
    builds for each study architecture (sliding-window, recurrent and plain attention layers,
    as copies or pointing into a shared prefix) join as batch layers that have it, and two
    joined batches run a step together."""
    from breakthrough.engine.batch_cache import BatchLayerCache, join_rows
    from breakthrough.engine.contract import GenRequest, SharedPrefix
    from breakthrough.engine.mlx_backend import MlxEngine

    loaded = architecture_models[arch]
    engine = MlxEngine.from_loaded(loaded, attention=attention, batch_size=4)
    trace = list(range(5, 45))
    shared = SharedPrefix("cell", trace, starts=[8, 24])
    rows = []
    for i, cut in enumerate((24, 40)):
        req = GenRequest(f"r{i}", trace[:cut], 4, seed=i, shared_prefix=shared)
        cache, feed, _, _ = engine._start(req)
        rows.append((cache, feed))
    first, second = join_rows([rows[0][0]]), join_rows([rows[1][0]])
    assert all(isinstance(layer, BatchLayerCache) for layer in first + second)
    for layer, more in zip(first, second, strict=True):
        layer.extend(more)
    batch = DecodeBatch(loaded.model)
    batch.cache = first  # the two rows, joined as the loop joins them
    batch.specs = [RowSpec(0, Sampling()), RowSpec(1, Sampling())]
    logits, _ = batch.sampler.forward(
        batch.cache, mx_ids([feed[-1] for _, feed in rows]), with_hidden=False
    )
    assert logits.shape[0] == 2
    assert [type(layer.extract(1)) for layer in first] == [type(layer) for layer in rows[1][0]]


def mx_ids(ids: list[int]):
    import mlx.core as mx

    return mx.array(ids, dtype=mx.uint32)
