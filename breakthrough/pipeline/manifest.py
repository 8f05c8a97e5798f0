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
from breakthrough.store import STORE_FILE, RunStore
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


def run_name(run: str | None, models: Sequence[str], cohort_name: str, alias: str) -> str:
    """The run directory's name for one model of a `bt base` / `bt sample` request: --run, or
    RUN-MODEL when several models share it; without --run, COHORT-MODEL."""
    if run:
        return f"{run}-{alias}" if len(models) > 1 else run
    return f"{cohort_name}-{alias}"


def request_identity(model: Any, rows: Sequence[dict], protocol: Protocol, cohort_digest: str,
                     variant: str, hidden_stride: int | None = None) -> dict:
    """The identity fields of a `bt base` request that are known before the weights are loaded
    (`model` is a `LoadedModel` or a `loading.ModelIdentity`), plus the whole protocol so a
    refusal can name the constant that differs.

    `hidden_stride` (bt base, bt sample: the stored hidden vectors' stride, protocol 2.2) is an
    identity field: a run's trajectories all store the same tokens' vectors. A run made before
    the field existed records the stride of its first resumed request; its earlier samples have
    no rows in hidden_vectors. None: the request stores no vectors and says nothing of them."""
    family = family_of(rows)
    identity = {
        "model_id": model.model_id,
        "model_revision": model.revision,
        "task_family": family,
        "protocol_digest": protocol.identity_digest(),
        "protocol": protocol.to_dict(),
        "cohort_digest": cohort_digest,
        "prompt_version": protocol.prompt_version if family == "math" else f"{protocol.prompt_version}/{variant}",
    }
    if hidden_stride is not None:
        identity["hidden_stride"] = int(hidden_stride)
    return identity


def run_manifest(loaded: Any, rows: Sequence[dict], protocol: Protocol, cohort: str,
                 cohort_digest: str, variant: str, engine: dict[str, Any] | None = None,
                 hidden_stride: int | None = None) -> dict:
    """What defines the run (identity fields, see store.IDENTITY_FIELDS) plus what documents it.
    `cohort_digest` is of the whole cohort file, so --limit/--problems subsets share one run;
    `engine` is the engine's `identity()` (recorded by the first generation when absent);
    `hidden_stride` as in `request_identity`."""
    manifest = {
        **request_identity(loaded, rows, protocol, cohort_digest, variant, hidden_stride),
        "model_alias": loaded.alias,
        "family": loaded.family.name,
        "cohort": cohort,
        "packages": package_versions(),
        "platform": f"{platform.system()} {platform.machine()}",
    }
    if engine is not None:
        manifest["engine"] = engine
    return manifest


def refuse_changed_run(run_dir: Path, wanted: dict) -> None:
    """Before a model is loaded: refuse a request whose identity differs from the existing run
    in `run_dir` (read-only; nothing happens when there is no run yet)."""
    if not (run_dir / STORE_FILE).exists():
        return
    with RunStore(run_dir, readonly=True) as store:
        store.check_identity(wanted)


def check_engine(store: RunStore, engine: Any) -> None:
    """Record the engine of a run's first generation; refuse another engine later."""
    store.ensure_manifest({"engine": engine.identity()})


def check_model(store: RunStore, loaded: Any, run_dir: Path) -> None:
    man = store.manifest()
    if man.get("model_revision") != loaded.revision:
        raise BtError(f"{run_dir}: run was made with model_revision={man.get('model_revision')!r}, "
                      f"loaded {loaded.revision!r}")


def preflight_continue(store: RunStore, settings: dict[str, Any], backend: str | None = None) -> None:
    """Before `bt continue` writes any run's protocol or loads a model: refuse a run whose
    settings could not run or differ from its identity (`record_continuation_protocol`), whose
    engine backend differs from the one asked for, or whose model files no longer match its
    recorded revision, naming the setting (all known without loading any weights)."""
    from breakthrough.models.loading import model_identity

    record_continuation_protocol(store, **settings)
    man = store.manifest()
    if "model_id" not in man:
        raise BtError(f"{store.run_dir}: the run has no model recorded; run `bt base` first")
    have_backend = (man.get("engine") or {}).get("backend")
    if backend and have_backend and have_backend != backend:
        raise BtError(f"{store.run_dir}: run was made with engine.backend={have_backend!r}, this "
                      f"request has engine.backend={backend!r}; a run never mixes backends "
                      f"(use --backend {have_backend})")
    now = model_identity(man["model_id"]).revision
    if man.get("model_revision") not in (None, now):
        raise BtError(f"{store.run_dir}: run was made with model_revision="
                      f"{man['model_revision']!r}, the model {man['model_id']} is now {now!r}")


def record_continuation_protocol(store: RunStore, **settings: Any) -> Protocol:
    """The protocol a continuation will store (the run's, with `settings`), validated,
    and refused when its answer budget differs from the run's continuations; writes nothing
    (`--dry-run` reads it from a read-only store)."""
    stored = store.manifest().get("protocol") or {}
    try:
        protocol = Protocol.from_dict(stored, partial=True).with_overrides(**settings)
    except (TypeError, ValueError) as exc:
        raise BtError(f"{store.run_dir}: unreadable stored protocol ({exc})") from None
    protocol.validate()  # nothing is written for settings that could not run
    store.check_identity({"continue_answer_budget": protocol.answer_budget})
    return protocol


def store_protocol(store: RunStore, protocol: Protocol) -> Protocol:
    """Write `protocol` whole as the run's protocol (continuations at another answer budget are
    refused: they would not be comparable)."""
    store.ensure_manifest({"continue_answer_budget": protocol.answer_budget})
    store.update_manifest({"protocol": protocol.to_dict()})
    return protocol


def machine_name() -> str:
    """This machine as throughput records name it (system, architecture, processor, cores):
    a rate measured elsewhere says nothing about this machine."""
    import os

    return f"{platform.system()} {platform.machine()} {platform.processor() or '?'} x{os.cpu_count()}"


def record_throughput(store: RunStore, phase: str, tokens: int, seconds: float, *,
                      batch_size: int | None = None, occupancy: float | None = None) -> None:
    """Store the generated tokens/s `bt base` / `bt continue` (`phase`) just measured on this
    machine, with the batch size and mean batch occupancy it ran at, for `--dry-run` ETAs: under
    `phase` (the latest call wins) and under `phase@batch_size` (the latest at that batch size),
    since a rate measured at another batch size says little. Nothing is recorded when nothing
    was generated."""
    if tokens <= 0 or seconds <= 0:
        return
    got = dict(store.manifest().get("throughput") or {})
    rec = {"generated_tokens": int(tokens), "elapsed_s": round(float(seconds), 3),
           "tokens_per_s": round(tokens / seconds, 3), "machine": machine_name()}
    if batch_size is not None:
        rec["batch_size"] = int(batch_size)
    if occupancy is not None:
        rec["occupancy"] = round(float(occupancy), 4)
    got[phase] = rec
    if batch_size is not None:
        got[f"{phase}@{int(batch_size)}"] = rec
    store.update_manifest({"throughput": got})
