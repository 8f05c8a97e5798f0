"""Per-token instrumentation (protocol 2.2): every field of GenResult.signals equals a direct
numpy computation from the full logits of an independent forward pass on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.engine.sampling.signals import (
    HIDDEN_FIELDS,
    SIGNAL_FIELDS,
    TAIL_K,
    hidden_signals,
    hidden_signals_np,
    token_signals,
    token_signals_np,
)
from breakthrough.models.families import build_prompt_ids
from breakthrough.protocol import Sampling
from breakthrough.tasks.family import user_message

ALL_FIELDS = SIGNAL_FIELDS + HIDDEN_FIELDS


def _prompt(tm, i: int = 1):
    return build_prompt_ids(
        tm.tokenizer, tm.family, user_message({"problem": f"What is {i} + {3 * i}?"})
    )


def _direct(logits: np.ndarray, tokens: list[int]) -> dict[str, np.ndarray]:
    """The protocol's definitions, written out in float64 from the full logits [n, V]."""
    x = logits.astype(np.float64)
    logp = x - x.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    p = np.exp(logp)
    ent = -(p * logp).sum(-1)
    srt = np.sort(x, axis=-1)[:, ::-1]
    ps = np.sort(p, axis=-1)[:, ::-1]
    n = len(tokens)
    kl = np.full(n, np.nan)
    js = np.full(n, np.nan)
    for t in range(1, n):
        q = p[t - 1]
        kl[t] = np.sum(p[t] * (logp[t] - logp[t - 1]))
        m = 0.5 * (p[t] + q)
        js[t] = 0.5 * np.sum(p[t] * np.log(p[t] / m)) + 0.5 * np.sum(q * np.log(q / m))
    return {
        "normalized_entropy": ent / np.log(x.shape[-1]),
        "top1_top2_logit_margin": srt[:, 0] - srt[:, 1],
        "top1_top2_probability_margin": ps[:, 0] - ps[:, 1],
        "top1_probability": ps[:, 0],
        "top5_probability_mass": ps[:, :5].sum(-1),
        "probability_tail_mass": 1.0 - ps[:, :TAIL_K].sum(-1),
        "effective_vocabulary_size": np.exp(ent),
        "surprisal": -logp[np.arange(n), tokens],
        "sampled_token_regret": logp.max(-1) - logp[np.arange(n), tokens],
        "successive_kl_divergence": kl,
        "successive_js_divergence": js,
    }


def _full_logits(tm, prompt, tokens) -> np.ndarray:
    import mlx.core as mx

    ids = mx.array([list(prompt) + list(tokens)])
    out = tm.model(ids)[0, len(prompt) - 1 : len(prompt) - 1 + len(tokens)].astype(mx.float32)
    return np.array(out)


def _final_hidden(tm, prompt, tokens) -> np.ndarray:
    """Teacher-forced final-normalised hidden states at the positions whose logits gave each
    generated token (the inner transformer of a multimodal wrapper too)."""
    import mlx.core as mx

    from breakthrough.models.hidden_states import final_hidden, text_model

    ids = mx.array([list(prompt) + list(tokens)])
    out = final_hidden(text_model(tm.model)[1], ids)
    return np.array(out[0, len(prompt) - 1 : len(prompt) - 1 + len(tokens)].astype(mx.float32))


def _direct_hidden(h: np.ndarray) -> dict[str, np.ndarray]:
    h = h.astype(np.float64)
    norm = np.linalg.norm(h, axis=-1)
    step = np.full(len(h), np.nan)
    drift = np.full(len(h), np.nan)
    for t in range(1, len(h)):
        step[t] = np.linalg.norm(h[t] - h[t - 1]) / norm[t - 1]
        drift[t] = 1 - h[t] @ h[t - 1] / (norm[t] * norm[t - 1])
    return {"hidden_norm": norm, "relative_l2_step": step, "cosine_drift": drift}


