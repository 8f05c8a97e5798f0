"""A model's identity is the content of the files that change tokens (models/digest.py): equal
for copies wherever they are, different for any changed token-relevant byte, blind to markers,
documentation and hidden files, and the same whether the per-file cache was used or not."""

from __future__ import annotations

import json
import os

from breakthrough.models.digest import token_files, weights_digest


def _folder(root, **files):
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_digest_is_the_content_not_the_place_or_the_marker(tmp_path):
    files = {
        "config.json": json.dumps({"rms_norm_eps": 1e-5}),
        "model.safetensors": "W" * 5000,
        "tokenizer.json": "{}",
        "chat_template.jinja": "{{ messages }}",
    }
    a = _folder(tmp_path / "a", **files, **{"bt_conversion.json": '{"weights": "q4"}'})
    b = _folder(tmp_path / "elsewhere" / "b", **files, **{"README.md": "notes"})
    (b / ".cache").mkdir()
    (b / ".cache" / "x").write_text("download state")
    assert weights_digest(a) == weights_digest(b)
    assert [f.name for f in token_files(b)] == [
        "chat_template.jinja",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    for name, text in (
        ("config.json", json.dumps({"rms_norm_eps": 0.5})),
        ("model.safetensors", "W" * 2500 + "X" + "W" * 2499),
        ("chat_template.jinja", "{{ other }}"),
        ("generation_config.json", "{}"),
    ):
        c = _folder(tmp_path / f"c-{name}", **{**files, name: text})
        assert weights_digest(c) != weights_digest(a), name


def test_the_cache_saves_reading_but_never_decides(tmp_path):
    a = _folder(tmp_path / "a", **{"config.json": "{}", "model.safetensors": "W" * 100})
    cache = tmp_path / "cache"
    first = weights_digest(a, cache)
    assert weights_digest(a, cache) == first == weights_digest(a)
    st = (a / "model.safetensors").stat()
    (a / "model.safetensors").write_text("V" * 100)  # same size; a new mtime
    os.utime(a / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert weights_digest(a, cache) != first
