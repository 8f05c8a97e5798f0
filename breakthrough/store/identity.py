"""A run's identity and its manifest's shape: which manifest keys define the experiment
(`IDENTITY_FIELDS`), what each manifest value must be (`MANIFEST_SCHEMA`), and the one-line
refusal of a request whose identity differs, naming the first differing setting and the
option a user types to set it (protocol 8.2: a run is never mixed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.protocol import IDENTITY_DEFAULTS, OPTION_NAMES, Protocol
from breakthrough.store.records import OLDEST_SCHEMA, SCHEMA_VERSION, _short

# Manifest keys that define a run's identity; any difference means "another experiment".
IDENTITY_FIELDS = (
    "schema_version",
    "run_kind",  # base | sample: `bt continue` never writes into a `bt sample` run
    "model_id",
    "model_revision",
    "model_digest",  # models.digest: the content of every file that changes generated tokens
    "family",
    "task_family",
    "protocol_digest",
    "cohort_digest",
    "prompt_version",
    "continue_answer_budget",
    "engine",
    "hidden_stride",  # stored hidden vectors (protocol 2.2): every Nth token, 0 none
    "continuation",  # what continuations store and when they end (pipeline.cell_loop)
)

# The option a user types to set each identity field (a refusal names it first, then the
# stored setting): `--cohort demo` into an arith run is a --cohort refusal, not "task_family".
IDENTITY_OPTIONS = {
    "model_id": "--model",
    "model_revision": "--model",
    "model_digest": "--model",
    "family": "--model",
    "task_family": "--cohort",
    "cohort_digest": "--cohort",
    "continue_answer_budget": "--answer-budget",
    "hidden_stride": "--hidden-stride",
    "continuation.signals": "--instrument",
    "continuation.kv_bits": "--kv-bits",
    "engine.backend": "--backend",
    "engine.server": "--endpoint",
    "engine.server_version": "--endpoint",
    "engine.model": "--endpoint",
}


def identity_option(name: str) -> str | None:
    """The option that sets identity field `name` (`protocol.budget` -> --budget,
    `continuation.signals` -> --instrument), or None when no option sets it."""
    if name.startswith("protocol."):
        return OPTION_NAMES.get(name.split(".")[1])
    return IDENTITY_OPTIONS.get(name)


def _schema_number(value: Any) -> int | None:
    """A manifest's schema_version as a number ("3" or 3), None when it is not one."""
    try:
        return int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    except ValueError:
        return None


def _expect(
    kind: type | tuple[type, ...], what: str, ok: Callable[[Any], bool] = bool
) -> Callable[[Any], str | None]:
    return lambda v: (
        None
        if isinstance(v, kind) and not isinstance(v, bool) and ok(v)
        else f"expected {what}, got {_short(v)[:60]}"
    )


def _protocol_problem(value: Any) -> str | None:
    """A stored protocol that cannot be read back, or holds a constant no run could have run
    under (a subset of the constants is an older bt's, read with the defaults)."""
    try:
        problems = Protocol.from_dict(value, partial=True).problems()
    except (TypeError, ValueError) as exc:
        return str(exc)
    return f"{problems[0][0]}: {problems[0][1]}" if problems else None


_TEXT = _expect(str, "a string", lambda v: True)
_NAME = _expect(str, "a non-empty string")
_OBJECT = _expect(dict, "an object", lambda v: True)
# What each manifest value must be (`manifest_problems`), checked on every open of a store,
# read-only or not, and before a value is written: a damaged manifest is named (its key and what
# it holds) and never computed with. Keys not listed are documentation and are only JSON.
MANIFEST_SCHEMA: dict[str, Callable[[Any], str | None]] = {
    "schema_version": lambda v: (
        None
        if OLDEST_SCHEMA <= (_schema_number(v) or 0) <= int(SCHEMA_VERSION)
        else f"expected a schema number {OLDEST_SCHEMA}..{SCHEMA_VERSION}, got {_short(v)[:60]}"
    ),
    "run_kind": lambda v: (
        None if v in ("base", "sample") else f"expected base or sample, got {v!r}"
    ),
    "model_id": _NAME,
    "model_revision": _TEXT,
    "model_digest": _NAME,
    "model_alias": _NAME,
    "family": _NAME,
    "task_family": _NAME,
    "protocol_digest": _NAME,
    "cohort": _NAME,
    "cohort_digest": _NAME,
    "prompt_version": _NAME,
    "platform": _TEXT,
    "protocol": _protocol_problem,
    "continue_answer_budget": _expect(int, "a positive integer", lambda v: v > 0),
    "hidden_stride": _expect(int, "an integer >= 0", lambda v: v >= 0),
    "engine": _OBJECT,
    "continuation": _OBJECT,
    "packages": _OBJECT,
    "throughput": _OBJECT,
    "attempts": _OBJECT,
    "topup": _NAME,
    "probe_arms": _expect(list, "a list of objects", lambda v: all(isinstance(a, dict) for a in v)),
}
# What every run's manifest holds from its first write (`bt base`, `bt sample`) on.
MANIFEST_REQUIRED = ("schema_version", "model_id", "cohort_digest", "protocol")


