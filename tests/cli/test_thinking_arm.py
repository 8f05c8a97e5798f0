"""`bt base --thinking on|off` through the installed `bt`, on the tiny Qwen3 (its chat template
has Qwen3's `enable_thinking`): the off run's prompts end in the pre-filled empty thinking
block and its traces hold no thinking; its identity differs from the on run's, so a resume
with the other setting is refused, while "on" is the same run as not asking; a model whose
template has no switch is refused in one line with nothing written; and `bt report uoo`
compares the two arms with the paired McNemar test."""

from __future__ import annotations

from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt, snapshot

from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore

COMMON = ("--cohort", "uoo29", "--limit", "3", "--max-tokens", "6")


@pytest.fixture(scope="module")
def arms(tmp_path_factory, architecture_dirs) -> tuple[Path, Path]:
    """(runs folder, the tiny Qwen3's folder) with runs `on` and `off` of three uoo29 items."""
    qwen = architecture_dirs["qwen3"]
    runs = tmp_path_factory.mktemp("thinking") / "runs"
    for arm in ("on", "off"):
        bt_in_process(
            "base", *COMMON, "--model", qwen, "--runs-dir", runs, "--run", arm, "--thinking", arm
        )
    return runs, qwen


def _prompts(run: Path) -> tuple[dict, list[list[int]], list[bytes]]:
    with RunStore(run, readonly=True) as store:
        man = store.manifest()
        segments = store.base_segments()
        prompts = [list(store.cell_prompt(cid)[1]) for cid in sorted(segments)]
    return man, prompts, [segments[c] for c in sorted(segments)]


def test_off_prefills_an_empty_thinking_block_and_is_another_identity(arms) -> None:
    from transformers import AutoTokenizer

    runs, qwen = arms
    tok = AutoTokenizer.from_pretrained(str(qwen))
    man_on, on, seg_on = _prompts(runs / "on")
    man_off, off, seg_off = _prompts(runs / "off")
    assert man_on["protocol"]["thinking"] == "on" and man_off["protocol"]["thinking"] == "off"
    asked = DEFAULT.with_overrides(base_max_tokens=6)  # COMMON's --max-tokens
    assert man_on["protocol_digest"] == asked.identity_digest() != man_off["protocol_digest"]
    assert len(on) == len(off) == 3
    for a, b in zip(on, off, strict=True):
        assert b[: len(a)] == a  # the same chat, then the pre-filled block
        assert tok.decode(b[len(a) :]) == "<think>\n\n</think>\n\n"
    assert all(0 not in s for s in seg_off)  # no token of an off trace is thinking (code 0)
    assert all(s and set(s) == {0} for s in seg_on)  # 6 tokens without a close: all thinking


def test_the_other_setting_is_refused_and_on_is_the_run_not_asking_makes(arms) -> None:
    runs, qwen = arms
    before = snapshot(runs / "off")
    proc = run_bt("base", *COMMON, "--model", qwen, "--runs-dir", runs, "--run", "off",
                  "--thinking", "on")  # fmt: skip
    assert_one_line_error(proc, 2, "--thinking", "protocol.thinking", "--run NAME")
    assert snapshot(runs / "off") == before
    same = run_bt("base", *COMMON, "--model", qwen, "--runs-dir", runs, "--run", "on")
    assert same.returncode == 0, same.stderr
    assert "nothing to do" in same.stdout + same.stderr


def test_a_template_without_the_switch_is_one_line_and_writes_nothing(
    tiny_model_dir, tmp_path
) -> None:
    runs = tmp_path / "runs"
    proc = run_bt("base", *COMMON, "--model", tiny_model_dir, "--runs-dir", runs,
                  "--thinking", "off")  # fmt: skip
    assert_one_line_error(proc, 2, "--thinking off", "no thinking switch", str(tiny_model_dir))
    assert not runs.exists()


def test_report_compares_the_arms(arms) -> None:
    runs, _ = arms
    proc = run_bt("report", "uoo", runs / "on", runs / "off", "--cohort", "uoo29")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Thinking on vs off (exact McNemar" in out
    row = next(line for line in out.splitlines() if "│ on " in line and "│ off " in line)
    assert "│     3 │" in row  # the three items both arms answered, paired
