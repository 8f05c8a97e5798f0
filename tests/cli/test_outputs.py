"""Issue 29, item 6: an OS error while writing an output reaches the user as one line naming the
file, never a traceback. Every output path and the run lock go through breakthrough/outputs.py:
`bt signals RUN -o /proc/x.parquet` (pyarrow's FileNotFoundError), `bt export RUN -o <immutable
folder>` (pyarrow's PermissionError), `bt continue` on a full disk (ENOSPC writing run.lock), and
the other writers (classify, report study, auroc) under a path that cannot be written. Each:
exit 2, one `bt: error:` line naming the path, the run unchanged, nothing left behind.

Tests run as root, so "read-only" is a folder made immutable with `chattr +i` (skipped where
chattr cannot), or a path under /proc. A full disk is a tiny tmpfs where mounting works; the run
lock's ENOSPC is also simulated everywhere by pointing run.lock at /dev/full."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store
from shared_runs import SMALL_CONTINUE, copy_of_arith_base

from breakthrough.protocol import DEFAULT

NO_SPACE = os.strerror(28)  # "No space left on device"


def _snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run but SQLite's -shm index and an empty -wal (readers touch those)."""
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


@pytest.fixture(scope="module")
def store_run(tmp_path_factory) -> Path:
    """A store with probes and restarts, written directly (no model)."""
    root = tmp_path_factory.mktemp("outputs")
    return write_store(
        root / "r", cell_spec(), DEFAULT.with_overrides(anchors=(8, 16, 32), samples=2, budget=8)
    )


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, arith_base_run) -> Path:
    """A base run of the tiny model, ready for `bt continue`
    (`ARITH_BASE`: the session's shared one, copied)."""
    return copy_of_arith_base(arith_base_run, tmp_path_factory.mktemp("outputs-base"))


CONTINUE = SMALL_CONTINUE  # shared_runs


@pytest.fixture
def immutable(tmp_path: Path):
    """An empty folder nobody, root included, can write into (chattr +i)."""
    folder = tmp_path / "immutable"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a filesystem that supports it")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 1 MiB tmpfs filled to the last block (skipped where mounting is not allowed)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs needs privileges this machine does not give")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(mnt: Path) -> None:
    """Write zeros until the filesystem refuses another byte."""
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_signals_under_proc_is_one_line(store_run: Path) -> None:
    before = _snapshot(store_run)
    proc = run_bt("signals", store_run, "-o", "/proc/x.parquet")
    assert_one_line_error(proc, 2, "/proc/x.parquet: cannot write", "No such file or directory")
    assert _snapshot(store_run) == before


@pytest.mark.heavy
def test_every_output_under_proc_is_one_line(store_run: Path, tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"{i % 3},{i},{i % 2}\n" for i in range(12)))
    before = _snapshot(store_run)
    cases = [
        (("export", store_run, "-o", "/proc/bt-export"), "/proc/bt-export: cannot make the folder"),
        (
            ("classify", store_run, "--draws", "1", "-o", "/proc/bt-classify"),
            "/proc/bt-classify: cannot make the folder",
        ),
        (("report", "study", store_run, "--out", "/proc/bt-study"), "/proc/bt-study"),
        (
            ("auroc", table, "-g", "g", "-s", "s", "-l", "y", "-b", "0", "-o", "/proc/a.json"),
            "/proc/a.json: cannot write",
        ),
    ]
    for args, words in cases:
        assert_one_line_error(run_bt(*args), 2, words)
    assert _snapshot(store_run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


@pytest.mark.heavy
def test_export_into_an_immutable_folder_is_one_line(store_run: Path, immutable: Path) -> None:
    proc = run_bt("export", store_run, "-o", immutable)
    assert_one_line_error(
        proc, 2, f"{immutable / 'samples.parquet'}: cannot write", "Operation not permitted"
    )
    proc = run_bt("signals", store_run, "-o", immutable / "s.parquet")
    assert_one_line_error(proc, 2, f"{immutable / 's.parquet'}: cannot write")
    proc = run_bt("classify", store_run, "--draws", "1", "--no-cell-pages", "-o", immutable / "c")
    assert_one_line_error(proc, 2, f"{immutable / 'c'}: cannot make the folder")
    assert list(immutable.iterdir()) == []


def test_continue_whose_lock_meets_a_full_disk_is_one_line(base_run: Path, tmp_path: Path) -> None:
    """ENOSPC writing run.lock (here /dev/full, which refuses every write so): exit 2, one line
    naming run.lock, the store unchanged, no lock left."""
    run = Path(shutil.copytree(base_run, tmp_path / "base"))
    (run / "run.lock").symlink_to("/dev/full")
    before = _snapshot(run)
    proc = run_bt("continue", run, *CONTINUE)
    assert_one_line_error(proc, 2, f"{run / 'run.lock'}: cannot write", NO_SPACE)
    assert _snapshot(run) == {k: v for k, v in before.items() if k != "run.lock"}
    assert not (run / "run.lock").exists() and not (run / "run.lock").is_symlink()


def test_a_full_disk_is_one_line_naming_the_file(
    base_run: Path, store_run: Path, full_disk: Path
) -> None:
    run = Path(shutil.copytree(base_run, full_disk / "base"))
    assert run_bt("status", run).returncode == 0  # SQLite's -shm made while there is room
    _fill(full_disk)
    before = _snapshot(run)
    proc = run_bt("continue", run, *CONTINUE)
    assert_one_line_error(proc, 2, f"{run / 'run.lock'}: cannot write", NO_SPACE)
    assert _snapshot(run) == before and not (run / "run.lock").exists()
    proc = run_bt("export", store_run, "-f", "csv", "-o", full_disk / "out")
    assert_one_line_error(proc, 2, f"{full_disk / 'out' / 'samples.csv'}: cannot write", NO_SPACE)
    assert list((full_disk / "out").iterdir()) == []
    proc = run_bt("signals", store_run, "-o", full_disk / "s.parquet")
    assert_one_line_error(proc, 2, f"{full_disk / 's.parquet'}: cannot write", NO_SPACE)
    assert sorted(p.name for p in full_disk.iterdir()) == ["base", "filler", "out"]
