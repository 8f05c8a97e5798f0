"""What defines a run and what documents it: the manifest every run directory starts with.

The manifest holds the run's identity (model revision, task family, protocol digest, cohort
digest, prompt version, engine), the whole protocol (read back by every later command, never
re-inferred from samples) and the package versions. `store.RunStore.ensure_manifest` refuses a
request whose identity differs (design decision 5)."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from breakthrough.classify.topup import TOPUP_DEFAULT, topup_rules, topup_text
from breakthrough.errors import BtError
from breakthrough.protocol import Protocol
from breakthrough.store import RunStore, check_writable, is_run_dir

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
        check_run_name(run)
        return f"{run}-{alias}" if len(models) > 1 else run
    return f"{cohort_name}-{alias}"


# Folders under --runs-dir that bt keeps for its own runs (`bt sample`'s attempts, a screen's
# attempts): a study run by that name would share the folder that holds them.
RESERVED_RUN_NAMES = ("attempts", "screens")


def check_run_name(run: str) -> str:
    """--run: a plain name (letters, digits, '.', '_', '-'; not starting with '.' or '-'), so a
    run is always one folder directly under --runs-dir: never `../x` outside it, never `a/b`
    nested, never `-x` (an option mistyped where the name goes), never a folder bt keeps for
    other runs (`RESERVED_RUN_NAMES`)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", str(run)):
        raise BtError(
            f"--run {run!r}: a run name is a plain name (letters, digits, '.', '_', '-', "
            f"at most 128, not starting with '.' or '-'; no '/'); it names one folder under "
            f"--runs-dir"
        )
    if str(run).lower() in RESERVED_RUN_NAMES:
        raise BtError(
            f"--run {run!r}: --runs-dir/{run} is the folder bt keeps for "
            f"{'`bt sample` runs' if str(run).lower() == 'attempts' else 'screen runs'}; "
            f"choose another name"
        )
    return run


def request_identity(
    model: Any,
    rows: Sequence[dict],
    protocol: Protocol,
    cohort_digest: str,
    variant: str,
    hidden_stride: int | None = None,
    run_kind: str = "base",
) -> dict:
    """The identity fields of a `bt base` request that are known before the weights are loaded
    (`model` is a `LoadedModel` or a `loading.ModelIdentity`), plus the whole protocol so a
    refusal can name the constant that differs.

    `hidden_stride` (bt base, bt sample: the stored hidden vectors' stride, protocol 2.2) is an
    identity field: a run's trajectories all store the same tokens' vectors. A run made before
    the field existed records the stride of its first resumed request; its earlier samples have
    no rows in hidden_vectors. None: the request stores no vectors and says nothing of them."""
    # here, not with the module: the families import every grader, which `bt status` (reading
    # a manifest's top-up rules from this module) never needs
    from breakthrough.tasks.family import family_of

    family = family_of(rows)
    identity = {
        "run_kind": run_kind,  # "base" (bt base, continued by bt continue) or "sample" (attempts)
        "model_id": model.model_id,
        "model_revision": model.revision,
        "model_digest": model.digest,
        "task_family": family,
        "protocol_digest": protocol.identity_digest(),
        "protocol": protocol.to_dict(),
        "cohort_digest": cohort_digest,
        "prompt_version": protocol.prompt_version
        if family == "math"
        else f"{protocol.prompt_version}/{variant}",
    }
    if hidden_stride is not None:
        identity["hidden_stride"] = int(hidden_stride)
    return identity


