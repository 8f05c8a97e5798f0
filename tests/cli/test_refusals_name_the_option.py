"""Each refusal is exactly one line on stderr (exit 2) naming the option the user typed, and
nothing is written (issue 29's weak spots), through the installed `bt`.

* A status line came before the one-line error, so stderr held two lines: an HTTP backend that
  does not answer at start-up, a server that wants an API key, a port in use. What is about to
  run is now said on stdout; stderr holds the error alone.
* Messages named an internal setting: `max_prompt_tokens` for --max-prompt-tokens, `--cohort
  demo` as `task_family`, `--instrument` as `continuation.signals`, a switch to `--backend vllm`
  as `hidden_stride 8 vs 0`.
* Empty list elements were accepted (`--model X,`, `--problems a,,b`, `--topup terminal,`).
* `--runs-dir ''` wrote into the working directory.
* `bt serve --max-model-len 1000000000` was accepted beyond the model's context.
* `bt continue RUN RUN` said another bt (its own pid) was writing the run."""

from __future__ import annotations

import shutil
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt
from engine.fake_vllm import FakeVllm
from engine.serve_procs import bt_serve
from shared_runs import (
    ARITH_BASE,
    SMALL_CONTINUE,
    continued_arith_base,
    copy_of_arith_base,
)

BASE = ARITH_BASE  # the session's shared run's arguments
CONTINUE = SMALL_CONTINUE  # shared_runs
FAST = ("--retries", "0", "--request-timeout", "2")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def _refused_all(cases: list[tuple[tuple, list[str]]], cwd: Path | None = None) -> list:
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda case: run_bt(*case[0], cwd=cwd, timeout=180), cases))
    return [
        assert_one_line_error(proc, 2, *needles)
        for proc, (_, needles) in zip(procs, cases, strict=True)
    ]


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, arith_base_run):
    """A base run of the tiny model (mlx; `BASE`, the session's shared one copied) and a copy
    of it continued without --instrument (`CONTINUE`: the worker's shared one, copied)."""
    root = tmp_path_factory.mktemp("weak")
    copy_of_arith_base(arith_base_run, root)
    shutil.copytree(continued_arith_base(arith_base_run, tmp_path_factory), root / "cont")
    return {"root": root, "base": root / "base", "cont": root / "cont", "model": tiny_model_dir}


# ---- one line on stderr: the status line goes to stdout ---------------------------------------


def test_an_endpoint_that_does_not_answer_is_stderrs_only_line(runs, tmp_path: Path) -> None:
    fake = FakeVllm()  # a base run made over HTTP, to be continued when nothing answers
    try:  # setup, not what is tested: made by the app in this process (shared_runs)
        bt_in_process(
            "base",
            *BASE,
            "--model",
            runs["model"],
            "--runs-dir",
            tmp_path,
            "--run",
            "base",
            "--backend",
            "vllm",
            "--endpoint",
            fake.url,
            *FAST,
        )
    finally:
        fake.close()
    dead = _closed_port_url()
    remote = ("--backend", "vllm", "--endpoint", dead, *FAST)
    base = tmp_path / "base"
    before = _snapshot(base)
    procs = [
        run_bt("base", *BASE, "--model", runs["model"], "--runs-dir", tmp_path / "new", *remote),
        run_bt(
            "sample",
            *BASE,
            "--attempts",
            "1",
            "--model",
            runs["model"],
            "--runs-dir",
            tmp_path / "new",
            *remote,
        ),
        run_bt("continue", base, *CONTINUE, *remote),
    ]
    for proc in procs:
        assert_one_line_error(proc, 2, "--endpoint: no endpoint answers", dead)
    assert "1 problem of arith" in procs[0].stdout  # what was about to run, on stdout
    assert not (tmp_path / "new").exists() and _snapshot(base) == before


def test_a_server_that_wants_a_key_is_stderrs_only_line(runs, tmp_path: Path) -> None:
    with bt_serve(runs["model"], extra=("--api-key", "sekret-29")) as (srv,):
        procs = [
            run_bt(
                "base",
                *BASE,
                "--model",
                runs["model"],
                "--runs-dir",
                tmp_path,
                "--backend",
                "vllm",
                "--endpoint",
                srv.url,
                *FAST,
                **env,
            )
            for env in ({}, {"BT_API_KEY": "wrong"})
        ]
    for proc in procs:
        assert_one_line_error(proc, 2, "HTTP 401: missing or wrong API key", "--api-key")
    assert list(tmp_path.iterdir()) == []


def test_a_port_in_use_is_one_line(runs) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = run_bt("serve", "--model", runs["model"], "--port", port, timeout=120)
    assert_one_line_error(proc, 2, "--host/--port", f"127.0.0.1:{port}", "Address already in use")


# ---- the option the user typed --------------------------------------------------------------


