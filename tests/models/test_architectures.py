"""The study's architectures for real (issue 14): tiny random-weight Gemma-4, Ministral-3, Qwen3
and Qwen3.5 models built through mlx-lm's own classes, with their chat templates and special
tokens. Prompt rendering (thinking on/off, protocol 1.3), segmentation on the real marker tokens
(protocol 3.2), forced-close tokens (protocol 3.3 step 4), cache types."""

from __future__ import annotations

from dataclasses import replace

import pytest

from breakthrough.models.families import FAMILIES, build_prompt_ids
from breakthrough.models.segments import (
    FINAL_ANSWER,
    SOLUTION,
    SPECIAL,
    THINKING,
    anchor_cutoff,
    reasoning_length,
    segment_ids,
)
from breakthrough.models.tokens import token_strings
from breakthrough.protocol import DEFAULT_SYSTEM
from breakthrough.tasks.family import user_message
from models.architectures import ARCHITECTURES, MINISTRAL_SYSTEM_PROMPT

MSG = user_message({"problem": "What is 2+2?"})
SYS = DEFAULT_SYSTEM


def _render(loaded, thinking: bool | None = None) -> tuple[list[int], str]:
    fam = loaded.family
    if thinking is not None:
        fam = replace(fam, template_kwargs={**fam.template_kwargs, "enable_thinking": thinking})
    ids = build_prompt_ids(loaded.tokenizer, fam, MSG)
    return ids, "".join(token_strings(loaded.tokenizer, ids))


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_family_from_the_template_and_cache_types(architecture_models, name) -> None:
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache, make_prompt_cache

    loaded = architecture_models[name]
    arch = ARCHITECTURES[name]
    assert loaded.family == FAMILIES[arch.family] or loaded.family.name == "ministral3"
    assert type(loaded.model).__module__ == f"mlx_lm.models.{arch.model_type}"
    kinds = {type(c) for c in make_prompt_cache(loaded.model)}
    want = {"gemma4_text": {RotatingKVCache, KVCache}, "qwen3_5": {ArraysCache, KVCache}}
    assert kinds == want.get(name, {KVCache})
    eos = {loaded.tokenizer.convert_tokens_to_ids(t) for t in arch.eos_tokens}
    assert eos <= set(loaded.eos_ids)


def test_gemma4_prompt(architecture_models) -> None:
    loaded = architecture_models["gemma4_text"]
    assert loaded.family.template_kwargs == {"enable_thinking": True}
    ids, text = _render(loaded)
    assert text == (
        f"<bos><|turn>system\n<|think|>{SYS}<turn|>\n<|turn>user\n{MSG}<turn|>\n<|turn>model\n"
    )
    tok = loaded.tokenizer
    for marker in ("<bos>", "<|turn>", "<|think|>", "<turn|>"):  # single special tokens
        assert tok.convert_tokens_to_ids(marker) in ids
    _, off = _render(loaded, thinking=False)
    assert "<|think|>" not in off and off.endswith("<|turn>model\n")


