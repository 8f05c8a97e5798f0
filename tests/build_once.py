"""Session fixtures built once per test session, not once per xdist worker.

`make test` runs two workers, each its own pytest session, so a plain session fixture (the
tiny model's folder, the classified run of the report tests, the hub-shaped checkpoints) would
be built in every worker that needs it. pytest-xdist's documented answer: build into the
directory all workers share (`tmp_path_factory.getbasetemp().parent`, this session's `pytest-N`)
under a file lock; the first worker builds, the others wait on the lock and then read what it
wrote. A marker written last says the build finished, so a build that failed or was interrupted
is never read as done: the next worker builds it again and reports its own error.

What is built here is shared between processes, so a test treats it as read-only (it copies a
run before writing into it). Without xdist everything goes into the session's own temporary
directory (`getbasetemp().parent` is then the folder of every pytest session of the user)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The folder this session's workers share (the session's own one without xdist)."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "built-once"
    root.mkdir(exist_ok=True)
    return root


def once(root: Path, name: str, build: Callable[[], object]) -> None:
    """Run `build()` unless a worker of this session already finished the build `name`."""
    done = root / f".{name}.built"
    with FileLock(str(root / f".{name}.lock")):
        if not done.is_file():
            build()
            done.write_text("")


def build_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name`, filled by `build(folder)` exactly once in this session across all
    workers; returns the folder."""
    root = shared_root(factory)
    folder = root / name

    def fill() -> None:
        if folder.exists():  # what a failed build left
            shutil.rmtree(folder)
        folder.mkdir()
        build(folder)

    once(root, name, fill)
    return folder
