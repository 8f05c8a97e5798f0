"""Batch occupancy (issue 22): the token-weighted mean of rows in flight over the decode steps,
divided by the batch size, as `bt continue` prints and stores it."""

from __future__ import annotations

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine


def test_occupancy_is_token_weighted_rows_over_batch_size(tiny_model) -> None:
    engine = MlxEngine.from_loaded(tiny_model, batch_size=4)
    assert engine.occupancy is None  # no step yet
    reqs = [
        GenRequest(key="a", prompt=[1, 2, 3], max_tokens=3, seed=1),
        GenRequest(key="b", prompt=[4, 5, 6], max_tokens=9, seed=2),
    ]
    got = {r.key: len(r.tokens) for r in engine.generate(reqs)}
    short, long_ = sorted(got.values())
    # both rows in flight for `short` steps (2 tokens each), then one row alone
    want = (4 * short + (long_ - short)) / (2 * short + (long_ - short)) / 4
    assert engine.generated_tokens == short + long_
    assert abs(engine.occupancy - want) < 1e-12


def test_attention_fill_is_real_over_padded_positions(tiny_model) -> None:
    """Issue 22: mlx-lm pads a batch's rows to the longest one; `attention_fill` is the share of
    each step's attention positions (context before the token drawn) that are the rows' own."""
    engine = MlxEngine.from_loaded(tiny_model, batch_size=4)
    assert engine.attention_fill is None
    prompts = {"a": [1, 2, 3], "b": [4, 5, 6, 7, 8, 9, 10, 11, 12]}
    reqs = [
        GenRequest(key=k, prompt=p, max_tokens=5, seed=i)
        for i, (k, p) in enumerate(prompts.items())
    ]
    made = {r.key: len(r.tokens) for r in engine.generate(reqs)}
    real = padded = 0
    for k in range(max(made.values())):
        ctx = [len(prompts[key]) + k for key in prompts if k < made[key]]
        real, padded = real + sum(ctx), padded + len(ctx) * max(ctx)
    assert real < padded or min(made.values()) == 0
    assert abs(engine.attention_fill - real / padded) < 1e-12
