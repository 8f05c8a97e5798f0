"""Continuations from a cut KV cache equal the reference's fresh-prefill two-stage procedure."""

from __future__ import annotations

import pytest
from fresh_references import greedy_references

from breakthrough.engine.contract import GenRequest, SharedPrefix
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.models.loading import load_model
from breakthrough.pipeline.branches import Branch, BranchRunner, close_reasoning, reference_branch
from breakthrough.protocol import DEFAULT, Sampling


@pytest.fixture(scope="module", params=["plain", "qwen"])
def setup(request, tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), family=request.param)
    engine = MlxEngine.from_loaded(loaded, batch_size=8)
    from breakthrough.models.families import build_prompt_ids

    prompt = build_prompt_ids(loaded.tokenizer, loaded.family, "What is 2+2?")
    (base,) = engine.generate([GenRequest(key="b", prompt=prompt, max_tokens=160, seed=11)])
    return loaded, engine, prompt, base.tokens


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_cut_cache_continuation_equals_fresh_prefill(setup, temperature) -> None:
    loaded, engine, prompt, trace = setup
    protocol = DEFAULT.with_overrides(
        budget=12, answer_budget=6, sampling=Sampling(temperature=temperature)
    )
    engine = MlxEngine.from_loaded(loaded, batch_size=8)
    fresh = MlxEngine.from_loaded(loaded, batch_size=1, reuse_prefixes=False)
    shared = SharedPrefix("cell", tuple(prompt + trace))
    runner = BranchRunner(engine, loaded, prompt, trace, protocol, shared)
    branches = [
        Branch(f"k{c}:{i}", "probe", c, 12, i, 1000 + 7 * c + i, c)
        for c in (1, 40, 97, 160)
        for i in range(2)
    ]
    got = runner.run(branches)
    reference = greedy_references(fresh, loaded, prompt, trace, protocol)  # reference_branch
    # One prefill of prompt + trace for all 8 branches, then at most the re-fed last prefix token
    # of each reasoning phase and the last reasoning token + forced close of each answer phase.
    refed = sum(1 + 1 + r.extra["inserted_tokens"] for r in got)
    assert len(prompt) + len(trace) < engine.prefill_tokens <= len(prompt) + len(trace) + refed
    for res in got:
        b = res.branch
        want = reference(b.cut, 12, b.seed)
        assert res.tokens == want, b.key
        assert len(res.logprobs) == len(res.tokens) - b.cut
        assert res.finish_reason == "answer_reserve" or res.tokens[-1] in loaded.eos_ids
        if loaded.family.name == "qwen" and res.extra["reasoning_finish"] != "stop_sequence":
            assert res.extra["forced_close"] and res.extra["inserted_tokens"] > 0


def test_close_reasoning_rules() -> None:
    eos = frozenset({2})
    assert close_reasoning([5, 6, 7], "stop_sequence", eos, [9]) == ([5, 6, 7], [], 0)
    assert close_reasoning([5, 6, 2], "eos", eos, [9, 10]) == ([5, 6], [9, 10], 1)
    assert close_reasoning([5, 6], "length", eos, [9]) == ([5, 6], [9], 0)


def test_snapshot_path_for_untrimmable_caches(setup, monkeypatch) -> None:
    """Caches that cannot be cut by slicing (e.g. sliding-window layers) are served from
    snapshots taken during the one prefill, extended forward: same tokens as a fresh prefill."""
    import breakthrough.engine.prefix_cache as pc

    loaded, engine, prompt, trace = setup
    monkeypatch.setattr(pc, "_is_plain", lambda layer: False)
    protocol = DEFAULT.with_overrides(budget=6, answer_budget=4, sampling=Sampling(temperature=0.0))
    cuts = (40, 97)
    engine = MlxEngine.from_loaded(loaded, batch_size=8)
    fresh = MlxEngine.from_loaded(loaded, batch_size=1, reuse_prefixes=False)
    shared = SharedPrefix(
        "cell", tuple(prompt + trace), starts=tuple(len(prompt) + c for c in cuts)
    )
    runner = BranchRunner(engine, loaded, prompt, trace, protocol, shared)
    got = runner.run([Branch(f"s{c}", "probe", c, 6, 0, 5, c) for c in (*cuts, 60)])
    ((_, cache),) = engine._prefixes.values()
    assert cache.plain is False
    assert cache.prefill_tokens == len(prompt) + 96 + (60 - 40)  # 60 extends the snapshot at 40
    for res in got:
        b = res.branch
        assert res.tokens == reference_branch(
            fresh, loaded, prompt, trace[: b.cut], 6, b.seed, protocol
        )


def test_kv_bytes_per_token_matches_the_config(setup) -> None:
    from breakthrough.engine.prefix_cache import kv_bytes_per_token

    loaded = setup[0]
    c = loaded.config
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    want = (
        c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * head_dim * 4
    )  # float32 tiny model
    assert kv_bytes_per_token(loaded.model) == want
