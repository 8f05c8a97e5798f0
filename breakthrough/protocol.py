"""Protocol constants in one place (reference protocol sections 1.3-1.5, 3.1, 3.4, 4, 5).

The digest of a Protocol is part of every run's identity: a run made under other constants is
refused rather than mixed (design decision 5)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from breakthrough.errors import BtError

# Protocol 1.3, prompt "v1" (`Protocol.prompt_version`): a math user turn is the problem, a blank
# line, then TASK_INSTRUCTION; families that take a system turn get DEFAULT_SYSTEM. Changing
# either text changes every prompt, so it needs a new prompt_version.
TASK_INSTRUCTION = "Solve the problem carefully. Put only the final answer inside \\boxed{}."
DEFAULT_SYSTEM = "You are a careful mathematical assistant."

# Protocol 2.2: every base trajectory stores the float16 final-normalised hidden vectors of every
# 8th generated token (`hidden_state_stride: 8`). Not a `Protocol` constant: it changes what is
# stored, never what is generated, so it is recorded beside the protocol in a run's manifest
# (`hidden_stride`, an identity field: a run never mixes strides) and older runs keep their
# protocol digest.
HIDDEN_STRIDE = 8

# Bounds of what a protocol may ask for, so an absurd value is refused in one line before anything
# is written (never an OverflowError from SQLite or numpy after a store exists): token counts up
# to 2^20 (64x the study's 16,384-token cap), seeds that fit the engine's uint32 row keys.
MAX_TOKENS = 1 << 20
MAX_SAMPLES = 4096
MAX_SEED = 2**32 - 1

# Protocol 9.5, the confirmatory early-signal test's frozen plan (`bt confirm`): the
# pre-registered forecast point t (summaries over a base trajectory's first 512 tokens) and the
# secondary endpoint 1{R(4096) >= 0.75} on non-instant cells. Not `Protocol` fields: they fix an
# analysis of stored runs, never what a run generates, so no run's digest depends on them.
CONFIRM_FORECAST_TOKEN = 512
CONFIRM_SECONDARY_BUDGET = 4096
CONFIRM_SECONDARY_THRESHOLD = 0.75


@dataclass(frozen=True)
class Sampling:
    """Protocol 1.4: identical for all models and stages; temperature 0 means greedy."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0


