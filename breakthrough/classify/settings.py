"""What `bt classify` is asked beside the runs: the overrides of each run's stored protocol (τ,
δ, the prior, the posterior band), the `--topup` rules its plan and pooling follow, and the
posterior redraws of regime survival (count and seed). One frozen value with the defaults in
one place, handed from the command (`bt classify`, `bt report study`) through
`analyses.classify_run` to `classify.frames` and `classify.posterior`.

Pure and free of pandas: command modules read the defaults at start-up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from breakthrough.classify.beta import PRIORS
from breakthrough.classify.topup import TOPUP_DEFAULT, parse_topup, topup_rules, topup_text
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT, Protocol

Band = tuple[float | None, float | None]  # (lo, hi) of P(rate ≥ τ); None keeps the run's side
DRAWS = 200  # posterior redraws per cell for regime survival
SEED = 0  # seed of the redraws (each cell's own stream: `posterior._cell_seed`)


@dataclass(frozen=True)
class ClassifySettings:
    """`bt classify`'s settings. `topup`: the `--topup` rules, as typed or already split;
    `tau`, `delta`, `prior`, `band`: overrides of the run's protocol (None keeps its value);
    `draws`, `seed`: the posterior redraws of regime survival."""

    topup: str | Iterable[str] = TOPUP_DEFAULT
    tau: float | None = None
    delta: float | None = None
    prior: str | None = None
    band: Band = (None, None)
    draws: int = DRAWS
    seed: int = SEED

    def check(self) -> ClassifySettings:
        """These settings, each refused in one line naming its option before any run is read:
        τ, δ and the prior as a protocol takes them, the band 0 ≤ lo < hi ≤ 1, the rules."""
        DEFAULT.with_overrides(tau=self.tau, delta=self.delta, prior=self.prior).validate()
        lo, hi = self.band
        if not all(b is None or 0 <= b <= 1 for b in self.band) or (
            lo is not None and hi is not None and not lo < hi
        ):
            raise BtError(f"--band-lo/--band-hi: expected 0 <= lo < hi <= 1, got {lo}, {hi}")
        self.rules  # noqa: B018 -- parsed for its refusal
        return self

    @property
    def rules(self) -> tuple[str, ...]:
        """The `--topup` rules (BtError naming --topup when they are not rules)."""
        return parse_topup(self.topup) if isinstance(self.topup, str) else topup_rules(self.topup)

    @property
    def topup_text(self) -> str:
        """The canonical `--topup` text of the rules: the key of the chosen plan."""
        return topup_text(self.rules)

    def protocol(self, stored: Protocol) -> Protocol:
        """The run's protocol `stored` with these overrides (None, also for one side of the
        band, keeps the stored value), checked: τ in (0, 1], a known prior, 0 ≤ lo < hi ≤ 1;
        BtError naming the option otherwise."""
        lo, hi = self.band
        p = stored.with_overrides(
            tau=None if self.tau is None else float(self.tau),
            delta=None if self.delta is None else float(self.delta),
            prior=self.prior,
            posterior_band=(
                stored.posterior_band[0] if lo is None else float(lo),
                stored.posterior_band[1] if hi is None else float(hi),
            ),
        )
        if not 0 < p.tau <= 1:
            raise BtError(f"--tau must be in (0, 1], got {p.tau}")
        if p.prior not in PRIORS:
            raise BtError(f"--prior must be one of {', '.join(PRIORS)}, got {p.prior!r}")
        lo, hi = p.posterior_band
        if not 0 <= lo < hi <= 1:
            raise BtError(
                f"posterior band (--band-lo, --band-hi) must satisfy 0 <= lo < hi <= 1, "
                f"got {p.posterior_band}"
            )
        return p


DEFAULT_SETTINGS = ClassifySettings()  # the run's own protocol, the study's top-up rules
