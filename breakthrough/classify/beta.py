"""Beta priors and the upper tail P(rate ≥ τ) of a cell rate (pure; beyond the study).

Prior: `Protocol.prior`, Jeffreys Beta(½, ½) by default (`"uniform"` gives Beta(1, 1)). For a
cell with k successes of n the posterior is Beta(a + k, b + n − k). Kept apart from
`breakthrough.classify.posterior` (which re-derives regimes under redraws) because the
`--topup posterior` rule needs the tail both where cells are enlarged
(`breakthrough.classify.plan`) and where their rates are counted
(`breakthrough.classify.pooling`), below the regime rules.
"""

from __future__ import annotations

from breakthrough.protocol import DEFAULT

# The Beta(a, b) prior of each name that `Protocol.prior` may hold.
PRIORS: dict[str, tuple[float, float]] = {"jeffreys": (0.5, 0.5), "uniform": (1.0, 1.0)}


def prior_params(prior: str) -> tuple[float, float]:
    """(a, b) of a named prior; ValueError naming the known ones."""
    try:
        return PRIORS[prior]
    except KeyError:
        raise ValueError(f"prior must be one of {sorted(PRIORS)}, got {prior!r}") from None


def describe_prior(prior: str) -> str:
    """ "jeffreys Beta(0.5, 0.5)": how summaries and reports name the prior."""
    a, b = prior_params(prior)
    return f"{prior} Beta({a:g}, {b:g})"


def prob_rate_at_least(n, k, tau: float, prior: str = DEFAULT.prior):
    """P(rate ≥ τ | k of n) under the Beta prior; arrays broadcast.

    The Beta survival function is the regularized upper incomplete beta function, taken from
    scipy.special (what `scipy.stats.beta.sf` computes, bit for bit) and imported here: importing
    scipy.stats costs `bt status` seconds on a busy machine."""
    import numpy as np
    from scipy.special import betaincc

    a, b = prior_params(prior)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return betaincc(a + k, b + n - k, tau)
