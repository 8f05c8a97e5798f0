"""A plain-family branch whose reasoning phase ends at EOS is complete: no answer request
(pipeline.branches, `BranchRunner.needs_answer`); thinking families keep protocol 3.3 step 6's
answer phase. Real engine and tiny model; the EOS set is widened to tokens the model emits
early, so that reasoning phases do end at EOS."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_tap import Tapped

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model
from breakthrough.pipeline.branches import Branch, BranchRunner, reference_branch
from breakthrough.protocol import DEFAULT


@pytest.mark.parametrize("family", ["plain", "qwen"])
def test_reasoning_eos_ends_a_plain_branch_only(tiny_model_dir, family) -> None:
    loaded = load_model(str(tiny_model_dir), family=family)
    prompt = build_prompt_ids(loaded.tokenizer, loaded.family, "What is 2+2?")
    protocol = DEFAULT.with_overrides(budget=10, answer_budget=4)
    probe = MlxEngine.from_loaded(loaded, batch_size=8)
    firsts = [
        r.tokens[2]
        for r in probe.generate(
            [GenRequest(key=f"s{i}", prompt=prompt, max_tokens=3, seed=100 + i) for i in range(8)]
        )
    ]
    loaded = replace(loaded, eos_ids=frozenset(loaded.eos_ids | set(firsts)))
    engine = Tapped(MlxEngine.from_loaded(loaded, batch_size=8))  # counts the requests
    runner = BranchRunner(engine, loaded, prompt, [], protocol)
    branches = [Branch(f"r{i}", "restart", -1, 10, i, 100 + i, 0) for i in range(8)]
    got = runner.run(branches)
    ended = [r for r in got if r.extra["reasoning_finish"] == "eos"]
    assert ended, "no reasoning phase ended at EOS"
    fresh = MlxEngine.from_loaded(loaded, batch_size=1, reuse_prefixes=False)
    for r in got:  # the reference procedure (the oracle) follows the same rule
        assert r.tokens == reference_branch(fresh, loaded, prompt, [], 10, r.branch.seed, protocol)
    n_answer_requests = len(engine.pulled) - len(branches)  # one reasoning request per branch
    if family == "plain":
        for r in ended:
            assert r.extra["answer_phase"] is False and r.extra["answer_tokens"] == 0
            assert r.finish_reason == "eos" and r.tokens[-1] in loaded.eos_ids
            assert len(r.logprobs) == len(r.tokens)
        assert n_answer_requests == len(got) - len(ended)
    else:  # a thinking family: the EOS is dropped, the forced close inserted, the answer asked
        assert all(r.extra["answer_phase"] and r.extra["forced_close"] for r in ended)
        assert n_answer_requests == len(got)