def test_refusals_name_the_option_typed(runs, tmp_path: Path) -> None:
    cohort = tmp_path / "long.jsonl"
    cohort.write_text(
        '{"id": "p1", "problem": "' + "Add the numbers. " * 40 + '", "answer": "1"}\n'
    )
    snaps = _snapshot(runs["root"])
    _refused_all(
        [
            (
                (
                    "base",
                    *BASE,
                    "--model",
                    runs["model"],
                    "--runs-dir",
                    tmp_path / "r",
                    "--max-prompt-tokens",
                    "0",
                ),
                ["--max-prompt-tokens:", "got 0"],
            ),
            (
                (
                    "base",
                    "--cohort",
                    cohort,
                    "--model",
                    runs["model"],
                    "--runs-dir",
                    tmp_path / "r",
                    "--max-prompt-tokens",
                    "50",
                ),
                ["over the --max-prompt-tokens limit of 50"],
            ),
            (
                (
                    "base",
                    "--cohort",
                    "demo",
                    "--limit",
                    "1",
                    "--max-tokens",
                    "24",
                    "--model",
                    runs["model"],
                    "--runs-dir",
                    runs["root"],
                    "--run",
                    "base",
                ),
                [f"{runs['base']}: --cohort:", "task_family='arith'"],
            ),
            (
                ("continue", runs["cont"], "--instrument"),
                [f"{runs['cont']}: --instrument:", "continuation.signals"],
            ),
            (
                (
                    "base",
                    *BASE,
                    "--model",
                    runs["model"],
                    "--runs-dir",
                    runs["root"],
                    "--run",
                    "base",
                    "--backend",
                    "vllm",
                    "--endpoint",
                    _closed_port_url(),
                ),
                [f"{runs['base']}: --backend:", "use --backend mlx"],
            ),
        ]
    )
    assert _snapshot(runs["root"]) == snaps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.jsonl"]


# ---- empty list elements, an empty --runs-dir ---------------------------------------------------


def test_empty_list_elements_are_refused(runs, tmp_path: Path) -> None:
    model = str(runs["model"])
    _refused_all(
        [
            (
                ("base", *BASE, "--model", f"{model},", "--runs-dir", tmp_path / "r"),
                ["--model", "element 2", "is empty"],
            ),
            (
                (
                    "sample",
                    *BASE,
                    "--attempts",
                    "1",
                    "--model",
                    f",{model}",
                    "--runs-dir",
                    tmp_path / "r",
                ),
                ["--model", "element 1", "is empty"],
            ),
            (
                (
                    "base",
                    "--cohort",
                    "arith",
                    "--problems",
                    "a,,b",
                    "--model",
                    model,
                    "--runs-dir",
                    tmp_path / "r",
                ),
                ["--problems", "element 2"],
            ),
            (
                (
                    "base",
                    *BASE,
                    "--model",
                    model,
                    "--runs-dir",
                    tmp_path / "r",
                    "--backend",
                    "vllm",
                    "--endpoint",
                    "http://127.0.0.1:8000,",
                ),
                ["--endpoint", "element 2"],
            ),
            (("classify", runs["cont"], "--topup", "terminal,"), ["--topup", "empty"]),
            (
                ("confirm", runs["cont"], "--forecast-token", "512,"),
                ["--forecast-token", "element 2"],
            ),
            (("probe", runs["cont"], "--anchors", "8,,16"), ["--anchors", "element 2"]),
        ]
    )
    assert list(tmp_path.iterdir()) == []


def test_an_empty_runs_dir_is_refused_not_the_working_directory(runs, tmp_path: Path) -> None:
    model = str(runs["model"])
    _refused_all(
        [
            (("base", *BASE, "--model", model, "--runs-dir", ""), ["--runs-dir", "empty path"]),
            (
                ("sample", *BASE, "--attempts", "1", "--model", model, "--runs-dir", ""),
                ["--runs-dir", "empty path"],
            ),
            (("continue", "--runs-dir", ""), ["--runs-dir", "empty path"]),
            (
                ("cohorts", "screen", "arith", "--name", "x", "--runs-dir", ""),
                ["--runs-dir", "empty path"],
            ),
        ],
        cwd=tmp_path,
    )
    assert list(tmp_path.iterdir()) == []


# ---- bt serve's --max-model-len -------------------------------------------------------------


def test_serve_refuses_a_max_model_len_beyond_the_context(runs) -> None:
    _refused_all(
        [
            (
                ("serve", "--model", runs["model"], "--port", "0", "--max-model-len", "1000000000"),
                ["--max-model-len", "1,048,576"],
            ),
            (
                ("serve", "--model", runs["model"], "--port", "0", "--max-model-len", "9000"),
                ["--max-model-len: 9,000 is beyond", "8,192-token context"],
            ),
        ]
    )


def test_a_run_named_twice_is_one_run(runs) -> None:
    """`bt continue RUN RUN` said another bt (its own pid) was writing the run."""
    before = _snapshot(runs["cont"])
    proc = run_bt("continue", runs["cont"], runs["cont"].parent / "." / runs["cont"].name)
    assert proc.returncode == 0, proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert said.count("nothing to do") == 1 and "another bt" not in said, said
    assert _snapshot(runs["cont"]) == before
