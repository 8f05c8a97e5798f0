"""The offline default: GGUF -> mlx-lm conversion checked for real (perplexity, fluent reply),
idempotence, and the tokenizer rebuilt from GGUF metadata."""

from __future__ import annotations

import math
import time

import mlx.core as mx
import pytest
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.models import offline as om
from breakthrough.protocol import Sampling

PARAGRAPH = (
    "The city council met on Tuesday evening to discuss the new park. Many people came to "
    "the meeting because they wanted to share their ideas. Some asked for more trees and a "
    "small playground for children, while others hoped for a quiet place to read."
)

pytestmark = pytest.mark.slow


def test_tokenizer_from_gguf_roundtrip(smollm2_tokenizer):
    tok = smollm2_tokenizer
    for s in ["Hello, world!", "x^2 + 3x = 12345", "\\boxed{\\frac{1}{2}}", "naïve café ✓"]:
        ids = tok.encode(s, add_special_tokens=False)
        assert tok.decode(ids) == s
    # digits are split one by one (SmolLM2 pre-tokenizer), specials are single tokens
    assert len(tok.encode("12345", add_special_tokens=False)) == 5
    assert tok.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert "<|im_start|>" in tok.chat_template


def test_offline_model_perplexity_below_40(offline_model):
    ids = offline_model.encode(PARAGRAPH)
    logits = offline_model.model(mx.array([ids]))[0, :-1].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    nll = -mx.take_along_axis(lp, mx.array(ids[1:])[:, None], axis=-1).mean().item()
    ppl = math.exp(nll)
    print(f"SmolLM2 perplexity on the paragraph: {ppl:.2f} ({len(ids)} tokens)")
    assert ppl < 40


def test_offline_model_greedy_reply_is_english(offline_model):
    assert offline_model.alias == "smollm2-135m" and offline_model.family.name == "plain"
    assert offline_model.revision.startswith("gguf-sha256:")
    tok = offline_model.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = offline_model.encode(prompt)
    eng = MlxEngine.from_loaded(offline_model)
    t0 = time.perf_counter()
    (res,) = list(eng.generate([GenRequest("q", ids, 16, 0, sampling=Sampling(temperature=0.0))]))
    dt = time.perf_counter() - t0
    text = tok.decode(res.tokens, skip_special_tokens=True)
    print(f"reply ({len(res.tokens)} tokens, {dt:.1f}s): {text!r}")
    assert "Paris" in text
    letters = sum(c.isascii() and (c.isalpha() or c.isspace()) for c in text)
    assert letters >= 0.8 * len(text)
    assert {"the", "is", "of"} & set(text.lower().replace(".", " ").split())


def test_prepare_is_idempotent(offline_model):
    folder = offline_model.path
    marker = folder / om.MARKER
    before = marker.stat().st_mtime_ns
    t0 = time.perf_counter()
    assert om.prepare() == folder
    assert time.perf_counter() - t0 < 1.0
    assert marker.stat().st_mtime_ns == before
    assert offline_model.revision == om.conversion_identity(folder)
    assert folder.parent == om.cache_root()


def test_models_cli(offline_model):
    res = CliRunner().invoke(app, ["models", "prepare"])
    assert res.exit_code == 0, res.output
    assert "already prepared" in res.output
    res = CliRunner().invoke(app, ["models", "list"])
    assert res.exit_code == 0, res.output
    assert "gemma4-e4b" in res.output and "smollm2-135m" in res.output
