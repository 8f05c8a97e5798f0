"""Families, detection, prompt building, segmentation and anchor cut-offs, registry and loading
errors."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.models import registry as models
from breakthrough.errors import BtError
from breakthrough.models.registry import FAMILIES, build_prompt_ids, detect_family, user_message
from breakthrough.models.segments import (
    FINAL_ANSWER,
    SOLUTION,
    SPECIAL,
    THINKING,
    anchor_cutoff,
    reasoning_length,
    segment_for_family,
    segment_ids,
    segment_tokens,
)

T, S, O, F = THINKING, SPECIAL, SOLUTION, FINAL_ANSWER


class FakeTok:
    def __init__(self, template, added=()):
        self.chat_template = template
        self._added = {t: i for i, t in enumerate(added)}

    def get_added_vocab(self):
        return dict(self._added)


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "template,added,family",
    [
        ("{{ '<|im_start|>' + m['content'] }}{% if enable_thinking %}<think>{% endif %}", (), "qwen"),
        ("{{ bos }}<|turn>user ... <|channel>thought\n ...<channel|>", (), "gemma4"),
        ("[SYSTEM_PROMPT]{{ s }}[/SYSTEM_PROMPT][INST]{{ u }}[/INST] [THINK]", (), "ministral3"),
        ("{{ '<|im_start|>' + m['role'] }}", (), "plain"),
        ("{{ '<s>' + m['content'] }}", ("[THINK]", "[/THINK]"), "ministral3"),
    ],
)
def test_detect_family(template, added, family):
    assert detect_family(FakeTok(template, added)).name == family


def test_detect_family_refuses_unknown():
    with pytest.raises(BtError, match="no chat template"):
        detect_family(FakeTok(None))
    with pytest.raises(BtError, match="thinking/reasoning"):
        detect_family(FakeTok("{% if reasoning_content %}<seed:think>{% endif %}"))


def test_tiny_model_is_plain_and_registry(tiny_model):
    assert tiny_model.family.name == "plain"
    assert tiny_model.revision.startswith("local:")
    assert 2 in tiny_model.eos_ids
    assert models.REGISTRY["gemma4-e4b"].repo == "mlx-community/gemma-4-e4b-it-4bit"
    assert models.REGISTRY["ministral3-3b"].repo == "mlx-community/Ministral-3-3B-Reasoning-2512-4bit"
    assert models.REGISTRY["qwen3-4b"].repo == "mlx-community/Qwen3-4B-4bit"
    assert models.REGISTRY["smollm2-135m"].offline
    aliases = {r["alias"] for r in models.list_models()}
    assert aliases == {"gemma4-e4b", "ministral3-3b", "qwen3-4b", "smollm2-135m"}


def test_load_errors(monkeypatch, tmp_path, tiny_model_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BtError, match="not in the local Hugging Face cache"):
        models.load_model("bt-tests/surely-not-cached-model-4bit")
    with pytest.raises(BtError, match="unknown model"):
        models.load_model("no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BtError, match="no config.json"):
        models.load_model(str(tmp_path / "empty"))
    with pytest.raises(BtError, match="unknown family"):
        models.load_model(str(tiny_model_dir), family="nope")
    assert models.load_model(str(tiny_model_dir), family="qwen").family.name == "qwen"


# ---------------------------------------------------------------- prompts


def test_build_prompt_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    msg = user_message("What is 2+3?")
    assert msg == "What is 2+3?\n\nSolve the problem carefully. Put only the final answer inside \\boxed{}."
    ids = build_prompt_ids(tok, FAMILIES["plain"], msg)
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are a careful mathematical assistant.<|im_end|>")
    assert msg in text and text.endswith("<|im_start|>assistant\n")
    assert ids == tok.encode(text, add_special_tokens=False)
    with pytest.raises(BtError, match="over the 2048-token limit"):
        build_prompt_ids(tok, FAMILIES["plain"], "word " * 3000)


def test_ministral_system_prompt_chunks():
    fam = models.Family(
        "ministral3", system_message="Be careful.[THINK]plan here[/THINK]Answer.",
        open_marker="[THINK]", close_marker="[/THINK]", forced_close="[/THINK]\n\n",
    )
    (sysmsg, user) = fam.messages("hi")
    assert sysmsg["content"] == [
        {"type": "text", "text": "Be careful."},
        {"type": "thinking", "thinking": "plan here", "closed": True},
        {"type": "text", "text": "Answer."},
    ]
    assert user == {"role": "user", "content": "hi"}
    assert FAMILIES["gemma4"].forced_close == "<channel|>"
    assert FAMILIES["qwen"].forced_close == ".\n</think>\n\n"
    assert FAMILIES["qwen"].template_kwargs == {"enable_thinking": True}


# ---------------------------------------------------------------- segmentation


def test_segment_qwen_think_style():
    toks = ["<think>", "\n", "Let", " me", " add", ".", "</", "think", ">", "\n\n", "So", " ",
            "\\box", "ed{", "5", "}", " done", "<|im_end|>"]
    seg = segment_for_family(toks, FAMILIES["qwen"])
    assert seg.dtype == np.uint8
    assert seg.tolist() == [S, T, T, T, T, T, S, S, S, O, O, O, F, F, F, F, F, F]
    assert reasoning_length(seg) == 5
    assert anchor_cutoff(seg, 1) == 1 and anchor_cutoff(seg, 5) == 5
    with pytest.raises(ValueError):
        anchor_cutoff(seg, 6)


def test_segment_open_marker_in_prompt_and_unclosed():
    # Template put <think> in the prompt: thinking starts at 0; never closed -> no final answer.
    toks = ["We", " need", " \\boxed{", "3", "}"]
    assert segment_for_family(toks, FAMILIES["qwen"]).tolist() == [T, T, T, T, T]
    # A box inside the thinking does not start the final answer.
    toks = ["a", "\\boxed{1}", "</think>", "b", "\\boxed{", "2}"]
    assert segment_for_family(toks, FAMILIES["qwen"]).tolist() == [T, T, S, O, F, F]


def test_segment_markers_split_and_merged():
    # Gemma-4 open marker over two tokens; close marker merged with following text.
    toks = ["<|channel>", "thought", "\nx", " y", "<channel|>", "Final", " \\fbox{", "7}"]
    assert segment_for_family(toks, FAMILIES["gemma4"]).tolist() == [S, S, T, T, S, O, F, F]
    # Ministral: a token that straddles the close marker is special.
    toks = ["[THINK]", "ok", " go[/", "THINK]\n", "\\boxed{", "1}"]
    assert segment_for_family(toks, FAMILIES["ministral3"]).tolist() == [S, T, S, S, F, F]


def test_segment_plain_family():
    toks = ["First", " add", ".", " The", " answer", " is", " $\\", "boxed{", "4", "}$"]
    seg = segment_tokens(toks, None, None)
    assert seg.tolist() == [O] * 6 + [F] * 4
    assert reasoning_length(seg) == 6
    assert anchor_cutoff(seg, 3) == 2  # no thinking: solution tokens are counted
    assert segment_tokens([], None, None).tolist() == []
    assert segment_tokens(["no", " box"], None, None).tolist() == [O, O]


def test_segment_ids_with_real_tokenizer(smollm2_tokenizer):
    tok = smollm2_tokenizer
    text = "<think>Add 2 and 3.</think>The sum is \\boxed{5}.<|im_end|>"
    ids = tok.encode(text, add_special_tokens=False)
    seg = segment_ids(tok, ids, FAMILIES["qwen"])
    strs = models.token_strings(tok, ids)
    assert "".join(strs) == text
    thinking = "".join(s for s, c in zip(strs, seg) if c == T)
    assert thinking == "Add 2 and 3."
    final = "".join(s for s, c in zip(strs, seg) if c == F)
    assert final.startswith("\\boxed{") or final.startswith(" \\boxed{")
    cut = anchor_cutoff(seg, 2)
    assert "".join(strs[: cut + 1]).endswith(strs[cut]) and seg[cut] == T
