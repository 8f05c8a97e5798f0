"""Chat-format families (protocol 1.3): how a model that reasons is prompted and delimited.

A `Family` holds the system message, the chat-template kwargs, the thinking block's open and
close markers and the forced-close text. `plain` is for models without a thinking block: their
whole solution is the segment prefixes are cut from. `detect_family` tells the family of an
unregistered model from its chat template; `build_prompt_ids` renders the chat prompt as text and
encodes it once, so everything downstream works on token ids end to end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT, DEFAULT_SYSTEM


@dataclass(frozen=True)
class Family:
    """How one reasoning format is prompted and delimited.

    system_message: the system turn ("" = none). For `ministral3` it is the checkpoint's own
        SYSTEM_PROMPT.txt, filled in by `load_model`.
    template_kwargs: extra `apply_chat_template` arguments (e.g. enable_thinking=True).
    open_marker / close_marker: the thinking block's delimiters (None for `plain`).
    forced_close: text appended (as token ids) when a continuation does not close its reasoning
        within the window (protocol 3.3 step 4); "" for `plain`.
    """

    name: str
    system_message: str = DEFAULT_SYSTEM
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    open_marker: str | None = "<think>"
    close_marker: str | None = "</think>"
    forced_close: str = ".\n</think>\n\n"

    def messages(self, user_message: str) -> list[dict]:
        """Chat messages for one problem. A Ministral system prompt that contains
        [THINK]...[/THINK] becomes three chunks (text, closed thinking chunk, text), as the
        reference adapter does."""
        msgs: list[dict] = []
        sysmsg = self.system_message
        if sysmsg:
            if self.name == "ministral3" and "[THINK]" in sysmsg and "[/THINK]" in sysmsg:
                before, rest = sysmsg.split("[THINK]", 1)
                thought, after = rest.split("[/THINK]", 1)
                content: list[dict] = []
                if before:
                    content.append({"type": "text", "text": before})
                content.append({"type": "thinking", "thinking": thought, "closed": True})
                if after:
                    content.append({"type": "text", "text": after})
                msgs.append({"role": "system", "content": content})
            else:
                msgs.append({"role": "system", "content": sysmsg})
        msgs.append({"role": "user", "content": user_message})
        return msgs


FAMILIES: dict[str, Family] = {
    "gemma4": Family(
        "gemma4",
        template_kwargs={"enable_thinking": True},
        open_marker="<|channel>thought",
        close_marker="<channel|>",
        forced_close="<channel|>",
    ),
    "ministral3": Family(
        "ministral3",
        system_message="",  # replaced by the checkpoint's SYSTEM_PROMPT.txt at load time
        open_marker="[THINK]",
        close_marker="[/THINK]",
        forced_close="[/THINK]\n\n",
    ),
    "qwen": Family("qwen", template_kwargs={"enable_thinking": True}),
    "plain": Family("plain", open_marker=None, close_marker=None, forced_close=""),
}


def detect_family(tokenizer: Any) -> Family:
    """The family from the chat template (then the vocabulary); BtError if it cannot be told."""
    template = template_of(tokenizer)
    if not template:
        raise BtError(
            "the tokenizer has no chat template, so its prompt format is unknown; "
            "give an mlx-lm folder whose tokenizer has a chat template"
        )
    vocab = _special_vocab(tokenizer)
    markers = (
        ("<|channel>", "<channel|>", "gemma4"),
        ("[THINK]", "[/THINK]", "ministral3"),
        ("<think>", "</think>", "qwen"),
    )
    for open_m, close_m, name in markers:  # the template names either marker
        if open_m in template or close_m in template:
            return FAMILIES[name]
    for open_m, close_m, name in markers:  # else the vocabulary holds both as special tokens
        if open_m in vocab and close_m in vocab:
            return FAMILIES[name]
    lowered = template.lower()
    if "think" in lowered or "reasoning" in lowered:
        raise BtError(
            "the chat template mentions a thinking/reasoning block in a format bt does not know "
            f"(known families: {', '.join(FAMILIES)})"
        )
    return FAMILIES["plain"]


THINKING_SWITCH = "enable_thinking"  # the chat-template variable Qwen3 and Gemma 4 read


def has_thinking_switch(template: str) -> bool:
    """Whether a chat template reads the thinking switch (Qwen3's `enable_thinking`)."""
    return THINKING_SWITCH in template


def thinking_family(family: Family, template: str, thinking: str, model: str) -> Family:
    """The family a run renders prompts and segments traces with under `--thinking`.

    "" (not asked): `family` as it is. "on": the same family, so the same prompt as not asking,
    which is why a run's identity leaves "on" out (`Protocol.identity`); "off": the template
    rendered with the switch off (Qwen3 then pre-fills an empty `<think>\n\n</think>` block) and
    the trace segmented as a family without a thinking block (nothing it writes is thinking: a
    qwen trace without an open marker would otherwise count as thinking from its first token).
    Refused in one line naming `model` when its template has no switch, or when bt's family
    does not already render it on (then "on" would be another prompt than not asking)."""
    if not thinking:
        return family
    if not has_thinking_switch(template):
        raise BtError(
            f"--thinking {thinking}: the chat template of {model} has no thinking switch "
            f"({THINKING_SWITCH}, as in Qwen3's); leave --thinking out for this model"
        )
    if family.template_kwargs.get(THINKING_SWITCH) is not True:
        raise BtError(
            f"--thinking {thinking}: {model} is prompted as bt's {family.name!r} family, which "
            f"does not pass {THINKING_SWITCH} to its chat template; leave --thinking out"
        )
    if thinking == "on":
        return family
    return replace(
        family,
        template_kwargs={**family.template_kwargs, THINKING_SWITCH: False},
        open_marker=None,
        close_marker=None,
        forced_close="",
    )


def template_of(tokenizer: Any) -> str:
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):  # named templates
        t = t.get("default") or next(iter(t.values()), None)
    return t or ""


def _special_vocab(tokenizer: Any) -> set[str]:
    toks: set[str] = set()
    for attr in ("all_special_tokens", "additional_special_tokens"):
        try:
            toks.update(getattr(tokenizer, attr) or [])
        except Exception:
            pass
    try:
        toks.update(tokenizer.get_added_vocab())
    except Exception:
        pass
    return toks


def build_prompt_ids(
    tokenizer: Any,
    family: Family,
    user_msg: str,
    *,
    max_prompt_tokens: int = DEFAULT.max_prompt_tokens,
) -> list[int]:
    """apply_chat_template(tokenize=False, add_generation_prompt=True, **family kwargs), then one
    `encode(add_special_tokens=False)` (protocol 1.3). Prompts over `max_prompt_tokens` are
    refused. `user_msg` comes from `breakthrough.tasks.family.user_message`."""
    text = tokenizer.apply_chat_template(
        family.messages(user_msg),
        tokenize=False,
        add_generation_prompt=True,
        **dict(family.template_kwargs),
    )
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(ids) > max_prompt_tokens:
        raise BtError(
            f"prompt has {len(ids):,} tokens, over the --max-prompt-tokens limit of "
            f"{max_prompt_tokens:,}"
        )
    return ids
