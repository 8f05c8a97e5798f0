"""The model registry: the study's aliases and the offline default, as `bt models list` shows
them."""

from __future__ import annotations

from breakthrough.models.registry import OFFLINE_DEFAULT, REGISTRY, list_models, resolve


def test_registry_aliases():
    assert REGISTRY["gemma4-e4b"].repo == "mlx-community/gemma-4-e4b-it-4bit"
    assert REGISTRY["ministral3-3b"].repo == "mlx-community/Ministral-3-3B-Reasoning-2512-4bit"
    assert REGISTRY["qwen3-4b"].repo == "mlx-community/Qwen3-4B-4bit"
    assert REGISTRY["smollm2-135m"].offline
    aliases = {r["alias"] for r in list_models()}
    assert aliases == {"gemma4-e4b", "ministral3-3b", "qwen3-4b", "smollm2-135m"}
    assert aliases == set(REGISTRY)


def test_resolve_alias_or_path():
    assert resolve("qwen3-4b") == (REGISTRY["qwen3-4b"], "mlx-community/Qwen3-4B-4bit")
    assert resolve("some/folder") == (None, "some/folder")
    assert REGISTRY[OFFLINE_DEFAULT].offline
