"""This machine's index of the local model folders bt has loaded: model id -> every folder.

Why: a run records a local model by its weights ("local:<16 hex>" of the content digest), never
by a path, so a later command has to find a folder holding those weights again. Identical
copies are one model, so one id can have several folders (`cp -a M M2`, both loaded); keeping
only the last one loaded lost the model when that copy was deleted while the first was intact.
So the index keeps every folder known for an id, in the order they were last loaded (newest
first); the caller checks them in turn (the weights, not the path, decide) and drops only the
ones that are gone or hold other weights now. A folder is recorded only after it loaded: a folder
that failed to load is not a place to find a model. An identical copy named beside the folder
that loaded (`bt base --model M,C`, one model and one run) is recorded then too, after a digest
match and without loading its weights a second time: every reader checks a folder's weights
before use, so the copy is where a later command finds the model once M is gone.

The index lives in the user cache (`offline.cache_root()`), never in a run. It only saves
retyping a folder, so a cache that cannot be written never stops a command. Indexes written by
an older bt (one folder per id, as a string) are read as a list of one.

Concurrent bt processes: every change is a read-modify-write under an advisory lock
(`fcntl.flock` on a file beside the index; the kernel drops it when its process ends, so it is
never stale) and lands by an atomic rename, so readers see the old index or the new one and two
`bt base` loading two copies at once both stay recorded (without the lock, the later write was
made from a read before the earlier one and dropped its folder)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from breakthrough.models import offline
from breakthrough.outputs import replace_atomic

LOCAL_INDEX = "local-folders.json"
LOCK_SUFFIX = ".lock"


def index_path() -> Path:
    """Where the index lives: beside the converted models in the user cache."""
    return offline.cache_root() / LOCAL_INDEX


def _read() -> dict[str, list[str]]:
    """The index as id -> folders; a missing or damaged file is an empty index."""
    path = index_path()
    try:
        raw = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    index: dict[str, list[str]] = {}
    for key, value in raw.items():
        folders = [value] if isinstance(value, str) else value
        if isinstance(folders, list):
            index[str(key)] = [str(f) for f in folders if isinstance(f, str)]
    return index


@contextmanager
def _changing() -> Iterator[None]:
    """Hold the index's lock while reading and rewriting it (module doc). A cache where the
    lock file cannot be made is one the index cannot be written to either: the block runs
    unlocked and `_write` ignores the failure, as it always did (the index only saves
    retyping a folder)."""
    lock = index_path().with_name(LOCAL_INDEX + LOCK_SUFFIX)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd: int | None = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        fd = None
    try:
        if fd is not None:
            _lock(fd)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _lock(fd: int) -> None:
    """Wait for the exclusive lock; a file system without locks (ENOLCK on some network
    mounts) leaves the index unlocked, as before the lock existed, rather than stop bt."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass


def _write(index: dict[str, list[str]]) -> None:
    """Replace the index atomically; an unwritable cache is ignored (module doc)."""
    path = index_path()
    kept = {k: v for k, v in index.items() if v}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(kept, indent=1, sort_keys=True)
        replace_atomic(path, lambda tmp: tmp.write_text(text))
    except OSError:
        pass


def folders_for(model_id: str) -> list[Path]:
    """Every folder recorded for `model_id`, newest first (not checked: see `forget`)."""
    return [Path(f) for f in _read().get(model_id, [])]


def remember(model_id: str, folder: Path) -> None:
    """Record that `folder` (which just loaded) holds `model_id`, first in its list; the other
    folders known for it stay."""
    where = str(Path(folder).resolve())
    if folders_for(model_id)[:1] == [Path(where)]:
        return  # already first: no lock, no write
    with _changing():
        index = _read()
        have = index.get(model_id, [])
        if have[:1] != [where]:
            index[model_id] = [where, *(f for f in have if f != where)]
            _write(index)


def remember_copies(model_id: str, folders: Iterable[Path]) -> None:
    """Record `folders` (identical copies of a folder of `model_id` that just loaded) as more
    places of it, after the folders known: they were not loaded themselves, so they never move
    ahead of one that was; a folder known already keeps its place."""
    wanted = list(dict.fromkeys(str(Path(f).resolve()) for f in folders))
    if not wanted:
        return  # no copy named: no lock, no write
    with _changing():
        index = _read()
        have = index.get(model_id, [])
        new = [f for f in wanted if f not in have]
        if new:
            index[model_id] = [*have, *new]
            _write(index)


def forget(model_id: str, folders: Iterable[Path]) -> None:
    """Drop `folders` from `model_id`'s list: they are gone or hold other weights now."""
    drop = {str(f) for f in folders}
    if not drop:
        return
    with _changing():
        index = _read()
        have = index.get(model_id, [])
        left = [f for f in have if f not in drop]
        if left != have:
            index[model_id] = left
            _write(index)
