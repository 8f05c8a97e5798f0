"""The README is a test (issue 30, item 8): the fenced block under README.md's "The pipeline"
heading is read from the README itself and run, command by command and in order, from an empty
folder with the installed wheel (`installed`, tests/install/conftest.py), on the offline default
model.

Only sizes change, and only through options: `SHRINK` below is the whole mapping from a README
line to what runs, each entry saying why. The study's hub models (Gemma, Ministral, Qwen) are
not in an offline CI, so `--model` names the offline default and the run folders the README
names follow (`runs/math89-gemma4-e4b` → `runs/math89-smollm2-135m`). A line the mapping does
not know runs as written (a README edit that adds a long command shows up as a slow test).

The test fails when a command exits non-zero, prints a traceback, or leaves undone what the
README says it does (`EXPECT`: the files it names, the cohorts it lists, the runs it finds)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from install.test_wheel_install import _user_env

REPO = Path(__file__).resolve().parents[2]
HEADING = "## The pipeline"
OFFLINE = "smollm2-135m"

# README text -> what runs, applied in order to every command (regular expressions).
SHRINK: list[tuple[str, str, str]] = [
    # the study's hub models are not in an offline CI: the offline default stands in for them
    (r"--model gemma4-e4b,ministral3-3b", f"--model {OFFLINE}", "offline model"),
    (r"--model qwen3-4b", f"--model {OFFLINE}", "offline model"),
    (r"runs/(math89|uoo29)-(gemma4-e4b|qwen3-4b)", rf"runs/\1-{OFFLINE}", "its run folder"),
    # one problem per cohort and 8-token traces: a CPU decodes SmolLM2 at a few tokens/s
    (r"(bt base --cohort \S+)", r"\1 --limit 1 --max-tokens 8", "one 8-token trace"),
    # B = 4 reasoning + 4 answer tokens, anchors and restarts inside an 8-token trace
    (
        r"bt continue --budget 1024",
        "bt continue --budget 4 --answer-budget 4 --anchors 4,8 --restarts 4,8",
        "make demo's budgets",
    ),
    (r"--add-budget 4096", "--add-budget 8", "the A2 arm at 2B, as the study's 4,096 is 4B"),
    (r"--attempts 8 --max-tokens 4096", "--attempts 2 --max-tokens 16 --limit 2", "attempts"),
    (
        r"(bt cohorts screen math500 --name screened) --band 1,2",
        r"\1 --limit 2 --max-tokens 8 --band 0,3",
        "SmolLM2 solves no MATH problem: the band "
        "keeps what it gets (the README's 1-2 of 3 would keep none)",
    ),
    (r"--anchors 4,8,16,32", "--anchors 4,8", "anchors inside a 16-token attempt"),
    (
        r"--forecast-token 128,256,512,1024,2048",
        "--forecast-token 4,8 --draws 20",
        "forecast points inside an 8-token trace",
    ),
]

# What a command must leave behind, by the README's words (paths relative to the folder).
EXPECT: dict[str, list[str]] = {
    "bt base --cohort math89": [f"runs/math89-{OFFLINE}/store.sqlite"],
    "bt classify runs/": ["runs/classify/index.html", "runs/classify/labels.parquet"],
    "bt auroc table.csv": ["table.auroc.json"],
    "bt export": [f"runs/math89-{OFFLINE}/export"],
    "bt sample": [f"runs/attempts/math500-{OFFLINE}/store.sqlite"],
    "bt cohorts screen": ["cohorts/screened.jsonl"],
    "bt signals runs/attempts": [f"runs/attempts/math500-{OFFLINE}/signals.parquet"],
    "bt probe": [f"runs/attempts/math500-{OFFLINE}/probe/probe_summary.json"],
    "bt signals runs/math89": [
        f"runs/math89-{OFFLINE}/signals.parquet",
        "runs/confirm/confirm.json",
    ],
    "bt confirm runs/*": ["runs/confirm/sweep.json"],
    "bt report study": ["runs/study/index.html", "runs/study/headlines.json"],
}


def pipeline_commands(readme: str) -> list[str]:
    """The commands of the first fenced block under HEADING, without their comments."""
    section = readme.split(f"\n{HEADING}\n", 1)[1]
    block = re.search(r"```\w*\n(.*?)```", section, re.S).group(1)
    out = []
    for line in block.splitlines():
        code = line.split("  #", 1)[0].strip()
        if code:
            out.append(code)
    return out


def comments(readme: str) -> dict[str, str]:
    """Each command's README comment (what it says the command does)."""
    section = readme.split(f"\n{HEADING}\n", 1)[1]
    block = re.search(r"```\w*\n(.*?)```", section, re.S).group(1)
    return {
        line.split("  #", 1)[0].strip(): line.split("  #", 1)[1].strip()
        for line in block.splitlines()
        if "  #" in line
    }