@pytest.mark.parametrize(
    "name,on_tail",
    [("qwen3", "<|im_start|>assistant\n"), ("qwen3_5", "<|im_start|>assistant\n<think>\n")],
)
def test_qwen_prompts(architecture_models, name, on_tail) -> None:
    loaded = architecture_models[name]
    assert loaded.family.template_kwargs == {"enable_thinking": True}
    ids, text = _render(loaded)
    assert text == (
        f"<|im_start|>system\n{SYS}<|im_end|>\n<|im_start|>user\n{MSG}<|im_end|>\n" + on_tail
    )
    _, off = _render(loaded, thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    if name == "qwen3_5":  # the open marker is one special token of the prompt
        assert ids[-2] == loaded.tokenizer.convert_tokens_to_ids("<think>")


def test_ministral3_prompt(architecture_models) -> None:
    loaded = architecture_models["ministral3"]
    fam = loaded.family
    assert fam.template_kwargs == {} and fam.system_message == MINISTRAL_SYSTEM_PROMPT
    ids, text = _render(loaded)
    assert text == f"<s>[SYSTEM_PROMPT]{MINISTRAL_SYSTEM_PROMPT}[/SYSTEM_PROMPT][INST]{MSG}[/INST]"
    tok = loaded.tokenizer
    # The system prompt's [THINK]...[/THINK] went through the closed thinking chunk and comes
    # out as the special tokens, as the reference's 3-chunk system message does.
    for marker in (
        "<s>",
        "[SYSTEM_PROMPT]",
        "[THINK]",
        "[/THINK]",
        "[/SYSTEM_PROMPT]",
        "[INST]",
        "[/INST]",
    ):
        assert ids.count(tok.convert_tokens_to_ids(marker)) == 1, marker


TRACES = {
    "gemma4_text": (
        "<|channel>thought\nAdd two and two.<channel|>So \\boxed{4}.<turn|>",
        "<|channel>",
        "<channel|>",
    ),
    "ministral3": ("[THINK]Add two and two.[/THINK]So \\boxed{4}.</s>", "[THINK]", "[/THINK]"),
    "qwen3": (
        "<think>\nAdd two and two.\n</think>\n\nSo \\boxed{4}.<|im_end|>",
        "<think>",
        "</think>",
    ),
    "qwen3_5": ("\nAdd two and two.\n</think>\n\nSo \\boxed{4}.<|im_end|>", None, "</think>"),
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_segmentation_on_the_real_marker_tokens(architecture_models, name) -> None:
    loaded = architecture_models[name]
    tok = loaded.tokenizer
    text, open_tok, close_tok = TRACES[name]
    ids = loaded.encode(text)
    assert loaded.tokenizer.decode(ids, skip_special_tokens=False) == text
    seg = segment_ids(tok, ids, loaded.family).tolist()
    close_at = ids.index(tok.convert_tokens_to_ids(close_tok))
    assert seg[close_at] == SPECIAL
    if open_tok is not None:
        open_at = ids.index(tok.convert_tokens_to_ids(open_tok))
        assert open_at == 0 and seg[0] == SPECIAL
        if name == "gemma4_text":  # "<|channel>thought": the marker spans two tokens
            assert seg[1] == SPECIAL
    thinking = [i for i, s in enumerate(seg) if s == THINKING]
    assert thinking == list(range(thinking[0], close_at)) and thinking
    assert "".join(token_strings(tok, [ids[i] for i in thinking])).strip() == "Add two and two."
    strings = token_strings(tok, ids)
    at = text.index("\\boxed{")  # the first token overlapping the box marker starts the answer
    box = next(i for i in range(len(ids)) if len("".join(strings[: i + 1])) > at)
    assert set(seg[close_at + 1 : box]) <= {SOLUTION} and set(seg[box:]) == {FINAL_ANSWER}
    assert reasoning_length(seg) == len(thinking)
    assert (
        anchor_cutoff(seg, 1) == thinking[0] and anchor_cutoff(seg, len(thinking)) == close_at - 1
    )


@pytest.mark.parametrize(
    "name,close,forced",
    [
        ("gemma4_text", ["<channel|>"], ["<channel|>"]),
        ("ministral3", ["[/THINK]"], ["[/THINK]", "\n\n"]),
        ("qwen3", ["</think>"], [".\n", "</think>", "\n\n"]),
        ("qwen3_5", ["</think>"], [".\n", "</think>", "\n\n"]),
    ],
)
def test_close_and_forced_close_tokens(architecture_models, name, close, forced) -> None:
    """The close marker is one special token (the reasoning phase's stop sequence), and the
    forced close is the family's text as protocol 1.3 gives it, with the marker as that token."""
    loaded = architecture_models[name]
    tok = loaded.tokenizer

    def ids(parts):
        out = []
        for p in parts:
            out += (
                [tok.convert_tokens_to_ids(p)] if p in tok.get_added_vocab() else loaded.encode(p)
            )
        return out

    assert loaded.encode(loaded.family.close_marker) == ids(close)
    assert loaded.encode(loaded.family.forced_close) == ids(forced)
    assert "".join(forced) == loaded.family.forced_close


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_max_prompt_tokens_at_the_boundary(architecture_models, name) -> None:
    """Protocol 1.3/1.5: a prompt of exactly max_prompt_tokens is accepted, one token more is
    refused with a one-line BtError naming the limit."""
    from breakthrough.errors import BtError

    loaded = architecture_models[name]
    ids = build_prompt_ids(loaded.tokenizer, loaded.family, MSG)
    assert build_prompt_ids(loaded.tokenizer, loaded.family, MSG, max_prompt_tokens=len(ids)) == ids
    with pytest.raises(
        BtError,
        match=f"prompt has {len(ids):,} tokens, over the "
        f"--max-prompt-tokens limit of {len(ids) - 1:,}",
    ):
        build_prompt_ids(loaded.tokenizer, loaded.family, MSG, max_prompt_tokens=len(ids) - 1)
