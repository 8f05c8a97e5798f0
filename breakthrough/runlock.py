"""One writing command per run at a time: an advisory lock on RUN/run.lock.

Why: two `bt base` / `bt continue` / `bt sample` on one run never duplicate a sample (the store's
unique keys see to that) but both do all the work. The second one is told who holds the run
(pid and command) and exits 2, or waits a bounded `--wait SECONDS`.

How: `fcntl.flock` on a small file in the run directory. The kernel drops the lock when its
process ends, however it ends (SIGKILL included), so a lock is never stale and nothing has to be
cleaned up. The file holds the holder's pid and command for the message and exists only while
held: the holder removes it before letting go, and a waiter checks that the file it locked is
still the one at the path (else it opens the new one), so two holders are impossible. A run
folder the lock had to make (and a runs folder it made for it) is removed again when nothing was
put in it. An OS error on the way (a read-only folder, a full disk refusing the holder's line)
is one line naming the folder or run.lock (breakthrough/outputs.py), never a traceback."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.outputs import cannot_write, make_folder, writing

LOCK_FILE = "run.lock"
POLL_S = 0.2


@contextmanager
def run_lock(run_dir: Path, *, wait: float = 0.0) -> Iterator[None]:
    """Hold the run's lock for the block; refuse at once (or after `wait` seconds) when another
    process holds it. The lock file exists only while held (its holder removes it, and a folder
    the lock had to make, before letting go)."""
    run_dir = Path(run_dir)
    made = _missing(run_dir)  # the run folder and the parents (a new --runs-dir) it makes
    make_folder(run_dir)
    path = run_dir / LOCK_FILE
    try:
        fd = _acquire(path, run_dir, wait)
    except BaseException:
        _remove_empty(made)
        raise
    try:
        with writing(path):  # a full disk: ENOSPC names no file of its own
            line = f"{os.getpid()} {' '.join(['bt', *sys.argv[1:]])[:300]}\n".encode()
            os.pwrite(fd, line, 0)
            os.ftruncate(fd, len(line))
        yield
    finally:
        path.unlink(missing_ok=True)  # still ours: only a holder removes the file
        os.close(fd)  # releases the lock
        _remove_empty(made)


def _acquire(path: Path, run_dir: Path, wait: float) -> int:
    """An fd holding the lock of `path`. A file its holder removed while this process waited
    is opened again (the lock must be on the file that is at `path` now)."""
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise cannot_write(path, exc, "cannot take the run's lock") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the previous holder removed it meanwhile: take the current file
    holder = holder_of(run_dir) or "another process"
    waited = f" after waiting {wait:g} s" if wait > 0 else ""
    raise BtError(
        f"{run_dir}: another bt is writing this run ({holder}){waited}; let it finish, "
        f"or rerun with --wait SECONDS"
    )


def held_by(run_dir: Path) -> str | None:
    """'pid N: COMMAND' (or "another process") when another process holds the run's lock now,
    None when nobody does: for a refusal that would otherwise name a symptom of the holder's
    work in progress (a run whose store its first `bt base` has not made yet, a run whose first
    `bt continue` has not committed its protocol). Probed with a shared lock taken and let go at
    once; the file is never created here."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None  # no lock file: nobody holds the run
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder_of(run_dir) or "another process"
    except OSError:
        return None
    finally:
        os.close(fd)  # closing lets go of a shared lock this probe took
    return None


def holder_of(run_dir: Path) -> str | None:
    """'pid N: COMMAND' of the lock's holder, as it wrote it (None when unreadable)."""
    try:
        text = (Path(run_dir) / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    pid, _, command = text.partition(" ")
    return f"pid {pid}: {command}" if pid.isdigit() else None


def _missing(run_dir: Path) -> list[Path]:
    """`run_dir` and its parents that do not exist yet, deepest first."""
    out = []
    for p in (run_dir, *run_dir.parents):
        if p.exists():
            break
        out.append(p)
    return out


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders this lock made (deepest first) that nothing was put in (a failed
    start leaves no empty run folder, nor an empty --runs-dir)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty: a run was made in it