def manifest_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, what is wrong) for every manifest entry that is not JSON, required key that is
    missing and value that does not fit `MANIFEST_SCHEMA`; `raw` is key -> the stored JSON
    text. An empty manifest (a store whose first write has not happened) has none."""
    if not raw:
        return []
    out = [(key, "missing") for key in MANIFEST_REQUIRED if key not in raw]
    for key, text in sorted(raw.items()):
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            out.append((key, f"not valid JSON ({_short(text)[:40]!r})"))
            continue
        problem = MANIFEST_SCHEMA[key](value) if key in MANIFEST_SCHEMA else None
        if problem:
            out.append((key, problem))
    return out


def check_identity(run_dir: Path, wanted: dict[str, Any], have: dict[str, Any]) -> None:
    """Refuse (one line naming `run_dir`) a request whose identity `wanted` differs from
    the run's manifest `have`, naming the first differing setting and the option that
    sets it, not two digests."""
    if "model_digest" in have and "model_digest" in wanted:
        same_weights = have["model_digest"] == wanted["model_digest"]
    else:  # a run made before model_digest: its revision
        same_weights = "model_revision" in have and have.get("model_revision") == wanted.get(
            "model_revision"
        )
    by_digest = "model_digest" in have and "model_digest" in wanted
    for key in IDENTITY_FIELDS:
        if key == "model_id" and same_weights:
            continue  # the same weights found another way (a run made when ids were paths)
        if key in ("model_id", "model_revision") and by_digest:
            continue  # the content digest decides (a copy elsewhere, a marker, a new id scheme)
        if key in wanted and key in have and have[key] != wanted[key]:
            name, was, now = _first_difference(key, have[key], wanted[key])
            if key == "protocol_digest":
                name, was, now = _protocol_difference(have, wanted) or (name, was, now)
            why = (
                " (another network: its weights, config or tokenizer files differ)"
                if key == "model_digest"
                else ""
            )
            option = identity_option(name)
            raise BtError(
                f"{run_dir}: {option + ': ' if option else ''}"
                f"run was made with {name}={was!r}, this request has "
                f"{name}={now!r} ({name} {_short(was)} vs {_short(now)}){why}; use a new run "
                f"directory (--run NAME) or the run's setting"
            )


def _protocol_difference(
    have: dict[str, Any], wanted: dict[str, Any]
) -> tuple[str, Any, Any] | None:
    """The first differing constant of the protocols' identities (what `protocol_digest` is a
    digest of), when both manifests hold a whole protocol."""
    try:
        was = Protocol.from_dict(have.get("protocol"), partial=True).identity()
        now = Protocol.from_dict(wanted.get("protocol"), partial=True).identity()
    except (TypeError, ValueError):
        return None
    # `bt continue` rewrites the stored protocol's answer budget (its own identity field), so a
    # difference there names the base request's setting only when it is the only one.
    keys = [k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
    keys.sort(key=lambda k: k == "answer_budget")
    if not keys:
        return None
    key, unset = keys[0], IDENTITY_DEFAULTS.get(keys[0])
    return _first_difference(f"protocol.{key}", was.get(key, unset), now.get(key, unset))


def _first_difference(name: str, was: Any, now: Any) -> tuple[str, Any, Any]:
    """The first differing setting inside two manifest values (dicts are compared key by key),
    so a refusal names it (e.g. `engine.backend='mlx'`) instead of two whole objects."""
    if isinstance(was, dict) and isinstance(now, dict):
        for key in sorted(set(was) | set(now)):
            if was.get(key) != now.get(key):
                return _first_difference(f"{name}.{key}", was.get(key), now.get(key))
    return name, was, now
