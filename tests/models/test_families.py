"""Chat-format families: detection from the chat template, prompt ids, Ministral's system chunks."""

from __future__ import annotations

import pytest

from breakthrough.errors import BtError
from breakthrough.models.families import FAMILIES, Family, build_prompt_ids, detect_family
from breakthrough.tasks.family import user_message


class FakeTok:
    def __init__(self, template, added=()):
        self.chat_template = template
        self._added = {t: i for i, t in enumerate(added)}

    def get_added_vocab(self):
        return dict(self._added)


@pytest.mark.parametrize(
    "template,added,family",
    [
        (
            "{{ '<|im_start|>' + m['content'] }}{% if enable_thinking %}<think>{% endif %}",
            (),
            "qwen",
        ),
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


def test_build_prompt_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    msg = user_message({"problem": "What is 2+3?"})
    ids = build_prompt_ids(tok, FAMILIES["plain"], msg)
    text = tok.decode(ids)
    assert text.startswith(
        "<|im_start|>system\nYou are a careful mathematical assistant.<|im_end|>"
    )
    assert msg in text and text.endswith("<|im_start|>assistant\n")
    assert ids == tok.encode(text, add_special_tokens=False)
    with pytest.raises(BtError, match="over the --max-prompt-tokens limit of 2,048"):
        build_prompt_ids(tok, FAMILIES["plain"], "word " * 3000)


def test_ministral_system_prompt_chunks():
    fam = Family(
        "ministral3",
        system_message="Be careful.[THINK]plan here[/THINK]Answer.",
        open_marker="[THINK]",
        close_marker="[/THINK]",
        forced_close="[/THINK]\n\n",
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
