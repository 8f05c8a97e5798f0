"""The batched decode step hands each row a `StepStats` per token: named fields, the
instrumentation columns only when the batch is instrumented, the top ids only when asked; the
same on the CPU branch (numpy) and the MLX-graph branch (run on this CPU)."""

from __future__ import annotations

import pytest

from breakthrough.engine import batch_step
from breakthrough.engine.batch_step import RowSpec, SeededBatchGenerator, StepStats
from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS
from breakthrough.protocol import Sampling

STEPS = 6


def _stats(model, specs: list[RowSpec]) -> dict[int, list[StepStats]]:
    gen = SeededBatchGenerator(
        model, completion_batch_size=len(specs), prefill_batch_size=len(specs)
    )
    uids = gen.insert(
        [[1, 2, 3 + i] for i in range(len(specs))], max_tokens=[STEPS] * len(specs), samplers=specs
    )
    out: dict[int, list[StepStats]] = {uid: [] for uid in uids}
    try:
        while any(len(v) < STEPS for v in out.values()):
            for resp in gen.next_generated():
                out[resp.uid].append(resp.logprobs)
    finally:
        gen.close()
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
