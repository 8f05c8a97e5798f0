"""The local Hugging Face cache: is a model there, fetch it when the network is allowed, and keep
loading of local folders off the network.

huggingface_hub and mlx_lm are imported inside the functions: `bt models list` and the other
commands that never load a model should not pay for them at start-up."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TRUE = ("1", "true", "True", "YES", "yes")


def offline_requested() -> bool:
    """Whether the user set HF_HUB_OFFLINE: nothing may be downloaded then."""
    return os.environ.get("HF_HUB_OFFLINE") in _TRUE


def snapshot(repo: str, *, local_only: bool = True) -> Path:
    """The folder of `repo`'s snapshot (the files mlx-lm loads). With `local_only` the cache is
    only read; otherwise a missing snapshot is downloaded. Raises what huggingface_hub raises."""
    from huggingface_hub import snapshot_download
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    return Path(
        snapshot_download(repo, local_files_only=local_only, allow_patterns=DEFAULT_ALLOW_PATTERNS)
    )


def local_snapshot(repo: str) -> Path | None:
    """The cached snapshot of `repo`, or None when it is not in the local cache.

    Read from the cache's own layout (`models--ORG--NAME/refs/main` names the commit whose
    folder is `snapshots/COMMIT`), which is all `snapshot_download(local_files_only=True)` looks
    at, without importing huggingface_hub's downloader or mlx_lm: `bt models list` and every
    `--dry-run` ask this for each model and should answer at once."""
    from huggingface_hub.constants import HF_HUB_CACHE  # paths from the environment only

    folder = Path(HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
    try:
        commit = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snap = folder / "snapshots" / commit
    return snap if commit and snap.is_dir() else None


def hub_file(repo: str, filename: str) -> Path:
    """One file of `repo` from the cache (downloaded only when HF_HUB_OFFLINE is not set)."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo, filename, local_files_only=offline_requested()))


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """HF_HUB_OFFLINE=1 while loading a folder that is already local (nothing may touch the
    network), restored afterwards so a later hub model in the same process can still download."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    consts: Any = None
    try:
        import huggingface_hub.constants as hub_constants  # read at import time; patch it too

        old_const = hub_constants.HF_HUB_OFFLINE
        hub_constants.HF_HUB_OFFLINE = True
        consts = hub_constants
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