def test_every_field_equals_direct_numpy_from_full_logits(float_or_4bit):
    """On the float llama and on each 4-bit hub-shaped checkpoint."""
    tiny_model = float_or_4bit
    eng = MlxEngine.from_loaded(tiny_model, batch_size=4)
    prompts = [_prompt(tiny_model, i) for i in range(3)]
    reqs = [GenRequest(f"r{i}", p, 12, seed=40 + i) for i, p in enumerate(prompts)]
    reqs.append(GenRequest("g", prompts[0], 12, seed=0, sampling=Sampling(temperature=0.0)))
    for res, req in zip(
        sorted(eng.generate(reqs), key=lambda r: r.key),
        sorted(reqs, key=lambda r: r.key),
        strict=True,
    ):
        n = len(res.tokens)
        assert n >= 4 and set(res.signals) == set(ALL_FIELDS)
        want = _direct(_full_logits(tiny_model, req.prompt, res.tokens), res.tokens)
        want.update(_direct_hidden(_final_hidden(tiny_model, req.prompt, res.tokens)))
        for name in ALL_FIELDS:
            got = res.signals[name]
            assert got.shape == (n,) and got.dtype == np.float32, name
            np.testing.assert_allclose(got, want[name], rtol=2e-3, atol=2e-4, err_msg=name)
        assert np.isnan(res.signals["successive_kl_divergence"][0])
        assert np.all(np.isfinite(res.signals["successive_js_divergence"][1:]))
        # Surprisal is the sampled token's -log p, i.e. -logprob.
        np.testing.assert_allclose(res.signals["surprisal"], -res.logprobs, atol=1e-5)


def test_signals_alone_equal_in_a_batch_and_switch_changes_no_token(float_or_4bit):
    tiny_model = float_or_4bit
    prompts = [_prompt(tiny_model, i) for i in range(8)]
    reqs = [GenRequest(f"r{i}", p, 10, seed=70 + i) for i, p in enumerate(prompts)]
    batch = {r.key: r for r in MlxEngine.from_loaded(tiny_model, batch_size=8).generate(reqs)}
    alone = next(iter(MlxEngine.from_loaded(tiny_model, batch_size=1).generate([reqs[5]])))
    for name in ALL_FIELDS:
        # (float32 rounding of the logits differs between batch shapes in the last bits; the
        # entropy, exp(entropy) above all, amplifies it to ~4e-4 relative)
        np.testing.assert_allclose(
            alone.signals[name],
            batch["r5"].signals[name],
            rtol=1e-3,
            atol=1e-5,
            equal_nan=True,
            err_msg=name,
        )
    off = {
        r.key: r
        for r in MlxEngine.from_loaded(tiny_model, batch_size=8, instrument=False).generate(reqs)
    }
    for key, res in batch.items():
        assert off[key].signals is None
        assert off[key].tokens == res.tokens


def test_mlx_and_numpy_definitions_agree():
    import mlx.core as mx

    rng = np.random.default_rng(3)
    x = (rng.normal(size=(4, 300)) * 3).astype(np.float32)
    prev_x = (rng.normal(size=(4, 300)) * 3).astype(np.float32)
    tokens = np.array([0, 5, 17, 299])
    _, prev_states = token_signals_np(prev_x, tokens, [None] * 4)
    prev_rows = [prev_states[0], None, prev_states[2], prev_states[3]]
    want, states = token_signals_np(x, tokens, prev_rows)
    q = np.stack([r[1] - r[2] if r is not None else np.zeros(300, np.float32) for r in prev_rows])
    got, got_logp = token_signals(
        mx.array(x),
        mx.array(tokens.astype(np.uint32)),
        (mx.array(q), mx.array([r is not None for r in prev_rows])),
    )
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(
        np.array(got_logp), np.stack([st[1] - st[2] for st in states]), atol=1e-5
    )
    kl = SIGNAL_FIELDS.index("successive_kl_divergence")
    assert np.isnan(want[1, kl]) and np.isfinite(want[0, kl])


