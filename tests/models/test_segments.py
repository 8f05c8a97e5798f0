"""Token segmentation (protocol 3.2) and anchor cut-offs, per family and on a real tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.models.families import FAMILIES
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
from breakthrough.models.tokens import token_strings

T, S, O, F = THINKING, SPECIAL, SOLUTION, FINAL_ANSWER  # noqa: E741 (the labels' initials)


def test_segment_qwen_think_style():
    toks = [
        "<think>",
        "\n",
        "Let",
        " me",
        " add",
        ".",
        "</",
        "think",
        ">",
        "\n\n",
        "So",
        " ",
        "\\box",
        "ed{",
        "5",
        "}",
        " done",
        "<|im_end|>",
    ]
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
    strs = token_strings(tok, ids)
    assert "".join(strs) == text
    thinking = "".join(s for s, c in zip(strs, seg, strict=True) if c == T)
    assert thinking == "Add 2 and 3."
    final = "".join(s for s, c in zip(strs, seg, strict=True) if c == F)
    assert final.startswith("\\boxed{") or final.startswith(" \\boxed{")
    cut = anchor_cutoff(seg, 2)
    assert "".join(strs[: cut + 1]).endswith(strs[cut]) and seg[cut] == T
