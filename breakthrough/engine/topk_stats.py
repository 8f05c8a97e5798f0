"""What a server's top-k log-probs say about a step's distributions, and what they cannot say.

An HTTP server reports, per generated token, the log-probs of the k most likely tokens of the
model's full (raw, temperature-1) next-token distribution (k = 20 here). From those:

* the FULL-distribution entropy is not determined (the other V - k tokens hold the remaining
  mass in an unknown shape); it lies between two bounds, both computed here:
    - lower: the remaining mass r piled as high as the top-k allow (each remaining token holds
      at most p_k, the smallest reported probability), i.e. floor(r / p_k) tokens at p_k and
      one with the rest: the most concentrated shape, the least entropy;
    - upper: r spread evenly over the V - k remaining tokens: r log((V - k) / r).
* the SAMPLING entropy (of the distribution a token was drawn from) is exact whenever every
  candidate the sampler kept is among the reported tokens: with top-k <= k (the protocol's
  top-k is 20) or a top-p cut that falls inside them. It follows vLLM's and SGLang's order:
  temperature, then top-k, then top-p on the renormalised top-k, then min-p (relative to the
  most likely token after temperature). Otherwise it is NaN (unknown), never a guess.

Pure numpy: no server, no model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from breakthrough.engine.sampling import TAIL_K
from breakthrough.protocol import Sampling


def entropy_bounds(top_logprobs: Sequence[float], vocab_size: int) -> tuple[float, float]:
    """(lower, upper) bounds in nats of the entropy of a distribution over `vocab_size` tokens
    of which the given (distinct tokens') log-probs are the largest."""
    lp = np.sort(np.asarray([x for x in top_logprobs if math.isfinite(x)], dtype=np.float64))[::-1]
    if lp.size == 0:
        return 0.0, math.log(max(vocab_size, 1))
    p = np.exp(lp)
    known = float(-(p * lp).sum())
    rest = max(0.0, 1.0 - float(p.sum()))
    others = max(0, int(vocab_size) - lp.size)
    if rest <= 1e-12 or others == 0:
        return known, known
    p_min = float(p[-1])
    full = min(others, int(rest // p_min))
    leftover = rest - full * p_min
    lower = known - full * p_min * math.log(p_min)
    if leftover > 1e-15 and full < others:
        lower -= leftover * math.log(leftover)
    upper = known + rest * math.log(others / rest)
    return lower, max(lower, upper)


def sampling_entropy(
    top_logprobs: Sequence[float], sampling: Sampling, complete: bool = False
) -> float:
    """Entropy (nats) of the distribution a token was drawn from, given the raw top-k log-probs
    of its step (any order); NaN when the kept candidates may include unreported tokens.
    `complete`: the list holds the whole distribution (no token is missing)."""
    if sampling.temperature <= 0:
        return 0.0
    lp = np.sort(np.asarray([x for x in top_logprobs if math.isfinite(x)], dtype=np.float64))[::-1]
    if lp.size == 0:
        return float("nan")
    if 0 < sampling.top_k <= lp.size:
        lp = lp[: sampling.top_k]
        complete = True
    scaled = lp / sampling.temperature
    if complete:
        # Renormalised over the kept (top-k) candidates: exact.
        logp = scaled - np.logaddexp.reduce(scaled)
        if 0.0 < sampling.top_p < 1.0:
            p = np.exp(logp)
            before = np.cumsum(p) - p
            logp = logp[before < sampling.top_p]
            logp = logp - np.logaddexp.reduce(logp)
    else:
        # Without top-k the temperature-scaled mass of unreported tokens is unknown, so even a
        # top-p cut cannot be placed exactly.
        return float("nan")
    if sampling.min_p > 0.0:
        logp = logp[logp >= logp[0] + math.log(sampling.min_p)]
        logp = logp - np.logaddexp.reduce(logp)
    return float(-(np.exp(logp) * logp).sum())


def max_logprob_difference(a: Mapping[int, float], b: Mapping[int, float]) -> float:
    """Largest |a[t] - b[t]| over the tokens both report (inf when they share none): how far
    a generation step's log-probs are from the same position scored as a prompt."""
    shared = [t for t in a if t in b and math.isfinite(a[t]) and math.isfinite(b[t])]
    if not shared:
        return float("inf")
    return max(abs(float(a[t]) - float(b[t])) for t in shared)


def topk_signals(
    top_logprobs: np.ndarray, chosen: Sequence[float], names: Sequence[str]
) -> dict[str, np.ndarray]:
    """The protocol 2.2 per-token fields (`names`, in `sampling.SIGNAL_FIELDS` order) that a
    server's top-k raw log-probs determine exactly, one float32 array per name; NaN for those
    it cannot (the entropy and what depends on it, and the successive KL / JS divergences,
    which need whole distributions). `top_logprobs` [n, k]: each step's k largest log-probs,
    descending, -inf where the server reported fewer (a step with fewer than 2 gets NaN
    throughout; top-5 mass needs 5, the tail mass TAIL_K = 20); `chosen[j]`: the sampled
    token's log-prob. Log-prob differences equal logit differences (one normaliser per step)."""
    lp = np.asarray(top_logprobs, dtype=np.float64).reshape(len(chosen), -1)
    if lp.shape[1] < 2:
        lp = np.pad(lp, ((0, 0), (0, 2 - lp.shape[1])), constant_values=-np.inf)
    reported = np.isfinite(lp).sum(-1)
    p = np.exp(lp)  # 0 where nothing was reported
    lp_chosen = np.asarray(chosen, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        fields = {
            "top1_top2_logit_margin": lp[:, 0] - lp[:, 1],
            "top1_top2_probability_margin": p[:, 0] - p[:, 1],
            "top1_probability": p[:, 0],
            "surprisal": -lp_chosen,
            "sampled_token_regret": np.maximum(lp[:, 0] - lp_chosen, 0.0),
            "top5_probability_mass": np.where(reported >= 5, p[:, :5].sum(-1), np.nan),
            "probability_tail_mass": np.where(
                reported >= TAIL_K, np.maximum(1.0 - p[:, :TAIL_K].sum(-1), 0.0), np.nan
            ),
        }
    out = {}
    for name in names:
        value = fields.get(name)
        col = np.full(len(lp), np.nan) if value is None else np.where(reported >= 2, value, np.nan)
        out[name] = col.astype(np.float32)
    return out