def test_signals_travel_through_a_branch_like_logprobs(tiny_model_dir):
    """A continuation branch (reasoning + forced close + answer) lays its signals out exactly
    like its log-probs: one per non-prefix token, NaN for the inserted close tokens."""
    from breakthrough.engine.contract import SharedPrefix
    from breakthrough.models.loading import load_model
    from breakthrough.pipeline.branches import Branch, BranchRunner
    from breakthrough.protocol import DEFAULT

    loaded = load_model(str(tiny_model_dir), family="qwen")
    engine = MlxEngine.from_loaded(loaded, batch_size=4)
    prompt = build_prompt_ids(loaded.tokenizer, loaded.family, "What is 2+2?")
    (base,) = engine.generate([GenRequest(key="b", prompt=prompt, max_tokens=20, seed=11)])
    protocol = DEFAULT.with_overrides(budget=6, answer_budget=4)
    runner = BranchRunner(
        engine,
        loaded,
        prompt,
        base.tokens,
        protocol,
        SharedPrefix("cell", tuple(prompt + base.tokens)),
    )
    got = runner.run([Branch(f"k{c}", "probe", c, 6, 0, 500 + c, c) for c in (2, 10)])
    for res in got:
        assert set(res.signals) == set(ALL_FIELDS)
        for name, arr in res.signals.items():
            assert arr.shape == res.logprobs.shape, name
        inserted = np.isnan(res.logprobs)
        assert inserted.sum() == res.extra["inserted_tokens"]
        assert np.isnan(res.signals["surprisal"][inserted]).all()
        np.testing.assert_allclose(
            res.signals["surprisal"][~inserted], -res.logprobs[~inserted], atol=1e-5
        )


def test_mlx_graph_path_of_the_step_gives_the_numpy_path_values(tiny_model, monkeypatch):
    """The decode step's accelerator branch (sample_step + token_signals in one MLX graph, used
    on Metal / CUDA) run on this CPU: same tokens and signals as the numpy branch."""

    from breakthrough.engine import batch_step

    reqs = [GenRequest(f"r{i}", _prompt(tiny_model, i), 6, seed=90 + i) for i in range(2)]
    want = {r.key: r for r in MlxEngine.from_loaded(tiny_model, batch_size=2).generate(reqs)}
    monkeypatch.setattr(batch_step.mx, "default_device", lambda: "accelerator")
    got = {r.key: r for r in MlxEngine.from_loaded(tiny_model, batch_size=2).generate(reqs)}
    for key, res in want.items():
        assert got[key].tokens == res.tokens
        for name in ALL_FIELDS:
            np.testing.assert_allclose(
                got[key].signals[name],
                res.signals[name],
                rtol=1e-3,
                atol=1e-5,
                equal_nan=True,
                err_msg=name,
            )


def test_hidden_fields_mlx_and_numpy_agree():
    import mlx.core as mx

    rng = np.random.default_rng(5)
    h = rng.normal(size=(3, 64)).astype(np.float32)
    q = rng.normal(size=(3, 64)).astype(np.float32)
    prev = [q[0], None, q[2]]
    want = hidden_signals_np(h, prev)
    got = hidden_signals(
        mx.array(h),
        (mx.array(np.stack([q[0], np.zeros(64, np.float32), q[2]])), mx.array([True, False, True])),
    )
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-6, equal_nan=True)
    assert np.isnan(want[1, 1]) and want[0, 2] == pytest.approx(
        1 - h[0] @ q[0] / (np.linalg.norm(h[0]) * np.linalg.norm(q[0])), rel=1e-4
    )


@pytest.mark.parametrize("arch", ["gemma4_text", "ministral3", "qwen3", "qwen3_5"])
def test_hidden_fields_are_of_the_final_normalised_state_on_study_architectures(
    architecture_models, arch
):
    """protocol 11 (Gemma: state before the final norm in mlx-lm): the recorded hidden norm is
    that of the final-normalised state whose logits drew each token, teacher-forced here."""
    import mlx.core as mx

    from breakthrough.models.hidden_states import final_hidden, text_model

    model = architecture_models[arch].model
    prompt = [2, 10, 11, 12, 13]
    (res,) = MlxEngine(model, [1], batch_size=1).generate(
        [GenRequest("h", prompt, 5, seed=3, sampling=Sampling(temperature=0.0))]
    )
    lm, inner = text_model(model)
    ids = mx.array([prompt + res.tokens])
    h = np.array(
        final_hidden(inner, ids)[0, len(prompt) - 1 : len(prompt) - 1 + len(res.tokens)].astype(
            mx.float32
        )
    )
    want = _direct_hidden(h)
    for name in HIDDEN_FIELDS:
        np.testing.assert_allclose(
            res.signals[name],
            want[name],
            rtol=2e-3,
            atol=1e-4,
            equal_nan=True,
            err_msg=f"{arch} {name}",
        )
