"""A model's identity by content: one sha256 over the files that decide which tokens come out.

Why: a run must never mix networks. A marker file (the offline conversion's
`bt_conversion.json`) or a folder's name says nothing about the weights beside it: a copy with
an edited `config.json` (say `rms_norm_eps`) keeps both and is another network. So the digest
covers every file of the folder that mlx-lm or bt reads to generate (weights, `config.json`,
tokenizer files, chat template, `generation_config.json`, a system prompt), and leaves out only
what cannot change a token: bt's own markers, documentation, licences and hidden files.

Cost: the whole content is hashed once per file version (1 MiB blocks); the per-file sha256 is
cached by (path, size, mtime, inode) in the user cache, so the next command reads no weights.
The cache only saves reading: the identity is always the content's digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from breakthrough.hashing import sha256_file
from breakthrough.outputs import replace_atomic

# Files that never change what a model generates (compared by lower-case name).
IGNORED_NAMES = frozenset(
    {
        "bt_conversion.json",
        "readme.md",
        "license",
        "license.txt",
        "license.md",
        "use_policy.md",
        "notice",
        ".gitattributes",
    }
)
CACHE_FILE = "file-digests.json"
PREFIX = "sha256:"


def token_files(folder: Path) -> list[Path]:
    """The files of `folder` that can change generated tokens, in a stable order."""
    out = []
    for f in sorted(Path(folder).rglob("*")):
        rel = f.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue  # hidden files and folders (.cache of a hub download, editor files)
        if f.name.lower() in IGNORED_NAMES or f.suffix.lower() == ".md":
            continue
        if f.is_file():
            out.append(f)
    return out


def weights_digest(folder: Path, cache_dir: Path | None = None) -> str:
    """'sha256:<16 hex>' over (relative name, content sha256) of every `token_files` file:
    equal for identical copies wherever they are, different when any token-changing byte is.
    `cache_dir`: where the per-file digest cache lives (None: no cache)."""
    folder = Path(folder)
    cache = _load(cache_dir)
    changed = False
    h = hashlib.sha256()
    for f in token_files(folder):
        st = f.stat()
        key = str(f.resolve())
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = cache.get(key)
        if hit and hit[:3] == stamp:
            sha = hit[3]
        else:
            sha = sha256_file(f)
            cache[key] = [*stamp, sha]
            changed = True
        h.update(f"{f.relative_to(folder).as_posix()}\0{sha}\n".encode())
    if changed:
        _save(cache_dir, cache)
    return PREFIX + h.hexdigest()[:16]


def _load(cache_dir: Path | None) -> dict:
    if cache_dir is None:
        return {}
    try:
        data = json.loads((cache_dir / CACHE_FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(cache_dir: Path | None, cache: dict) -> None:
    """Write the cache atomically; a read-only cache only costs a re-read next time."""
    if cache_dir is None:
        return
    path = cache_dir / CACHE_FILE
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(cache, sort_keys=True)
        replace_atomic(path, lambda tmp: tmp.write_text(text))
    except OSError:
        pass
