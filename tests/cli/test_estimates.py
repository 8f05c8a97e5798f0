"""Every long command is estimable and visible (issue 30, item 2), through the installed `bt`:
`--dry-run` on `bt sample` and `bt cohorts screen` (tokens and an ETA whose rate says where it
came from), a progress display counting samples and tokens (never cells: a one-cell run has an
ETA from its first tokens on), the one line a command about to generate more than a million
tokens says before it loads a model, and the prompt family `bt base` detected."""

from __future__ import annotations

import re

from bt_cli import run_bt

from breakthrough.runlock import run_lock


def _flat(text: str) -> str:
    return " ".join(text.split())


def _progress_ok(stderr: str, samples: str) -> None:
    """The display's final line: samples done, tokens against the bound, tok/s, an ETA."""
    said = _flat(stderr)
    assert f"{samples} samples" in said, stderr
    assert re.search(r"\d+/<=\d+ tokens", said) and "tok/s" in said, stderr
    assert "ETA <= " in said and "-:--:--" not in said and " cells" not in said, stderr


def test_one_cell_runs_show_tokens_and_an_eta(tmp_path, tiny_model_dir):
    runs, out = tmp_path / "runs", tmp_path / "cohorts"
    model = ("--model", tiny_model_dir, "--runs-dir", runs, "--max-tokens", "16")
    base = run_bt("base", "--cohort", "demo", "--run", "r", "--limit", "1", *model)
    assert base.returncode == 0, base.stderr
    assert "prompt family: plain" in base.stdout
    _progress_ok(base.stderr, "1/1")

    sample = ("sample", "--cohort", "demo", "--attempts", "2", "--limit", "1", *model)
    plan = run_bt(*sample, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    said = _flat(plan.stdout)
    assert "2 samples, at most 32 tokens" in said
    # a model's first bt sample: bt base's rate stands in, said so, with what it leaves out
    assert "measured by `bt base` in r" in said and "no `bt sample` of tiny-llama" in said, said
    assert "generation only: start-up and model loading come on top" in said
    assert not (runs / "attempts").exists()  # nothing written
    ran = run_bt(*sample)
    assert ran.returncode == 0, ran.stderr
    _progress_ok(ran.stderr, "2/2")

    screen = (
        "cohorts",
        "screen",
        "demo",
        "--name",
        "scr",
        "--seeds",
        "21,22",
        "--limit",
        "1",
        "--band",
        "0,2",
        "--out",
        out,
        *model,
    )
    plan = run_bt(*screen, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    said = _flat(plan.stdout)
    assert "2 samples, at most 32 tokens" in said and "measured by `bt sample`" in said, said
    assert not out.exists() and not (runs / "screens").exists()  # nothing written
    ran = run_bt(*screen)
    assert ran.returncode == 0, ran.stderr
    _progress_ok(ran.stderr, "2/2")
    assert (out / "scr.jsonl").is_file()


def test_a_run_past_a_million_tokens_says_so_before_it_loads_a_model(tmp_path, tiny_model_dir):
    """The README's `bt cohorts screen math500 --name screened --band 1,2`: 500 problems x 3
    seeds x 3,072 tokens. The run is held busy, so the command stops at its lock, after the
    line and before any model loads."""
    runs, out = tmp_path / "runs", tmp_path / "cohorts"
    screen = (
        "cohorts",
        "screen",
        "math500",
        "--name",
        "screened",
        "--band",
        "1,2",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        runs,
        "--out",
        out,
    )
    plan = run_bt(*screen, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "1,500 samples, at most 4,608,000 tokens" in plan.stdout
    with run_lock(runs / "screens" / "math500-tiny-llama"):
        busy = run_bt(*screen)
    assert busy.returncode == 2, busy.stderr
    said = _flat(busy.stdout)
    assert (
        "math500-tiny-llama: a large run: at most 4,608,000 tokens (1,500 samples); ETA unknown"
    ) in said, said
    assert not out.exists()

    base = (
        "base",
        "--cohort",
        "math500",
        "--max-tokens",
        "4096",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        runs,
        "--run",
        "big",
    )
    with run_lock(runs / "big"):
        busy = run_bt(*base)
    assert busy.returncode == 2, busy.stderr
    assert "big: a large run: at most 2,048,000 tokens (500 samples)" in _flat(busy.stdout)
    small = run_bt(*base[:-2], "--run", "small", "--limit", "1", "--dry-run")
    assert small.returncode == 0 and "large run" not in small.stdout + small.stderr


def test_a_log_file_gets_a_plain_progress_line_while_the_run_goes(tmp_path, tiny_model_dir):
    """stderr to a file (nohup, a batch job): rich draws nothing before the end, so the same
    row comes as plain lines every BT_PROGRESS_SECONDS while samples are generated."""
    runs = tmp_path / "runs"
    ran = run_bt(
        *("base", "--cohort", "demo", "--run", "r", "--limit", "2", "--model", tiny_model_dir),
        *("--runs-dir", runs, "--max-tokens", "256"),
        BT_PROGRESS_SECONDS="0.05",
    )
    assert ran.returncode == 0, ran.stderr
    row = re.compile(r"^base \d/2 samples, \d+ solved, [\d,]+/<=[\d,]+ tokens, .* tok/s, .*ETA")
    lines = [ln for ln in ran.stderr.splitlines() if row.search(ln)]
    assert lines, ran.stderr
    assert any(re.search(r"[1-9][\d,]*/<=", ln) for ln in lines), lines  # tokens while it ran
