"""MLX engine on the tiny random-weight model: per-row seeds, greedy parity with mlx-lm,
per-token statistics, stop conditions, prompt caches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.errors import BtError
from breakthrough.models.families import build_prompt_ids
from breakthrough.protocol import Sampling
from breakthrough.tasks.family import user_message

GREEDY = Sampling(temperature=0.0)


def _prompts(tm, n):
    texts = [f"Problem {i}: what is {i} plus {i * 7}?" + " Think." * (i % 3) for i in range(n)]
    return [build_prompt_ids(tm.tokenizer, tm.family, user_message({"problem": t})) for t in texts]


def _one(engine, req):
    (res,) = list(engine.generate([req]))
    return res


def test_same_request_alone_and_in_batch_of_8(float_or_4bit):
    tiny_model = float_or_4bit  # the float llama and each 4-bit hub-shaped checkpoint
    eng = MlxEngine.from_loaded(tiny_model, batch_size=8)
    prompts = _prompts(tiny_model, 8)
    reqs = [GenRequest(f"r{i}", prompts[i], 24, seed=1000 + i) for i in range(8)]
    batch = {r.key: r for r in eng.generate(reqs)}
    assert set(batch) == {r.key for r in reqs}
    for i in (0, 5):
        alone = _one(eng, reqs[i])
        assert alone.tokens == batch[f"r{i}"].tokens
        np.testing.assert_allclose(alone.logprobs, batch[f"r{i}"].logprobs, atol=1e-4)
    # Sampling is really random (not greedy): another seed gives other tokens.
    other = _one(eng, GenRequest("x", prompts[0], 24, seed=7))
    assert other.tokens != batch["r0"].tokens
    greedy = _one(eng, GenRequest("g", prompts[0], 24, seed=1000, sampling=GREEDY))
    assert greedy.tokens != batch["r0"].tokens


def test_continuous_batching_refills_and_keeps_tokens(tiny_model):
    """More requests than slots, different lengths: every row equals its solo run."""
    eng = MlxEngine.from_loaded(tiny_model, batch_size=3)
    prompts = _prompts(tiny_model, 7)
    reqs = [GenRequest(f"q{i}", prompts[i], 6 + 3 * i, seed=50 + i) for i in range(7)]
    got = {r.key: r for r in eng.generate(iter(reqs))}
    assert len(got) == 7
    for r in reqs:
        assert len(got[r.key].tokens) <= r.max_tokens
    solo = MlxEngine.from_loaded(tiny_model, batch_size=1)
    for r in reqs[::3]:
        assert _one(solo, r).tokens == got[r.key].tokens


def test_greedy_matches_mlx_lm_generate(tiny_model):
    from mlx_lm.generate import stream_generate

    prompt = _prompts(tiny_model, 3)[2]
    ours = _one(MlxEngine.from_loaded(tiny_model), GenRequest("g", prompt, 20, 0, sampling=GREEDY))
    ref = [
        r.token
        for r in stream_generate(tiny_model.model, tiny_model.tokenizer, prompt, max_tokens=20)
    ]
    n = min(len(ref), len(ours.tokens))
    assert n >= 10
    assert ours.tokens[:n] == ref[:n]


def test_logprobs_and_entropies(tiny_model):
    import mlx.core as mx

    eng = MlxEngine.from_loaded(tiny_model)
    prompt = _prompts(tiny_model, 2)[1]
    res = _one(eng, GenRequest("s", prompt, 16, seed=3))
    n = len(res.tokens)
    assert res.logprobs.shape == (n,) and res.entropies.shape == (n,)
    assert res.logprobs.dtype == np.float32 and res.entropies.dtype == np.float32
    assert np.all(res.logprobs <= 1e-6) and np.all(np.isfinite(res.logprobs))
    assert np.all(res.entropies >= -1e-6)
    assert np.all(res.entropies <= math.log(len(tiny_model.tokenizer)) + 1e-3)
    assert res.elapsed_s > 0 and res.prompt_tokens == len(prompt)
    # Against an independent full forward pass over prompt + generated tokens.
    ids = mx.array([list(prompt) + res.tokens])
    logits = tiny_model.model(ids)[0, len(prompt) - 1 : len(prompt) - 1 + n].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    want_lp = np.array(mx.take_along_axis(lp, mx.array(res.tokens)[:, None], axis=-1)[:, 0])
    want_ent = np.array(-(mx.exp(lp) * lp).sum(axis=-1))
    np.testing.assert_allclose(res.logprobs, want_lp, atol=2e-3)
    np.testing.assert_allclose(res.entropies, want_ent, atol=2e-3)
    # Greedy picks the mode: its logprob is the row maximum.
    g = _one(eng, GenRequest("g", prompt, 4, seed=0, sampling=GREEDY))
    assert np.all(g.logprobs <= 0)


def test_finish_reasons(tiny_model):
    prompt = _prompts(tiny_model, 1)[0]
    base = MlxEngine.from_loaded(tiny_model)
    ref = _one(base, GenRequest("a", prompt, 30, 0, sampling=GREEDY))
    assert ref.finish_reason == "length" and len(ref.tokens) == 30
    # Stop sequence: the first occurrence of a 2-token window of the greedy output.
    seq = tuple(ref.tokens[6:8])
    end = next(j for j in range(1, 30) if tuple(ref.tokens[j - 1 : j + 1]) == seq)
    st = _one(base, GenRequest("b", prompt, 30, 0, stop_sequences=(seq,), sampling=GREEDY))
    assert st.finish_reason == "stop_sequence"
    assert st.tokens == ref.tokens[: end + 1]
    # EOS: make the greedy 4th token an EOS id.
    eos_eng = MlxEngine(tiny_model.model, set(tiny_model.eos_ids) | {ref.tokens[3]})
    eo = _one(eos_eng, GenRequest("c", prompt, 30, 0, sampling=GREEDY))
    first = ref.tokens.index(ref.tokens[3])
    assert eo.finish_reason == "eos" and eo.tokens == ref.tokens[: first + 1]


def test_reuse_hints_never_change_tokens(float_or_4bit):
    """A shared prefix (one prefill, cut back per request) and `follows` (continue a kept live
    state) give the tokens of a fresh prefill, greedy and sampled; the engine counts what it
    reused. On the float llama and on each 4-bit hub-shaped checkpoint (Gemma-4's rotating and
    KV-shared layers included), with per-row copies and with rows sharing the prefix's copy."""
    from breakthrough.engine.contract import SharedPrefix

    tiny_model = float_or_4bit

    prompt = _prompts(tiny_model, 2)[1]
    extra = tiny_model.encode(" and some more reasoning text here")
    full = list(prompt) + extra
    shared = SharedPrefix("cell", tuple(full), starts=(len(prompt) + 3, len(full)))
    # The fresh-prefill oracle, one engine per sampling: both sampled rounds ask it the same
    # requests (their `more` is built from tokens asserted equal to its answer), so it answers
    # each once.
    fresh_engs: dict = {}
    answers: dict = {}

    def oracle(req: GenRequest):
        key = (req.sampling, req.key, tuple(req.prompt), req.max_tokens, req.seed)
        if key not in answers:
            if req.sampling not in fresh_engs:
                fresh_engs[req.sampling] = MlxEngine.from_loaded(tiny_model, reuse_prefixes=False)
            answers[key] = _one(fresh_engs[req.sampling], req)
        return answers[key]

    for sampling, share in ((GREEDY, None), (Sampling(), None), (Sampling(), True)):
        # share=True: rows point into the prefix's one copy and attend over it together
        # (`prefix_attention`); None: the engine's rule (per-row copies for these small models)
        eng = MlxEngine.from_loaded(tiny_model, share_prefixes=share)
        for cut in (len(prompt) + 3, len(full)):
            fresh = oracle(GenRequest("f", full[:cut], 12, seed=9, sampling=sampling))
            reused = _one(
                eng,
                GenRequest(
                    "c",
                    full[:cut],
                    12,
                    seed=9,
                    sampling=sampling,
                    shared_prefix=shared,
                    keep_state=True,
                ),
            )
            assert reused.tokens == fresh.tokens
            assert reused.cached_tokens == cut - 1 and fresh.cached_tokens == 0
            # Continue the kept live state with two forced ids, then 6 tokens.
            more = full[:cut] + reused.tokens + [5, 6]
            fresh2 = oracle(GenRequest("f2", more, 6, seed=3, sampling=sampling))
            cont = _one(eng, GenRequest("c2", more, 6, seed=3, sampling=sampling, follows="c"))
            assert cont.tokens == fresh2.tokens
            assert cont.cached_tokens >= cut + len(reused.tokens) - 1
        assert eng.prefill_tokens < fresh_engs[sampling].prefill_tokens
    fresh_eng = fresh_engs[sampling]
    assert fresh_eng.identity()["backend"] == "mlx-fresh" and eng.identity()["backend"] == "mlx"


def test_bad_requests(tiny_model):
    eng = MlxEngine.from_loaded(tiny_model)
    with pytest.raises(BtError):
        list(eng.generate([GenRequest("a", [1, 2], 2, 0), GenRequest("a", [1, 2], 2, 0)]))
    with pytest.raises(BtError):
        list(eng.generate([GenRequest("e", [], 2, 0)]))