def shrink(command: str) -> str:
    for pattern, repl, _why in SHRINK:
        command = re.sub(pattern, repl, command)
    return command


def test_pipeline_block_is_found_and_every_line_is_mapped():
    """Cheap: the block exists, and every command the README names is one the mapping knows."""
    cmds = pipeline_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(cmds) >= 10 and cmds[0].startswith("bt cohorts list")
    for cmd in cmds:
        shlex.split(cmd)  # a shell line
        assert "gemma4" not in shrink(cmd) and "qwen3" not in shrink(cmd), shrink(cmd)
    assert all(any(c.startswith(k) for c in cmds) for k in EXPECT), [
        k for k in EXPECT if not any(c.startswith(k) for c in cmds)
    ]


def _table(path: Path) -> None:
    """The user's own table `bt auroc table.csv …` reads: problems × samples, a score, a label."""
    rows = ["problem_id,my_score,correct"]
    for p in range(6):
        for s in range(4):
            rows.append(f"p{p},{(p * 7 + s * 3) % 10 / 10},{int((p + s) % 3 == 0)}")
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.slow
def test_the_readme_pipeline_runs_as_written(installed, tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    said = comments(readme)
    work = tmp_path / "study"
    work.mkdir()
    env = _user_env(work)
    env["PATH"] = f"{installed}{os.pathsep}{env['PATH']}"
    env["BT_CACHE_DIR"] = os.environ.get("BT_CACHE_DIR", str(tmp_path / "cache"))
    prepared = subprocess.run(
        ["bt", "models", "prepare", OFFLINE],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert prepared.returncode == 0, prepared.stderr
    _table(work / "table.csv")
    log = []
    for cmd in pipeline_commands(readme):
        run = shrink(cmd)
        t0 = time.monotonic()
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", run],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        log.append(f"{time.monotonic() - t0:6.1f}s  {run}")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{run}\n{out[-3000:]}"
        assert "Traceback" not in out, f"{run}\n{out[-3000:]}"
        for key, paths in EXPECT.items():
            if cmd.startswith(key):
                for p in paths:
                    assert (work / p).exists(), f"{run}: no {p}\n{out[-2000:]}"
        if cmd.startswith("bt cohorts list"):  # the cohorts its comment names
            for name in re.findall(r"\b([a-z]+\d*)\b(?: \(|,|$)", said[cmd]):
                assert re.search(rf"│ {name} ", proc.stdout), (name, proc.stdout)
        if cmd.startswith("python -m breakthrough.analyses.auroc_worked_example"):
            # the wheel's module, run by the fresh environment's python (first on PATH)
            assert "pooled  = 12/16" in proc.stdout and "Runs: runs/" in proc.stdout, out
        if "runs/*" in cmd:  # outputs and sample runs under runs/ are never taken for runs
            assert not re.search(r"bt continue[^\n]*runs/(attempts|screens|classify|study)", out), (
                out
            )
    print("\n".join(log))
