"""Beyond the study: how robust each regime label is under posterior redraws of its rates.

`regime_draws` redraws every rate a cell's labels read (`regimes.cell_counts`: the p̂ and R of
each probe and restart cell, from the counts they count, and the A1 terminal rate of the final
anchor) from its Beta posterior (`breakthrough.classify.beta`), seeded per cell so the result
does not depend on row or cell order, and re-derives the regime on the same anchors and
budgets. The design of the cell is held fixed: which anchors and budgets were measured, and
whether the cell was an A1 candidate that was replicated; so a draw can only give a label the
cell could have had (a cell that is no A1 candidate never draws `terminal_A1`).
`regime_survival` is the share of draws that reproduce the observed regime.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from breakthrough.classify.beta import prior_params, prob_rate_at_least
from breakthrough.classify.panels import PanelRow, rows_by_cell
from breakthrough.classify.regimes import cell_counts, pooling_rule, regime_of
from breakthrough.classify.settings import DEFAULT_SETTINGS, DRAWS, SEED, ClassifySettings
from breakthrough.classify.topup import TOPUP_DEFAULT
from breakthrough.protocol import DEFAULT, Protocol


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


def _beta_draws(
    rng: np.random.Generator, counts: Sequence[tuple[int, int]], a: float, b: float, draws: int
) -> np.ndarray:
    """(cells × draws) Beta(a + k, b + n − k) redraws of the rates of (n, k) counts."""
    if not counts:
        return np.zeros((0, draws))
    n = np.array([c[0] for c in counts], float)[:, None]
    k = np.array([c[1] for c in counts], float)[:, None]
    return rng.beta(a + k, b + n - k, size=(len(counts), draws))


def regime_draws(
    cell_id: str,
    probe_rows: Sequence[PanelRow],
    restart_rows: Sequence[PanelRow],
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    delta: float | None = None,
    topup: str | Iterable[str] = TOPUP_DEFAULT,
    draws: int = DRAWS,
    seed: int = SEED,
    prior: str | None = None,
) -> list[str]:
    """The regimes of `draws` posterior redraws of one cell's rates (its panel rows as
    `panels.rows_by_cell` gives them). The A1 rule reads the redrawn terminal rate only when
    the cell is an A1 candidate on its canonical labels with graded replication branches, as
    `regimes.label_panels` does."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    a, b = prior_params(protocol.prior if prior is None else prior)
    counts = cell_counts(
        probe_rows, restart_rows, tau=tau, pooled=pooling_rule(protocol, topup, tau)
    )
    rng = _cell_seed(seed, str(cell_id))
    pa, rb = sorted(counts.probe), sorted(counts.restart)
    pdraw = _beta_draws(rng, [counts.probe[t] for t in pa], a, b, draws)
    rdraw = _beta_draws(rng, [counts.restart[c] for c in rb], a, b, draws)
    tdraw = _beta_draws(rng, [counts.a1], a, b, draws)[0] if counts.a1 else None
    out = []
    for d in range(draws):
        probe = dict(zip(pa, pdraw[:, d].tolist(), strict=True))
        restart = dict(zip(rb, rdraw[:, d].tolist(), strict=True))
        term = float(tdraw[d]) if tdraw is not None else None
        out.append(
            regime_of(probe, restart, terminal_rate=term, tau=tau, delta=delta, protocol=protocol)
        )
    return out


def regime_survival(
    probe_panel: pd.DataFrame,
    restart_panel: pd.DataFrame,
    labels: pd.DataFrame,
    *,
    protocol: Protocol = DEFAULT,
    settings: ClassifySettings = DEFAULT_SETTINGS,
) -> pd.Series:
    """Per cell (index cell_id): the share of `settings.draws` posterior redraws
    (`regime_draws`, seeded by `settings.seed`) under which the regime label equals
    `labels.regime`. `settings`' τ, δ and prior override the protocol's when given;
    `settings.topup` is the `--topup` rules the labels were made under."""
    probes = rows_by_cell(probe_panel, "anchor")
    restarts = rows_by_cell(restart_panel, "budget")
    out = {}
    for cell, observed in zip(labels["cell_id"], labels["regime"], strict=True):
        got = regime_draws(
            str(cell),
            probes.get(cell, []),
            restarts.get(cell, []),
            protocol=protocol,
            tau=settings.tau,
            delta=settings.delta,
            topup=settings.rules,
            draws=settings.draws,
            seed=settings.seed,
            prior=settings.prior,
        )
        n = settings.draws
        out[cell] = sum(g == observed for g in got) / n if n else float("nan")
    return pd.Series(out, name="regime_survival", dtype=float)
