"""What a Python user expects of a command line, through the installed `bt` (issue 30, item 5):
shell completion, `python -m breakthrough`, `--json` on the read-only commands, whole one-line
summaries in every command list, a closed pipe ending quietly with 0, hub ids printed whole,
and download commands (`hf download`) naming every missing model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bt_cli import BT, assert_one_line_error, bt_env, run_bt
from store_writer import write_run


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A small finished run (one cell, written through the store without a model)."""
    return write_run(tmp_path_factory.mktemp("runs") / "small")


# ---- shell completion --------------------------------------------------------------------


def test_show_and_install_completion(tmp_path):
    """The shell named on the command line (typer's own switch for tests: without it typer
    detects the parent shell, which a test runner started from make or CI may not have)."""
    named = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    shown = run_bt("--show-completion", "bash", **named)
    assert shown.returncode == 0, shown.stderr
    assert "_BT_COMPLETE" in shown.stdout and "complete -o" in shown.stdout
    installed = run_bt("--install-completion", "bash", HOME=str(tmp_path), **named)
    assert installed.returncode == 0, installed.stderr
    script = tmp_path / ".bash_completions" / "bt.sh"
    assert script.is_file() and str(script) in (tmp_path / ".bashrc").read_text()


def test_completion_answers_command_names():
    """What the installed script asks the console script: the words that complete `bt coh`."""
    for words, cword, want in (
        ("bt coh", 1, "cohorts"),
        ("bt cohorts l", 2, "list"),
        ("bt models l", 2, "list"),
    ):
        proc = run_bt(_BT_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [want], (words, proc.stdout)


# ---- python -m breakthrough --------------------------------------------------------------


def test_python_dash_m_is_the_same_command_line(tmp_path):
    version = subprocess.run(
        [sys.executable, "-m", "breakthrough", "--version"],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=120,
        cwd=tmp_path,
    )  # the installed package, not a checkout's folder
    assert version.returncode == 0, version.stderr
    assert version.stdout == run_bt("--version").stdout
    mistake = subprocess.run(
        [sys.executable, "-m", "breakthrough", "status"],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=120,
        cwd=tmp_path,
    )
    assert_one_line_error(mistake, 2, "Missing argument", "bt status")


# ---- --json ------------------------------------------------------------------------------


def test_status_json(small_run):
    proc = run_bt("status", small_run.parent, "--json")
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(proc.stdout)
    assert run["run"] == str(small_run) and "B=4" in run["title"]
    [cell] = run["cells"]
    assert cell["cell_id"] == "fake:arith/L5/r0" and cell["probes"] == "4:1/2 8:1/2"
    assert sum(run["counts"].values()) == 1


def test_verify_json_intact_and_damaged(small_run, tmp_path):
    proc = run_bt("verify", small_run, "--json")
    assert proc.returncode == 0, proc.stderr
    [rep] = json.loads(proc.stdout)
    assert rep["intact"] is True and rep["problems"] == [] and rep["samples"] == 7
    assert rep["schema"] == 3 and rep["coverage"]

    import sqlite3

    damaged = write_run(tmp_path / "damaged")
    with sqlite3.connect(damaged / "store.sqlite") as conn:
        conn.execute("UPDATE samples SET text = 'changed' WHERE kind = 'restart'")
    conn.close()
    proc = run_bt("verify", damaged, "--json")
    assert proc.returncode == 1  # the same exit status as without --json
    [rep] = json.loads(proc.stdout)  # stdout stays one JSON document
    assert rep["intact"] is False and rep["problems"]
    assert "damaged" in proc.stderr


def test_cohorts_list_json():
    proc = run_bt("cohorts", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {"math89", "math500", "arith"} <= set(rows)
    assert rows["arith"]["rows"] == 3 and rows["arith"]["families"] == ["arith"]
    assert len(rows["math500"]["digest"]) == 64 and rows["math500"]["error"] is None


def test_models_list_json(tmp_path):
    proc = run_bt("models", "list", "--json", HF_HOME=str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr
    rows = {r["alias"]: r for r in json.loads(proc.stdout)}
    assert rows["ministral3-3b"]["repo"] == "mlx-community/Ministral-3-3B-Reasoning-2512-4bit"
    assert rows["ministral3-3b"]["local"] is False and "smollm2-135m" in rows


# ---- help summaries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "group", [(), ("cohorts",), ("models",), ("report",)], ids=lambda g: " ".join(g) or "bt"
)
def test_every_command_summary_is_whole_on_one_line(group):
    """At 80 columns no summary is cut ("...") or runs onto a second line, and each is a
    sentence."""
    proc = run_bt(*group, "--help", COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    listing = proc.stdout.split("\nCommands:\n", 1)[1].rstrip("\n").splitlines()
    assert listing
    for line in listing:
        assert re.match(r"^  \S+ +\S", line), line  # every line names a command: no wrapping
        assert not line.endswith("...") and line.endswith("."), line
        assert len(line) <= 80, line


# ---- broken pipes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("status", "RUN"),
        ("verify", "RUN"),
        ("cohorts", "list"),
        ("cohorts", "show", "math500"),
        ("models", "list"),
    ],
    ids=" ".join,
)
def test_a_reader_that_stops_early_ends_bt_with_0(args, small_run):
    """`bt status runs/ | head -1`: the reader is gone before bt writes; bt exits 0, silently."""
    argv = [str(small_run) if a == "RUN" else a for a in args]
    proc = subprocess.Popen(
        [str(BT), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=bt_env(), text=True
    )
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert err == "", err


# ---- models list prints hub ids whole ----------------------------------------------------


def _cached(hf_home: Path, repo: str) -> None:
    """`repo` as the Hugging Face cache holds a downloaded snapshot (refs/main -> snapshots/)."""
    folder = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)


def test_models_list_keeps_hub_ids_whole_beside_long_paths(tmp_path):
    hf_home = tmp_path / ("a-long-folder-name-" * 4) / "hf"
    repos = [
        "mlx-community/Ministral-3-3B-Reasoning-2512-4bit",
        "mlx-community/gemma-4-e4b-it-4bit",
    ]
    for repo in repos:
        _cached(hf_home, repo)
    proc = run_bt("models", "list", HF_HOME=str(hf_home), COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    for repo in [*repos, "mlx-community/Qwen3-4B-4bit"]:
        assert repo in proc.stdout, (repo, proc.stdout)
    assert "…" not in proc.stdout
    rows = {
        r["alias"]: r
        for r in json.loads(run_bt("models", "list", "--json", HF_HOME=str(hf_home)).stdout)
    }
    assert rows["ministral3-3b"]["local"] is True and rows["qwen3-4b"]["local"] is False


# ---- download commands -------------------------------------------------------------------


def test_offline_error_names_every_missing_model_with_hf_download(tmp_path):
    proc = run_bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--max-tokens",
        "4",
        "--model",
        "no-org/first,no-org/second",
        "--runs-dir",
        tmp_path / "runs",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    assert_one_line_error(
        proc, 2, "HF_HUB_OFFLINE", "hf download no-org/first", "hf download no-org/second"
    )
    assert "huggingface-cli" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_online_error_names_every_model_whose_download_failed(tmp_path):
    """Downloads from a hub that refuses connections (127.0.0.1, a closed port): one line naming
    both models and both commands, nothing written."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_bt(
        "sample",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--attempts",
        "1",
        "--max-tokens",
        "4",
        "--model",
        "no-org/first,no-org/second",
        "--runs-dir",
        tmp_path / "runs",
        HF_HUB_OFFLINE="0",
        HF_ENDPOINT=f"http://127.0.0.1:{port}",
        HF_HOME=str(tmp_path / "hf"),
        timeout=180,
    )
    assert_one_line_error(
        proc,
        2,
        "download failed",
        "no-org/first",
        "no-org/second",
        "hf download no-org/first",
        "hf download no-org/second",
    )
    assert not (tmp_path / "runs").exists()
