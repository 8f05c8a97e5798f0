"""The chat template's thinking switch (`bt base --thinking`), without a model: which family a
run renders and segments with, the refusals, and why a run's identity holds "off" only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from breakthrough.errors import BtError
from breakthrough.models.families import FAMILIES, has_thinking_switch, thinking_family
from breakthrough.models.loading import template_in_folder
from breakthrough.models.segments import SOLUTION, THINKING, segment_for_family
from breakthrough.protocol import DEFAULT, Protocol

TEMPLATES = Path(__file__).parent / "templates"
QWEN3 = (TEMPLATES / "qwen3.jinja").read_text()
MINISTRAL = (TEMPLATES / "ministral3_reasoning.jinja").read_text()


def test_off_renders_the_switch_off_and_the_trace_is_all_answer() -> None:
    qwen = FAMILIES["qwen"]
    assert has_thinking_switch(QWEN3) and not has_thinking_switch(MINISTRAL)
    assert thinking_family(qwen, QWEN3, "", "m") is qwen
    assert thinking_family(qwen, QWEN3, "on", "m") is qwen  # the prompt bt renders anyway
    off = thinking_family(qwen, QWEN3, "off", "m")
    assert dict(off.template_kwargs) == {"enable_thinking": False}
    assert (off.name, off.open_marker, off.close_marker, off.forced_close) == (
        "qwen",
        None,
        None,
        "",
    )
    tokens = ["The", " optimum", " is", " 7", "."]
    assert set(segment_for_family(tokens, off)) == {SOLUTION}
    # the qwen family itself would count a trace without an open marker as thinking
    assert set(segment_for_family(tokens, qwen)) == {THINKING}


def test_a_template_without_the_switch_is_refused_in_one_line() -> None:
    with pytest.raises(BtError) as err:
        thinking_family(FAMILIES["ministral3"], MINISTRAL, "off", "ministral3-3b")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("--thinking off: the chat template of ministral3-3b")
    assert "no thinking switch (enable_thinking" in msg
    with pytest.raises(BtError, match="does not pass enable_thinking"):
        thinking_family(FAMILIES["ministral3"], QWEN3, "on", "odd")  # switch, family ignores it


def test_only_off_changes_a_runs_identity() -> None:
    on = DEFAULT.with_overrides(thinking="on")
    off = DEFAULT.with_overrides(thinking="off")
    assert on.identity_digest() == DEFAULT.identity_digest() != off.identity_digest()
    assert off.identity()["thinking"] == "off" and "thinking" not in on.identity()
    stored = DEFAULT.to_dict()
    del stored["thinking"]  # a protocol stored before the switch existed
    assert Protocol.from_dict(stored) == DEFAULT
    with pytest.raises(BtError, match="--thinking: expected on or off, got 'maybe'"):
        DEFAULT.with_overrides(thinking="maybe").validate()


def test_template_in_folder_reads_where_transformers_does(tmp_path: Path) -> None:
    assert template_in_folder(tmp_path) == ""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "A"}))
    assert template_in_folder(tmp_path) == "A"
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert template_in_folder(tmp_path) == "D"
    (tmp_path / "chat_template.jinja").write_text(QWEN3)
    assert template_in_folder(tmp_path) == QWEN3