def run_manifest(
    loaded: Any,
    rows: Sequence[dict],
    protocol: Protocol,
    cohort: str,
    cohort_digest: str,
    variant: str,
    engine: dict[str, Any] | None = None,
    hidden_stride: int | None = None,
    run_kind: str = "base",
) -> dict:
    """What defines the run (identity fields, see store.IDENTITY_FIELDS) plus what documents it.
    `cohort_digest` is of the whole cohort file, so --limit/--problems subsets share one run;
    `engine` is the engine's `identity()` (recorded by the first generation when absent);
    `hidden_stride` as in `request_identity`."""
    manifest = {
        **request_identity(loaded, rows, protocol, cohort_digest, variant, hidden_stride, run_kind),
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
    if not is_run_dir(run_dir):
        return
    with RunStore(run_dir, readonly=True) as store:
        store.check_identity(wanted)
    check_writable(run_dir)


def run_alias(run_dir: Path, loaded: Any) -> Any:
    """`loaded` under the display name the existing run in `run_dir` gave the same weights (its
    cells are `alias:problem`): a second folder name for one model adds no second cell. Called
    after `refuse_changed_run` (which refused other weights)."""
    from dataclasses import replace

    if not is_run_dir(run_dir):
        return loaded
    with RunStore(run_dir, readonly=True) as store:
        alias = store.manifest().get("model_alias")
    return replace(loaded, alias=alias) if isinstance(alias, str) and alias else loaded


def check_engine(store: RunStore, engine: Any) -> None:
    """Record the engine of a run's first generation; refuse another engine later."""
    store.ensure_manifest({"engine": engine.identity()})


def check_model(store: RunStore, loaded: Any, run_dir: Path) -> None:
    """The loaded model is the run's: same revision, and the same content digest when the run
    recorded one (a run made before model_digest records the first one it is continued with)."""
    man = store.manifest()
    if man.get("model_revision") != loaded.revision:
        raise BtError(
            f"{run_dir}: run was made with model_revision={man.get('model_revision')!r}, "
            f"loaded {loaded.revision!r}"
        )
    if man.get("model_digest") not in (None, loaded.digest):
        raise BtError(
            f"{run_dir}: run was made with model_digest={man['model_digest']!r}, the "
            f"loaded files have {loaded.digest!r}; a run never mixes networks"
        )
    if "model_digest" not in man and loaded.digest:
        store.update_manifest({"model_digest": loaded.digest})


def preflight_continue(
    store: RunStore,
    settings: dict[str, Any],
    backend: str | None = None,
    topup: tuple[str, ...] | None = None,
) -> None:
    """Before `bt continue` writes any run's protocol or loads a model: refuse a run whose
    manifest is empty, that is a `bt sample` run, whose settings could not run or differ from
    the ones it was continued under (`record_continuation_protocol`), whose `--topup` rules
    would drop or contradict the ones it was continued under (`resolve_topup`), whose sample rows do
    not match their checksums, that cannot be written, whose anchors lie beyond every base trace,
    whose engine backend differs from the one asked for, or whose model files no longer match its
    recorded revision and content digest, naming the setting (all known without loading any
    weights)."""
    from breakthrough.models.loading import model_identity

    man = store.manifest()
    if not man:
        raise BtError(
            f"{store.path}: the manifest is empty: the run was never started, or its "
            f"store is damaged; rerun `bt base` (or restore the store from a copy)"
        )
    if "model_id" not in man:
        raise BtError(f"{store.run_dir}: the run has no model recorded; run `bt base` first")
    if store.run_kind() != "base":
        raise BtError(
            f"{store.run_dir}: a `bt sample` run (independent attempts), not a `bt base` "
            f"run; bt continue continues base traces (run `bt base` for this cohort)"
        )
    protocol = record_continuation_protocol(store, **settings)
    resolve_topup(store.run_dir, man, topup)
    store.check_where()  # every row the cell programs will read, up front
    check_writable(store.run_dir)
    longest = store.longest_base_reasoning()
    if longest is not None and protocol.anchors[0] > longest:
        raise BtError(
            f"--anchors {','.join(map(str, protocol.anchors))}: beyond every base "
            f"trace of {store.run_dir} (the longest has {longest:,} reasoning tokens); "
            f"no probe would run: use anchors up to {longest:,}"
        )
    have_backend = (man.get("engine") or {}).get("backend")
    if backend and have_backend and have_backend != backend:
        raise BtError(
            f"{store.run_dir}: --backend: run was made with engine.backend={have_backend!r}, this "
            f"request has engine.backend={backend!r}; a run never mixes backends "
            f"(use --backend {have_backend})"
        )
    ident = model_identity(man["model_id"])
    if man.get("model_revision") not in (None, ident.revision):
        raise BtError(
            f"{store.run_dir}: run was made with model_revision="
            f"{man['model_revision']!r}, the model {man['model_id']} is now {ident.revision!r}"
        )
    if man.get("model_digest") not in (None, ident.digest):
        raise BtError(
            f"{store.run_dir}: run was made with model_digest={man['model_digest']!r}, "
            f"the files of {man['model_id']} now have {ident.digest!r} (model_digest "
            f"{man['model_digest']} vs {ident.digest}); a run never mixes networks: "
            f"restore the model's files or start a new run"
        )


def record_continuation_protocol(store: RunStore, **settings: Any) -> Protocol:
    """The protocol a continuation will store (the run's, with `settings`), validated,
    and refused when its answer budget differs from the run's continuations; writes nothing
    (`--dry-run` reads it from a read-only store)."""
    man = store.manifest()
    stored = man.get("protocol") or {}
    try:
        protocol = Protocol.from_dict(stored, partial=True).with_overrides(**settings)
    except (TypeError, ValueError) as exc:
        raise BtError(f"{store.run_dir}: unreadable stored protocol ({exc})") from None
    protocol.validate()  # nothing is written for settings that could not run
    if "continue_answer_budget" in man:  # continued before: its settings are the run's protocol
        refuse_changed_settings(store.run_dir, Protocol.from_dict(stored, partial=True), settings)
    store.check_identity({"continue_answer_budget": protocol.answer_budget})
    return protocol


# What `bt continue` may set, in the order a refusal names them: each changes what is generated
# (B, the answer reserve, the anchor grid, the restart budgets, the sample counts) or how it is
# labelled and topped up (tau).
CONTINUE_SETTINGS = ("budget", "answer_budget", "anchors", "restart_budgets", "samples", "tau")


def refuse_changed_settings(run_dir: Path, have: Protocol, settings: dict[str, Any]) -> None:
    """One rule for every continuation setting: a value asked for that differs from the one the
    run was continued under is refused, naming stored vs asked (a run never mixes protocols).
    Settings not given (None) take the run's."""
    from breakthrough.protocol import OPTION_NAMES

    for key in CONTINUE_SETTINGS:
        asked = settings.get(key)
        if asked is None:
            continue
        was = getattr(have, key)
        same = (
            list(map(int, was)) == list(map(int, asked))
            if isinstance(was, tuple)
            else float(was) == float(asked)
        )
        if same:
            continue
        opt = OPTION_NAMES.get(key, key)

        def show(v: object) -> str:
            return ",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)

        hint = (
            " (adding a second probe budget is a separate, explicit operation: its own arm, "
            "never --budget)"
            if key == "budget"
            else ""
        )
        raise BtError(
            f"{run_dir}: run was continued with {opt} {show(was)}, this request has "
            f"{opt} {show(asked)} (stored {show(was)} vs asked {show(asked)}); a run "
            f"holds one protocol: leave {opt} out to use the run's{hint}, or start a "
            f"new run"
        )


# The manifest entry that records the `--topup` rules a run was continued under, as their
# canonical text ("terminal,ambiguous", "none"): every rule any continuation of the run ran.
TOPUP_KEY = "topup"


@dataclass(frozen=True)
class TopupChoice:
    """The `--topup` rules one `bt continue` runs on one run, and where they come from.

    A run's top-up rules are a continuation setting like B or τ, with one difference: they are
    only ever added to. Not given, they are the ones the run records (`TOPUP_KEY`); a rule
    named beyond them is added, run and recorded; `none`, or a rule that cannot join them
    ("posterior" beside "ambiguous"), is refused (`resolve_topup`). A run that records none
    (never continued, or continued by a bt that did not record them) runs the default
    ("terminal,ambiguous", as every bt before did) or the rules named."""

    rules: tuple[str, ...]  # what this continuation runs (() = none)
    stored: tuple[str, ...] | None  # the run's record before it; None: the run records none
    asked: tuple[str, ...] | None  # --topup as given; None: not given
    continued_before: bool = False  # the run was continued before (its record may be missing)

    @property
    def text(self) -> str:
        return topup_text(self.rules)

    @property
    def added(self) -> tuple[str, ...]:
        """Rules named beyond the run's recorded ones (empty when the run records none)."""
        if self.stored is None:
            return ()
        return tuple(r for r in self.rules if r not in self.stored)

    def describe(self) -> str:
        """The rules and their source, as `bt continue` and `bt status` print them."""
        if self.stored is not None:
            if self.added:
                was = topup_text(self.stored)
                return f"{self.text} (the run's {was}, adding {','.join(self.added)})"
            return f"{self.text} (the run's)"
        if self.asked is not None:
            return f"{self.text} (as asked)"
        if self.continued_before:
            return (
                f"{self.text} (the default: the run was continued before bt recorded its "
                f"top-up rules)"
            )
        return f"{self.text} (the default)"

    def added_note(self) -> str:
        """The closing line's words for a rule this continuation added to the run's record."""
        if not self.added:
            return ""
        return (
            f"added top-up rule{'s' if len(self.added) > 1 else ''} "
            f"{','.join(self.added)} to the run's {topup_text(self.stored or ())} "
            f"(recorded: a plain `bt continue` now runs {self.text})"
        )


def stored_topup(man: dict[str, Any], run_dir: Path | str = "") -> tuple[str, ...] | None:
    """The `--topup` rules a run records (`TOPUP_KEY`), or None when it records none."""
    if TOPUP_KEY not in man:
        return None
    try:
        return topup_rules(str(man[TOPUP_KEY]))
    except ValueError as exc:
        raise BtError(
            f"{run_dir}: unreadable top-up rules {man[TOPUP_KEY]!r} in the manifest ({exc})"
        ) from None


def resolve_topup(
    run_dir: Path | str, man: dict[str, Any], asked: tuple[str, ...] | None
) -> TopupChoice:
    """The top-up rules a continuation of the run with manifest `man` runs (`TopupChoice`):
    `asked` (the parsed `--topup`; None: not given) joined to the run's recorded rules.
    Refused, naming stored vs asked: `--topup none` on a run that records rules (a run's
    top-ups are only added to), and a rule that cannot join the recorded ones."""
    stored = stored_topup(man, run_dir)
    before = "continue_answer_budget" in man
    if stored is None:
        rules = topup_rules(TOPUP_DEFAULT) if asked is None else tuple(asked)
        return TopupChoice(rules, None, asked, before)
    if asked is None:
        return TopupChoice(stored, stored, None, before)
    was, now = topup_text(stored), topup_text(asked)
    if not asked and stored:
        raise BtError(
            f"{run_dir}: run was continued with --topup {was}, this request has "
            f"--topup none (stored {was} vs asked none); a run's top-up rules are "
            f"only added to: leave --topup out to use the run's, or start a new run"
        )
    try:
        rules = topup_rules(set(stored) | set(asked))
    except ValueError:  # "ambiguous" and "posterior": two answers to one question
        raise BtError(
            f"{run_dir}: run was continued with --topup {was}, this request has "
            f"--topup {now} (stored {was} vs asked {now}); 'ambiguous' and "
            f"'posterior' are alternative rules for the same cells and a run's top-up "
            f"rules are only added to: leave --topup out to use the run's, or start a "
            f"new run"
        ) from None
    return TopupChoice(rules, stored, asked, before)


def record_topup(store: RunStore, rules: tuple[str, ...]) -> str:
    """Record that the run was continued under `rules`: the run's recorded rules joined with
    them (what a later plain `bt continue` runs). Returns the recorded text."""
    stored = stored_topup(store.manifest(), store.run_dir) or ()
    try:
        text = topup_text(set(stored) | set(rules))
    except ValueError as exc:  # callers resolve first (`resolve_topup`); an API caller may not
        raise BtError(
            f"{store.run_dir}: --topup {topup_text(rules)} cannot join the run's "
            f"{topup_text(stored)}: {exc}"
        ) from None
    if store.manifest().get(TOPUP_KEY) != text:
        store.update_manifest({TOPUP_KEY: text})
    return text


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

    return (
        f"{platform.system()} {platform.machine()} {platform.processor() or '?'} x{os.cpu_count()}"
    )


def record_throughput(
    store: RunStore,
    phase: str,
    tokens: int,
    seconds: float,
    *,
    batch_size: int | None = None,
    occupancy: float | None = None,
) -> None:
    """Store the generated tokens/s `bt base` / `bt continue` (`phase`) just measured on this
    machine, with the batch size and mean batch occupancy it ran at, for `--dry-run` ETAs: under
    `phase` (the latest call wins) and under `phase@batch_size` (the latest at that batch size),
    since a rate measured at another batch size says little. Nothing is recorded when nothing
    was generated."""
    if tokens <= 0 or seconds <= 0:
        return
    got = dict(store.manifest().get("throughput") or {})
    rec = {
        "generated_tokens": int(tokens),
        "elapsed_s": round(float(seconds), 3),
        "tokens_per_s": round(tokens / seconds, 3),
        "machine": machine_name(),
    }
    if batch_size is not None:
        rec["batch_size"] = int(batch_size)
    if occupancy is not None:
        rec["occupancy"] = round(float(occupancy), 4)
    got[phase] = rec
    if batch_size is not None:
        got[f"{phase}@{int(batch_size)}"] = rec
    store.update_manifest({"throughput": got})
