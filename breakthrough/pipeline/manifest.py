"""What defines a run and what documents it: the manifest every run directory starts with.

The manifest holds the run's identity (model revision, task family, protocol digest, cohort
digest, prompt version, engine), the whole protocol (read back by every later command, never
re-inferred from samples) and the package versions. `store.RunStore.ensure_manifest` refuses a
request whose identity differs (design decision 5)."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.protocol import Protocol
from breakthrough.store import RunStore
from breakthrough.tasks.family import family_of

PACKAGES = ("mlx", "mlx-lm", "math-verify", "transformers", "numpy", "breakthrough")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def cell_id(alias: str, problem_id: str) -> str:
    """A cell is one problem x one model."""
    return f"{alias}:{problem_id}"


def run_manifest(loaded: Any, rows: Sequence[dict], protocol: Protocol, cohort: str,
                 cohort_digest: str, variant: str, engine: dict[str, Any] | None = None) -> dict:
    """What defines the run (identity fields, see store.IDENTITY_FIELDS) plus what documents it.
    `cohort_digest` is of the whole cohort file, so --limit/--problems subsets share one run;
    `engine` is the engine's `identity()` (recorded by the first generation when absent)."""
    family = family_of(rows)
    manifest = {
        "model_id": loaded.model_id,
        "model_alias": loaded.alias,
        "model_revision": loaded.revision,
        "family": loaded.family.name,
        "task_family": family,
        "protocol_digest": protocol.identity_digest(),
        "protocol": protocol.to_dict(),
        "cohort": cohort,
        "cohort_digest": cohort_digest,
        "prompt_version": protocol.prompt_version if family == "math" else f"{protocol.prompt_version}/{variant}",
        "packages": package_versions(),
        "platform": f"{platform.system()} {platform.machine()}",
    }
    if engine is not None:
        manifest["engine"] = engine
    return manifest


def check_engine(store: RunStore, engine: Any) -> None:
    """Record the engine of a run's first generation; refuse another engine later."""
    store.ensure_manifest({"engine": engine.identity()})


def check_model(store: RunStore, loaded: Any, run_dir: Path) -> None:
    man = store.manifest()
    if man.get("model_revision") != loaded.revision:
        raise BtError(f"{run_dir}: run was made with model_revision={man.get('model_revision')!r}, "
                      f"loaded {loaded.revision!r}")


def record_continuation(store: RunStore, **settings: Any) -> Protocol:
    """The run's protocol with this continuation's settings (B, anchors, samples, ...), stored
    whole in the manifest for every later command. Continuation samples at another answer
    budget would not be comparable, so that one is part of the run's identity."""
    stored = store.manifest().get("protocol") or {}
    try:
        protocol = Protocol.from_dict(stored, partial=True).with_overrides(**settings)
    except (TypeError, ValueError) as exc:
        raise BtError(f"{store.run_dir}: unreadable stored protocol ({exc})") from None
    store.ensure_manifest({"continue_answer_budget": protocol.answer_budget})
    store.update_manifest({"protocol": protocol.to_dict()})
    return protocol
