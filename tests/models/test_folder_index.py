"""This machine's index of local model folders (models/folder_index.py): an index an older bt
wrote (one folder per weights id, as a string) still finds its folder and grows into a list, and
two bt processes recording folders of one model at the same moment both stay recorded.

Each test keeps its own `BT_CACHE_DIR`, so it reads only the index it wrote."""

from __future__ import annotations

import json
import threading

import pytest

from breakthrough.models import folder_index

MODEL = "local:0123456789abcdef"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BT_CACHE_DIR", str(tmp_path / "cache"))


def _index() -> dict:
    return json.loads(folder_index.index_path().read_text())


def test_an_index_of_one_folder_per_model_is_read_and_extended(tmp_path):
    old, new = (tmp_path / "M").resolve(), (tmp_path / "M2").resolve()
    folder_index.index_path().parent.mkdir(parents=True)
    folder_index.index_path().write_text(json.dumps({MODEL: str(old)}))  # an older bt's index
    assert folder_index.folders_for(MODEL) == [old]
    folder_index.remember(MODEL, old)  # already the one known: the file is left as it was
    assert _index() == {MODEL: str(old)}
    folder_index.remember(MODEL, new)
    assert _index() == {MODEL: [str(new), str(old)]}
    folder_index.forget(MODEL, [new])
    assert folder_index.folders_for(MODEL) == [old]


def test_two_processes_recording_one_model_at_once_both_stay(monkeypatch, tmp_path):
    """The other `bt` records its folder between this one's read of the index and its write
    (a thread here: flock excludes another open of the lock file in the same process as in
    another). Without the lock, this write, made from the older read, dropped the other folder;
    with it, the other waits, then reads this write and adds to it."""
    mine, theirs = (tmp_path / "M").resolve(), (tmp_path / "M2").resolve()
    other = threading.Thread(target=folder_index.remember, args=(MODEL, theirs))
    write = folder_index._write

    def write_after_the_other_tried(index: dict[str, list[str]]) -> None:
        if threading.current_thread() is not other and not other.is_alive():
            other.start()
            other.join(timeout=2)  # done at once when nothing stops it; else it waits for us
        write(index)

    monkeypatch.setattr(folder_index, "_write", write_after_the_other_tried)
    folder_index.remember(MODEL, mine)
    other.join()
    assert sorted(folder_index.folders_for(MODEL)) == sorted([mine, theirs])


def test_copies_are_recorded_after_the_folders_that_loaded(tmp_path):
    """A copy recorded by digest (`remember_copies`, `bt base --model M,C`) never moves ahead of
    a folder that loaded, and a folder known already keeps its place."""
    loaded, known, copy = ((tmp_path / n).resolve() for n in ("M", "K", "C"))
    folder_index.remember(MODEL, known)
    folder_index.remember(MODEL, loaded)
    folder_index.remember_copies(MODEL, [copy, known, copy])
    assert folder_index.folders_for(MODEL) == [loaded, known, copy]
