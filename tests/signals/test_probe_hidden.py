"""Teacher-forced hidden states (breakthrough/models/hidden_states.py) on the tiny random-weight
model: the one forward equals the same states computed token by token through mlx-lm's KV cache,
the states are the final-normalised ones the head reads (a model returning them before its final
norm is caught and normed), and the top-1 agreement is the direct argmax of the model's logits."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.models.hidden_states import (
    head_logits,
    stepwise_hidden,
    teacher_force,
    text_model,
    tokenize_dump,
)

PROMPT = "What is 12 + 30?"
COMPLETION = " First add the tens: 10 + 30 = 40, then the units: 2. So the answer is \\boxed{42}."


def test_one_forward_equals_a_stepwise_cached_computation(tiny_model):
    prompt, gen = tokenize_dump(tiny_model.tokenizer, PROMPT, COMPLETION)
    assert len(gen) > 8
    tf = teacher_force(tiny_model.model, prompt, gen)
    step = stepwise_hidden(tiny_model.model, prompt, gen)
    assert tf.hidden.shape == step.shape == (len(gen), tiny_model.config["hidden_size"])
    np.testing.assert_allclose(tf.hidden, step, atol=1e-4, rtol=1e-4)


def test_forcing_stops_at_max_tokens(tiny_model):
    prompt, gen = tokenize_dump(tiny_model.tokenizer, PROMPT, COMPLETION)
    full = teacher_force(tiny_model.model, prompt, gen)
    cut = teacher_force(tiny_model.model, prompt, gen, max_tokens=5)
    assert cut.hidden.shape[0] == 5 and cut.top1.shape == (5,)
    np.testing.assert_allclose(cut.hidden, full.hidden[:5], atol=1e-5)  # causal: same states


def test_states_are_what_the_head_reads_and_top1_is_the_model_argmax(tiny_model):
    import mlx.core as mx

    prompt, gen = tokenize_dump(tiny_model.tokenizer, PROMPT, COMPLETION)
    ids = mx.array([prompt + gen])
    logits = np.array(tiny_model.model(ids)[0].astype(mx.float32))
    lm, inner = text_model(tiny_model.model)
    again = np.array(head_logits(lm, inner, inner(ids))[0].astype(mx.float32))
    np.testing.assert_allclose(again, logits, atol=1e-4)
    tf = teacher_force(tiny_model.model, prompt, gen)
    p = len(prompt)
    direct = logits[p - 1 : p - 1 + len(gen)].argmax(axis=-1) == np.array(gen)
    assert (tf.top1 == direct).all()
    assert tf.top1_agreement == direct.mean()


@pytest.mark.parametrize("arch", ["gemma4_text", "ministral3", "qwen3", "qwen3_5"])
def test_study_architectures_give_final_normalised_states(architecture_models, arch):
    """protocol 11 (the Gemma case) on each study architecture: the inner model ends with its
    final norm, the head (tied embeddings or lm_head, Gemma's soft-capping) on the states gives
    the model's own logits, and the one forward equals the stepwise cached computation (the
    sliding-window and recurrent caches included)."""
    import mlx.core as mx

    from breakthrough.models.hidden_states import final_norm_applied

    model = architecture_models[arch].model
    prompt, gen = [2, 10, 11, 12], [13, 14, 15, 16, 17, 18]
    ids = mx.array([prompt + gen])
    lm, inner = text_model(model)
    assert final_norm_applied(inner, ids)
    np.testing.assert_allclose(
        np.array(head_logits(lm, inner, inner(ids)).astype(mx.float32)),
        np.array(model(ids).astype(mx.float32)),
        atol=1e-3,
    )
    np.testing.assert_allclose(
        teacher_force(model, prompt, gen).hidden,
        stepwise_hidden(model, prompt, gen),
        atol=1e-4,
        rtol=1e-4,
    )


class _PreNorm:
    """An inner model whose forward skips its final norm (protocol 11's Gemma case) while still
    holding the norm as `.norm`, built on the tiny llama's own layers."""

    def __init__(self, inner):
        self._inner = inner
        self._real_norm = inner.norm
        self.norm = inner.norm
        self.embed_tokens = inner.embed_tokens

    def __setitem__(self, key, value):
        setattr(self, key, value)

    def __call__(self, ids, cache=None):
        self._inner["norm"] = lambda x: x
        try:
            return self._inner(ids, cache=cache)
        finally:
            self._inner["norm"] = self._real_norm


def test_a_pre_norm_inner_model_gets_its_final_norm_applied(tiny_model):
    import mlx.core as mx

    from breakthrough.models.hidden_states import final_hidden, final_norm_applied

    _, inner = text_model(tiny_model.model)
    real_norm = inner.norm
    pre = _PreNorm(inner)
    ids = mx.array([[1, 20, 30, 40, 50, 60]])
    assert final_norm_applied(inner, ids) is True
    assert final_norm_applied(pre, ids) is False
    assert inner.norm is real_norm  # the watch was put back
    normed = np.array(inner(ids))
    assert not np.allclose(np.array(pre(ids)), normed, atol=1e-3)  # pre-norm differs ...
    np.testing.assert_allclose(np.array(final_hidden(pre, ids)), normed, atol=1e-5)  # ... fixed


def _numpy_streams(logits: np.ndarray, gen: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entropy (nats), surprisal and top-1 probability of each row of full-vocabulary logits
    ([n, V], row j predicting gen[j]), in float64 numpy."""
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    p = np.exp(logp)
    return (-(p * logp).sum(axis=-1), -logp[np.arange(len(gen)), gen], p.max(axis=-1))


@pytest.mark.parametrize("arch", ["llama", "gemma4_text", "ministral3", "qwen3", "qwen3_5"])
def test_teacher_forced_streams_equal_numpy_from_the_full_logits(
    tiny_model, architecture_models, arch
):
    """protocol 9.8's streams from the one forward equal a direct computation from the model's
    own full logits (its __call__, so Gemma's soft-capping and tied heads are included), read
    at the rows that predict each generated token (position start + j - 1), also when forcing
    stops at max_tokens."""
    import mlx.core as mx

    model = tiny_model.model if arch == "llama" else architecture_models[arch].model
    prompt, gen = [2, 10, 11, 12], [13, 40, 15, 99, 17, 18, 250, 20]
    p = len(prompt)
    logits = np.array(model(mx.array([prompt + gen]))[0].astype(mx.float32))
    entropy, surprisal, top1_prob = _numpy_streams(logits[p - 1 : p - 1 + len(gen)], gen)
    tf = teacher_force(model, prompt, gen)
    for got, want in (
        (tf.entropy, entropy),
        (tf.surprisal, surprisal),
        (tf.top1_probability, top1_prob),
    ):
        assert got.shape == (len(gen),) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the streams read the row before each token, not the token's own row (an off-by-one
    # would match this instead)
    shifted = _numpy_streams(logits[p : p + len(gen)], gen)[1]
    assert not np.allclose(tf.surprisal, shifted, atol=1e-3)
    cut = teacher_force(model, prompt, gen, max_tokens=5)
    np.testing.assert_allclose(cut.surprisal, surprisal[:5], rtol=1e-4, atol=1e-4)
    assert cut.entropy.shape == cut.top1_probability.shape == (5,)
    # entropy of a distribution over V tokens lies in (0, log V]; a probability in (0, 1]
    assert (tf.entropy > 0).all() and (tf.entropy <= np.log(logits.shape[-1]) + 1e-4).all()
    assert ((tf.top1_probability > 0) & (tf.top1_probability <= 1)).all()


def test_an_empty_completion_gives_empty_streams(tiny_model):
    tf = teacher_force(tiny_model.model, [2, 10, 11], [])
    assert tf.entropy.shape == tf.surprisal.shape == tf.top1_probability.shape == (0,)
