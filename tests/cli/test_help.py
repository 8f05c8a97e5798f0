"""Help text of every command, as the console script prints it: no `<bool>` metavar on flags,
docstring paragraphs reflowed (no line break mid-sentence), `-o/--out` wherever an output path
is taken, one meaning of `--batch-size`, and counts that agree with their nouns."""

from __future__ import annotations

import re

import pytest
import typer.main
from bt_cli import run_bt

from breakthrough.cli import app
from breakthrough.commands.options import count


def _commands(group, prefix=()):
    """Every leaf command path of the app, e.g. ("cohorts", "build")."""
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))
        else:
            yield (*prefix, name)


COMMANDS = sorted(_commands(typer.main.get_command(app)))


def _description(text: str) -> list[list[str]]:
    """The paragraphs between the usage line and the first section (Arguments/Options)."""
    body = text.split("\n\n", 1)[1]
    body = re.split(r"\n(?:Arguments|Options|Commands):", "\n" + body)[0]
    return [
        [line.strip() for line in p.splitlines() if line.strip()]
        for p in body.split("\n\n")
        if p.strip()
    ]


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "bt")
def test_help_is_plain_and_reflowed(path):
    proc = run_bt(*path, "--help", COLUMNS="80")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert "<bool>" not in proc.stdout
    for paragraph in _description(proc.stdout):
        for line in paragraph[:-1]:  # a reflowed paragraph fills each line but its last
            assert len(line) >= 45, (path, line)


def _options_named(opt: str) -> dict:
    """{command path: its click parameter} of every command that has option `opt`."""
    found = {}
    for path in COMMANDS:
        cmd = typer.main.get_command(app)
        for name in path:
            cmd = cmd.commands[name]
        for param in cmd.params:
            if opt in param.opts:
                found[" ".join(path)] = param
    return found


def test_output_paths_are_o_out_everywhere():
    out_options = {path: set(param.opts) for path, param in _options_named("--out").items()}
    assert {"export", "auroc", "classify", "cohorts build"} <= set(out_options)
    assert all(opts == {"-o", "--out"} for opts in out_options.values()), out_options


def test_batch_size_means_one_thing():
    helps = {path: param.help for path, param in _options_named("--batch-size").items()}
    assert {"base", "continue"} <= set(helps), helps
    # one meaning: the rows (sequences) generated together at most, everywhere
    assert all(h.startswith("Rows") and "generated together" in h for h in helps.values()), helps


def test_counts_agree_with_their_nouns():
    assert count(1, "problem") == "1 problem" and count(2, "problem") == "2 problems"
    assert count(0, "cell") == "0 cells" and count(1200, "sample") == "1,200 samples"


def test_base_help_explains_the_thinking_switch() -> None:
    from bt_cli import run_bt

    proc = run_bt("base", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--thinking" in text and "enable_thinking" in text and "never mixes" in text
