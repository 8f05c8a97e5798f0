"""Beyond the study: Beta posteriors of cell rates and how robust each regime label is.

Prior: `Protocol.prior`, Jeffreys Beta(½, ½) by default (`"uniform"` gives Beta(1, 1)). For a
cell with k successes of n the posterior is Beta(a + k, b + n − k); `prob_rate_at_least` is its
upper tail P(rate ≥ τ), which the `--topup posterior` rule of `breakthrough.classify.plan`
compares with `Protocol.posterior_band`. `regime_survival` redraws every probe and restart cell
rate of a trajectory from its posterior (seeded per cell, so the result does not depend on row
or cell order), re-derives the regime on the same anchors and budgets, and reports the share of
draws that reproduce the observed regime.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
from scipy import stats

from breakthrough.classify.panels import rows_by_cell
from breakthrough.classify.regimes import regime_of
from breakthrough.protocol import DEFAULT, Protocol

# The Beta(a, b) prior of each name that `Protocol.prior` may hold.
PRIORS: dict[str, tuple[float, float]] = {"jeffreys": (0.5, 0.5), "uniform": (1.0, 1.0)}


def prior_params(prior: str) -> tuple[float, float]:
    """(a, b) of a named prior; ValueError naming the known ones."""
    try:
        return PRIORS[prior]
    except KeyError:
        raise ValueError(f"prior must be one of {sorted(PRIORS)}, got {prior!r}") from None


def describe_prior(prior: str) -> str:
    """"jeffreys Beta(0.5, 0.5)": how summaries and reports name the prior."""
    a, b = prior_params(prior)
    return f"{prior} Beta({a:g}, {b:g})"


def prob_rate_at_least(n, k, tau: float, prior: str = DEFAULT.prior):
    """P(rate ≥ τ | k of n) under the Beta prior; arrays broadcast."""
    a, b = prior_params(prior)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return stats.beta.sf(tau, a + k, b + n - k)


def with_posterior(panel: pd.DataFrame, tau: float, prior: str = DEFAULT.prior) -> pd.DataFrame:
    """The panel plus `rate`, `post_mean` and `p_ge_tau` columns."""
    a, b = prior_params(prior)
    out = panel.copy()
    n = out["n"].astype(float)
    k = out["k"].astype(float)
    out["rate"] = k / n
    out["post_mean"] = (a + k) / (a + b + n)
    out["p_ge_tau"] = prob_rate_at_least(n, k, tau, prior) if len(out) else []
    return out


def _cell_seed(seed: int, cell_id: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(cell_id.encode())])


def regime_survival(probe_panel: pd.DataFrame, restart_panel: pd.DataFrame,
                    labels: pd.DataFrame, *, protocol: Protocol = DEFAULT,
                    tau: float | None = None, delta: float | None = None, draws: int = 200,
                    seed: int = 0, prior: str | None = None) -> pd.Series:
    """Per cell (index cell_id): the share of `draws` posterior redraws of all its cell rates
    under which the regime label equals `labels.regime`. The A1 terminal rule uses the
    redrawn final-anchor rate when that anchor holds ≥ topup_samples graded branches. τ, δ
    and the prior default to the protocol's."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    a, b = prior_params(protocol.prior if prior is None else prior)
    probes = rows_by_cell(probe_panel, "anchor")
    restarts = rows_by_cell(restart_panel, "budget")
    out = {}
    for cell, observed in zip(labels["cell_id"], labels["regime"]):
        prow, rrow = probes.get(cell, []), restarts.get(cell, [])
        rng = _cell_seed(seed, str(cell))
        pa = [r[0] for r in prow]
        rb = [r[0] for r in rrow]
        pdraw = rng.beta(a + np.array([r[2] for r in prow], float)[:, None],
                         b + np.array([r[1] - r[2] for r in prow], float)[:, None],
                         size=(len(prow), draws)) if prow else np.zeros((0, draws))
        rdraw = rng.beta(a + np.array([r[2] for r in rrow], float)[:, None],
                         b + np.array([r[1] - r[2] for r in rrow], float)[:, None],
                         size=(len(rrow), draws)) if rrow else np.zeros((0, draws))
        final_replicated = bool(prow) and max(prow)[1] >= protocol.topup_samples
        same = 0
        for d in range(draws):
            probe = dict(zip(pa, pdraw[:, d].tolist()))
            restart = dict(zip(rb, rdraw[:, d].tolist()))
            term = probe[max(pa)] if final_replicated else None
            same += regime_of(probe, restart, terminal_rate=term, tau=tau, delta=delta,
                              protocol=protocol) == observed
        out[cell] = same / draws if draws else float("nan")
    return pd.Series(out, name="regime_survival", dtype=float)
