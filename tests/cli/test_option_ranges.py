"""Issue 29, item 7: option values that reached a traceback. Each option now has a bounded,
checked range and a value outside it is one line naming the option, exit 2, before anything is
read or written: `bt classify --draws 1000000000000` (numpy was asked for 36 TiB), `bt classify
--seed -1` (ValueError), `--endpoint 'http://[::1'` (httpx.InvalidURL); and the same draws and
seeds of `bt report study`, `bt auroc`, `bt probe` and `bt confirm`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.protocol import DEFAULT

HUGE = "1000000000000"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def _refused_all(cases: list[tuple[tuple, list[str]]]) -> None:
    """Every `bt ARGS` of `cases` exits 2 with one line holding its needles (side by side: each
    is refused before it reads or writes)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda case: run_bt(*case[0], timeout=120), cases))
    for proc, (_args, needles) in zip(procs, cases, strict=True):
        assert_one_line_error(proc, 2, *needles)


@pytest.fixture
def store_run(tmp_path: Path) -> Path:
    return write_store(
        tmp_path / "r",
        cell_spec(),
        DEFAULT.with_overrides(anchors=(8, 16, 32), samples=2, budget=8),
    )


def test_draws_and_seeds_are_bounded(store_run: Path, tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"{i % 3},{i},{i % 2}\n" for i in range(12)))
    before = _snapshot(tmp_path)
    _refused_all(
        [
            (("classify", store_run, "--draws", HUGE), ["'--draws'", "100000"]),
            (("classify", store_run, "--seed", "-1"), ["'--seed'", "greater than or equal to 0"]),
            (("classify", store_run, "--seed", str(2**32)), ["'--seed'", "4294967295"]),
            (("report", "study", store_run, "--draws", HUGE), ["'--draws'", "100000"]),
            (("report", "study", store_run, "--seed", "-1"), ["'--seed'"]),
            (
                ("auroc", table, "-g", "g", "-s", "s", "-l", "y", "-b", HUGE),
                ["'--bootstrap'", "100000"],
            ),
            (("probe", store_run, "--bootstrap", HUGE), ["'--bootstrap'", "100000"]),
            (("confirm", store_run, "--draws", HUGE), ["'--draws'", "100000"]),
        ]
    )
    assert _snapshot(tmp_path) == before  # no classify/ or study/ folder, no JSON


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://:8000", "no host"),
        ("ftp://127.0.0.1:8000", "http or https"),
        ("http://127.0.0.1:8000,", "element 2"),
        ("http://127.0.0.1:8000,,http://127.0.0.1:8001", "element 2"),
        (",", "empty"),
    ],
)
def test_a_malformed_endpoint_is_one_line(tmp_path: Path, url: str, words: str) -> None:
    """Before anything loads or is written: no runs folder appears."""
    runs = tmp_path / "runs"
    _refused_all(
        [
            (
                (
                    "base",
                    "--cohort",
                    "demo",
                    "--runs-dir",
                    runs,
                    "--backend",
                    "vllm",
                    "--endpoint",
                    url,
                ),
                ["--endpoint", words],
            ),
            (
                (
                    "sample",
                    "--cohort",
                    "demo",
                    "--attempts",
                    "1",
                    "--runs-dir",
                    runs,
                    "--backend",
                    "vllm",
                    "--endpoint",
                    url,
                ),
                ["--endpoint", words],
            ),
        ]
    )
    assert not runs.exists()


def test_a_malformed_endpoint_leaves_a_run_as_it_was(store_run: Path) -> None:
    before = _snapshot(store_run)
    proc = run_bt("continue", store_run, "--backend", "vllm", "--endpoint", "http://[::1")
    assert_one_line_error(proc, 2, "--endpoint", "'http://[::1'", "Invalid IPv6 URL")
    assert _snapshot(store_run) == before
