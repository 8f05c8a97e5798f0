"""Model loading: the tiny local folder, family override, and the one-line refusals."""

from __future__ import annotations

import pytest

from breakthrough.errors import BtError
from breakthrough.models.loading import load_model


def test_tiny_model_loads_as_plain_local_folder(tiny_model):
    assert tiny_model.family.name == "plain"
    assert tiny_model.revision.startswith("local:")
    assert 2 in tiny_model.eos_ids


def test_load_errors(monkeypatch, tmp_path, tiny_model_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BtError, match="not in the local Hugging Face cache"):
        load_model("bt-tests/surely-not-cached-model-4bit")
    with pytest.raises(BtError, match="unknown model"):
        load_model("no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BtError, match="no config.json"):
        load_model(str(tmp_path / "empty"))
    with pytest.raises(BtError, match="unknown family"):
        load_model(str(tiny_model_dir), family="nope")
    assert load_model(str(tiny_model_dir), family="qwen").family.name == "qwen"