@dataclass(frozen=True)
class Protocol:
    tau: float = 0.75  # solve-rate threshold for a crossing (5.1)
    delta: float = 0.5  # primary prefix-value margin (5.2)
    deltas: tuple[float, ...] = (0.25, 0.5, 0.75)
    instant_max_upper: int = 16  # "instant": a T_F event whose interval ends at <= 16 tokens (5.3)
    posterior_band: tuple[float, float] = (0.1, 0.9)  # --topup posterior: lo < P(rate>=tau) < hi
    prior: str = "jeffreys"  # Beta prior of cell rates: jeffreys Beta(1/2, 1/2), uniform Beta(1, 1)
    budget: int = 1024  # B: continuation reasoning tokens (3.3)
    answer_budget: int = 512  # answer reserve after the forced close (3.3)
    total_cap: int = 16384  # total generated tokens per branch / base trajectory (1.5)
    base_max_tokens: int = 16384
    base_seed: int = 11
    anchors: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
    refinement_rounds: int = 2
    refinement_min_width: int = 16
    samples: int = 4  # m continuations per anchor (3.4)
    topup_samples: int = 8  # adaptive 4 -> 8 (3.5)
    restart_budgets: tuple[int, ...] = (1024, 2048, 4096, 8192)
    restart_samples: int = 4
    max_prompt_tokens: int = 2048
    prompt_version: str = "v1"
    sampling: Sampling = field(default_factory=Sampling)
    # The chat template's thinking switch (`bt base --thinking`, Qwen3's `enable_thinking`):
    # "" = not asked (the template as bt's family renders it, what every run before the switch
    # did), "on" (the same prompt, for a template that has the switch), "off" (the template
    # rendered with the switch off: another prompt, so another identity).
    thinking: str = ""

    def validate(self, names: dict[str, str] | None = None) -> Protocol:
        """Refuse impossible constants before anything is written or loaded: one BtError naming
        the first bad setting by the option that sets it (`names` maps a constant to its
        option; default `OPTION_NAMES`). Returns self, so `DEFAULT.with_overrides(...).validate()`
        reads as one step."""
        opt = {**OPTION_NAMES, **(names or {})}
        for name, problem in self.problems():
            raise BtError(f"{opt.get(name, name)}: {problem}")
        return self

    def problems(self) -> list[tuple[str, str]]:
        """(constant, what is wrong with it) for every impossible constant; empty when valid."""
        out: list[tuple[str, str]] = []

        def check(name: str, ok: bool, want: str) -> None:
            if not ok:
                out.append((name, f"expected {want}, got {_show(getattr(self, name, None))}"))

        check("tau", _finite(self.tau) and 0 < self.tau <= 1, "a solve rate in (0, 1]")
        check("delta", _finite(self.delta) and 0 < self.delta < 1, "a margin in (0, 1)")
        check(
            "deltas", bool(self.deltas) and all(0 < d < 1 for d in self.deltas), "margins in (0, 1)"
        )
        lo_hi = tuple(self.posterior_band)
        check(
            "posterior_band", len(lo_hi) == 2 and 0 <= lo_hi[0] < lo_hi[1] <= 1, "0 <= lo < hi <= 1"
        )
        check("prior", self.prior in PRIORS, " or ".join(PRIORS))
        check("thinking", self.thinking in ("", *THINKING), " or ".join(THINKING))
        for name in (
            "budget",
            "answer_budget",
            "total_cap",
            "base_max_tokens",
            "max_prompt_tokens",
            "refinement_min_width",
        ):
            check(
                name,
                _positive_int(getattr(self, name), MAX_TOKENS),
                f"a positive integer <= {MAX_TOKENS:,}",
            )
        for name in ("samples", "topup_samples", "restart_samples"):
            check(
                name,
                _positive_int(getattr(self, name), MAX_SAMPLES),
                f"a positive integer <= {MAX_SAMPLES:,}",
            )
        for name in ("refinement_rounds", "instant_max_upper"):
            value = getattr(self, name)
            check(
                name,
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                "an integer >= 0",
            )
        seed = self.base_seed
        check(
            "base_seed",
            isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED,
            f"an integer in 0..{MAX_SEED}",
        )
        for name in ("anchors", "restart_budgets"):  # duplicates would be one request key twice
            values = list(getattr(self, name))
            check(
                name,
                bool(values)
                and all(_positive_int(v, MAX_TOKENS) for v in values)
                and values == sorted(set(values)),
                f"increasing positive integers <= {MAX_TOKENS:,}, each once",
            )
        s = self.sampling
        for name, ok, want in (
            ("temperature", s.temperature >= 0, ">= 0"),
            ("top_p", 0 < s.top_p <= 1, "in (0, 1]"),
            ("top_k", s.top_k >= 0, ">= 0"),
            ("min_p", 0 <= s.min_p <= 1, "in [0, 1]"),
        ):
            if not ok:
                out.append((f"sampling.{name}", f"expected {want}, got {getattr(s, name)!r}"))
        return out

    def with_overrides(self, **changes: Any) -> Protocol:
        """A copy with CLI overrides applied (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def scratch_budget(self) -> int:
        """The restart budget of the instant sub-label and of an instant cell's only restart
        (5.3, 4): R(1,024) in the study, which is B. A protocol whose B is not a restart budget
        (e.g. a small demo) uses the smallest restart budget."""
        if self.budget in self.restart_budgets:
            return int(self.budget)
        return int(min(self.restart_budgets))

    @property
    def budget_limited_at(self) -> int:
        """The restart budget C of the budget-limited rule (5.3): R(4B) >= tau, 4,096 in the
        study."""
        return int(4 * self.budget)

    def to_dict(self) -> dict:
        """Every constant, JSON-ready (tuples as lists): what a run's manifest stores."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, data: object, *, partial: bool = False) -> Protocol:
        """The inverse of `to_dict`; raises ValueError naming missing or unknown constants, or
        the first constant whose type is not its default's (a stored `"budget": "four"`: a run's
        manifest is read back by every command, so a damaged one is named, never computed
        with). With `partial`, missing constants take the defaults (manifests of older runs
        held a subset)."""
        if not isinstance(data, dict):
            raise ValueError("no protocol")
        names = {f.name for f in fields(cls)}
        if partial:
            data = {**DEFAULT.to_dict(), **{k: v for k, v in data.items() if k in names}}
        else:  # a protocol stored before a later constant existed ran under its default
            data = {**{k: getattr(DEFAULT, k) for k in ADDED_LATER}, **data}
        missing = sorted(names - set(data))
        unknown = sorted(set(data) - names)
        if missing or unknown:
            raise ValueError(
                "; ".join(
                    ([f"missing {', '.join(missing)}"] if missing else [])
                    + ([f"unknown {', '.join(unknown)}"] if unknown else [])
                )
            )
        for name, value in sorted(data.items()):
            problem = _type_problem(getattr(DEFAULT, name), value)
            if problem:
                raise ValueError(f"{name}: {problem}")
        values = dict(data)
        values["sampling"] = Sampling(**values["sampling"])
        for f in fields(cls):
            if isinstance(getattr(DEFAULT, f.name), tuple):
                values[f.name] = tuple(values[f.name])
        return cls(**values)

    def identity(self) -> dict:
        """The constants that change what gets generated (not how it is labelled): a run's
        samples are only comparable under the same identity (design decision 5)."""
        return {
            "sampling": asdict(self.sampling),
            "base_seed": self.base_seed,
            "base_max_tokens": self.base_max_tokens,
            "total_cap": self.total_cap,
            "answer_budget": self.answer_budget,
            "max_prompt_tokens": self.max_prompt_tokens,
            "prompt_version": self.prompt_version,
            # only "off" renders another prompt ("on" is refused where it would not be the
            # template's default: models.families.thinking_family), and leaving the default
            # out keeps the identity of every run made before the switch
            **({"thinking": self.thinking} if self.thinking == "off" else {}),
        }

    def identity_digest(self) -> str:
        """sha256 (16 hex) of `identity()`: part of every run manifest."""
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def digest(self) -> str:
        """sha256 of the canonical JSON of every constant; 16 hex chars."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


DEFAULT = Protocol()

PRIORS = ("jeffreys", "uniform")
THINKING = ("on", "off")  # `--thinking` values ("" = not asked)
# Constants added after runs were stored: a stored protocol without one ran under its default.
ADDED_LATER = ("thinking",)
# What an identity (`Protocol.identity`) that leaves a constant out means by it, for a refusal
# that names both settings: no "thinking" is thinking on.
IDENTITY_DEFAULTS: dict[str, Any] = {"thinking": "on"}

# The command-line option that sets each constant (what a refusal names); constants without an
# option are named as they are stored.
OPTION_NAMES: dict[str, str] = {
    "tau": "--tau",
    "delta": "--delta",
    "budget": "--budget",
    "answer_budget": "--answer-budget",
    "base_max_tokens": "--max-tokens",
    "base_seed": "--seed",
    "anchors": "--anchors",
    "samples": "--samples",
    "restart_samples": "--samples",
    "topup_samples": "--samples",
    "restart_budgets": "--restarts",
    "prior": "--prior",
    "posterior_band": "--band-lo/--band-hi",
    "max_prompt_tokens": "--max-prompt-tokens",
    "thinking": "--thinking",
}


def _type_problem(default: object, value: object) -> str | None:
    """What is wrong with the type of a stored constant, judged by its default's type (None
    when it fits): an int where an int is, a number where a float is, a list of those where a
    tuple is, the sampling constants by theirs."""

    def number(v: object, whole: bool) -> bool:
        return isinstance(v, int if whole else (int, float)) and not isinstance(v, bool)

    if isinstance(default, Sampling):
        if not isinstance(value, dict) or set(value) - set(asdict(default)):
            return f"expected an object of {', '.join(asdict(default))}, got {_show(value)}"
        for key, v in sorted(value.items()):
            whole = isinstance(getattr(default, key), int)
            if not number(v, whole):
                return f"{key}: expected {'an integer' if whole else 'a number'}, got {v!r}"
        return None
    if isinstance(default, tuple):
        whole = all(isinstance(d, int) for d in default)
        if not isinstance(value, (list, tuple)) or not all(number(v, whole) for v in value):
            return f"expected a list of {'integers' if whole else 'numbers'}, got {value!r}"
        return None
    if isinstance(default, str):
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if not number(value, isinstance(default, int)):
        return f"expected {'an integer' if isinstance(default, int) else 'a number'}, got {value!r}"
    return None


def _positive_int(value: object, high: int | None = None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1
        and (high is None or value <= high)
    )


def _finite(value: object) -> bool:
    """A real number that is not nan or infinite (nan fails every comparison silently)."""
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _show(value: object) -> str:
    """A constant as a user typed it: tuples as comma-separated values."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "(none)"
    return repr(value)
