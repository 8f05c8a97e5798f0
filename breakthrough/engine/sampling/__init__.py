"""The batched, seeded sampler of the MLX engine: one call draws every row of a decode step.

Randomness is counter-based and keyed by the row's identity, never by its batch slot (`keys`):
a row's draw depends only on (seed, token index, its own logits), the same alone and in any
batch, and the same whether its prompt came from a reused cache or a fresh prefill. The
candidate set is mlx-lm's `make_sampler` order (top-p on the full distribution, then min-p,
then top-k), drawn by Gumbel-max; temperature 0 is greedy.

Per token, with the draw: the chosen token's log-prob, the entropy of the model's full
next-token distribution (temperature 1, before any filter) and the entropy of the distribution
the token was drawn from (0 for greedy rows); with instrumentation, also the protocol 2.2
per-token fields from the same logits (`signals`): no second forward pass.

One definition, two implementations:
  keys          the row keys and the hashed Gumbel noise's constants (both paths)
  mlx_path      the whole step as one fused MLX graph (Metal / CUDA devices)
  numpy_search  numpy: each row's k largest logits and bounds on the rest of its mass
  numpy_draw    numpy: the tokens (what the next forward waits for; MLX's CPU device)
  numpy_stats   numpy: the step's statistics, run beside the next forward
  signals       the instrumentation fields (SIGNAL_FIELDS, HIDDEN_FIELDS), numpy and MLX

The package re-exports only the names that modules outside the sampler use; the rest is
imported from the module that defines it."""

from __future__ import annotations

from breakthrough.engine.sampling.keys import SAMPLER_ID
from breakthrough.engine.sampling.signals import HIDDEN_FIELDS, SIGNAL_FIELDS, TAIL_K

__all__ = ["HIDDEN_FIELDS", "SAMPLER_ID", "SIGNAL_FIELDS", "TAIL_K"]
