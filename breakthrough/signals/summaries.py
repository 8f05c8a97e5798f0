"""Per-trajectory summaries of the per-token signal series (protocol 9.5 and 9.8): series in,
one row of numbers out. Pure numpy / scipy, no store, no model.

Why these and no others: protocol 9.5 froze 15 summaries before the confirmatory test
(`FROZEN_SUMMARIES`), and 9.8's "stream summary" probe arm uses 8 more (`STREAM_SUMMARIES`);
changing a definition would change the pre-registered test. Definitions:

* mean / std: over the finite values of the series' first `window` tokens (std: population,
  ddof = 0);
* robust slope: Theil–Sen slope (`scipy.stats.theilslopes`) of the value against its token
  index, on at most `MAX_SLOPE_POINTS` (512) evenly spaced finite points;
* OLS slope (9.8): least-squares slope of the value against its token index;
* max rise: the largest one-step increase s_t − s_{t−1} between consecutive tokens (9.8's
  "max one-step rise"; 9.5 names the same quantity surprisal_max_rise);
* spectral (of the successive JS divergence series): standardise by median and MAD, resample
  linearly to `SPECTRAL_POINTS` (256) points, multiply by a Hann window, take the rFFT power
  without the DC bin and normalise it to sum 1 (P over F = 128 frequencies f in cycles per
  point); entropy = −Σ P log P / log F, centroid = Σ f P, low-energy ratio = Σ_{f ≤ 0.10} P.
A summary whose series is absent or too short (< 2 points; < `MIN_SPECTRAL_POINTS` for the
spectrum; a constant series for the spectrum) is NaN, never a made-up number."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MAX_SLOPE_POINTS = 512
SPECTRAL_POINTS = 256
MIN_SPECTRAL_POINTS = 8
LOW_FREQUENCY = 0.10
DEFAULT_WINDOW = 512

FROZEN_SUMMARIES: tuple[str, ...] = (
    "normalized_entropy_mean",
    "surprisal_mean",
    "top1_top2_probability_margin_mean",
    "normalized_entropy_std",
    "normalized_entropy_robust_slope",
    "surprisal_max_rise",
    "successive_js_divergence_mean",
    "successive_js_divergence_std",
    "successive_kl_divergence_robust_slope",
    "relative_l2_step_mean",
    "cosine_drift_mean",
    "hidden_norm_robust_slope",
    "spectral_successive_js_divergence_entropy",
    "spectral_successive_js_divergence_centroid",
    "spectral_successive_js_divergence_low_energy_ratio",
)
"""Protocol 9.5's 15 frozen summaries, in its order."""

STREAM_SUMMARIES: tuple[str, ...] = (
    "stream_entropy_mean",
    "stream_entropy_std",
    "stream_entropy_ols_slope",
    "stream_surprisal_mean",
    "stream_surprisal_max_rise",
    "stream_top1_mean",
    "stream_top1_std",
    "stream_top1_ols_slope",
)
"""Protocol 9.8's 8-feature stream summary (entropy in nats, surprisal, top-1 probability)."""


def _points(series: np.ndarray | None, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(token index, value) of the finite values among the first `window` tokens."""
    if series is None:
        return np.zeros(0), np.zeros(0)
    y = np.asarray(series, dtype=np.float64)[:window]
    x = np.arange(len(y), dtype=np.float64)
    ok = np.isfinite(y)
    return x[ok], y[ok]


def mean(y: np.ndarray) -> float:
    return float(np.mean(y)) if len(y) else float("nan")


def std(y: np.ndarray) -> float:
    return float(np.std(y)) if len(y) >= 2 else float("nan")


def robust_slope(x: np.ndarray, y: np.ndarray, max_points: int = MAX_SLOPE_POINTS) -> float:
    """Theil–Sen slope of y on x, on at most `max_points` evenly spaced points."""
    from scipy.stats import theilslopes

    if len(y) < 2:
        return float("nan")
    if len(y) > max_points:
        pick = np.unique(np.round(np.linspace(0, len(y) - 1, max_points)).astype(int))
        x, y = x[pick], y[pick]
    return float(theilslopes(y, x)[0])


def ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    if len(y) < 2 or np.ptp(x) == 0:
        return float("nan")
    xc = x - x.mean()
    return float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))


def max_rise(x: np.ndarray, y: np.ndarray) -> float:
    """Largest increase between consecutive tokens (pairs whose tokens are adjacent)."""
    adjacent = np.diff(x) == 1
    if not adjacent.any():
        return float("nan")
    return float(np.max(np.diff(y)[adjacent]))


def spectrum(y: np.ndarray, points: int = SPECTRAL_POINTS) -> tuple[np.ndarray, np.ndarray] | None:
    """(frequencies, normalised power without DC) of the standardised, resampled, Hann-windowed
    series; None when it has too few points or no variation."""
    if len(y) < MIN_SPECTRAL_POINTS:
        return None
    med = np.median(y)
    mad = np.median(np.abs(y - med))
    if not mad > 0:
        return None
    z = (y - med) / mad
    z = np.interp(np.linspace(0, len(z) - 1, points), np.arange(len(z)), z)
    power = np.abs(np.fft.rfft(z * np.hanning(points))) ** 2
    freqs = np.fft.rfftfreq(points)
    power, freqs = power[1:], freqs[1:]
    total = power.sum()
    if not total > 0:
        return None
    return freqs, power / total


def spectral_summaries(y: np.ndarray) -> tuple[float, float, float]:
    """(normalised spectral entropy, spectral centroid, low-frequency energy ratio)."""
    spec = spectrum(y)
    if spec is None:
        return float("nan"), float("nan"), float("nan")
    f, p = spec
    nz = p[p > 0]
    entropy = float(-np.sum(nz * np.log(nz)) / np.log(len(p)))
    return entropy, float(np.sum(f * p)), float(np.sum(p[f <= LOW_FREQUENCY + 1e-12]))


def summarize(
    series: Mapping[str, np.ndarray | None], window: int = DEFAULT_WINDOW
) -> dict[str, float]:
    """The 15 frozen (9.5) and 8 stream (9.8) summaries of one trajectory's per-token series
    (keys: protocol 2.2 names: normalized_entropy, entropy, surprisal, top1_probability, ...;
    an absent key makes its summaries NaN), over its first `window` tokens."""

    def pts(name: str) -> tuple[np.ndarray, np.ndarray]:
        return _points(series.get(name), window)

    ne_x, ne = pts("normalized_entropy")
    s_x, s = pts("surprisal")
    _, margin = pts("top1_top2_probability_margin")
    _, js = pts("successive_js_divergence")
    kl_x, kl = pts("successive_kl_divergence")
    _, l2 = pts("relative_l2_step")
    _, cos = pts("cosine_drift")
    hn_x, hn = pts("hidden_norm")
    e_x, ent = pts("entropy")
    t_x, top1 = pts("top1_probability")
    spec = spectral_summaries(js)
    frozen = (
        mean(ne),
        mean(s),
        mean(margin),
        std(ne),
        robust_slope(ne_x, ne),
        max_rise(s_x, s),
        mean(js),
        std(js),
        robust_slope(kl_x, kl),
        mean(l2),
        mean(cos),
        robust_slope(hn_x, hn),
        *spec,
    )
    stream = (
        mean(ent),
        std(ent),
        ols_slope(e_x, ent),
        mean(s),
        max_rise(s_x, s),
        mean(top1),
        std(top1),
        ols_slope(t_x, top1),
    )
    return dict(zip(FROZEN_SUMMARIES + STREAM_SUMMARIES, frozen + stream, strict=True))
