"""The offline model's weights format (models/offline.py: float32 on Linux CPU, 4-bit elsewhere)
is chosen per machine, overridable, and part of the model's revision."""

from __future__ import annotations

import json
import sys

import pytest

from breakthrough.errors import BtError
from breakthrough.models import offline as om


def test_default_and_override(monkeypatch):
    monkeypatch.delenv("BT_OFFLINE_WEIGHTS", raising=False)
    assert om.weights_format() == ("float32" if sys.platform == "linux" else "q4")
    monkeypatch.setenv("BT_OFFLINE_WEIGHTS", "q4")
    assert om.weights_format() == "q4"
    monkeypatch.setenv("BT_OFFLINE_WEIGHTS", "int3")
    with pytest.raises(BtError, match="BT_OFFLINE_WEIGHTS"):
        om.weights_format()


def test_revision_names_the_format(tmp_path):
    marker = {"source": "x", "source_sha256": "ab" * 32, "converter_version": "1"}
    (tmp_path / om.MARKER).write_text(json.dumps(marker))
    assert om.conversion_identity(tmp_path) == f"gguf-sha256:{'ab' * 8}/conv1"  # old folders: q4
    (tmp_path / om.MARKER).write_text(json.dumps({**marker, "weights": "float32"}))
    assert om.conversion_identity(tmp_path) == f"gguf-sha256:{'ab' * 8}/conv1/float32"


def test_a_folder_in_the_other_format_is_not_prepared(tmp_path, monkeypatch):
    monkeypatch.setenv("BT_CACHE_DIR", str(tmp_path))
    folder = om.offline_dir()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / om.MARKER).write_text(
        json.dumps({"source_sha256": "0" * 64, "converter_version": "1", "weights": "q4"})
    )
    monkeypatch.setenv("BT_OFFLINE_WEIGHTS", "q4")
    assert om.is_prepared()
    monkeypatch.setenv("BT_OFFLINE_WEIGHTS", "float32")
    assert not om.is_prepared()
