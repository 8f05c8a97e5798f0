"""A restart (the chat prompt alone) whose cell's shared prefix (prompt + a long base trace) is
not held does not build that prefix's cache: it prefills its own prompt, with the tokens of a
fresh prefill (issue 22: restarts run after the cell's probes, when the cache may be gone)."""

from __future__ import annotations

from breakthrough.engine.contract import GenRequest, SharedPrefix
from breakthrough.engine.mlx_backend import MlxEngine


def test_a_restart_does_not_build_a_long_prefix(tiny_model) -> None:
    prompt = tiny_model.encode("What is the sum of the first ten primes?")
    trace = tiny_model.encode(" Let me think step by step about primes." * 12)
    shared = SharedPrefix("cell", tuple(prompt + trace), starts=(len(prompt), len(prompt) + 40))
    eng = MlxEngine.from_loaded(tiny_model)
    (restart,) = eng.generate([GenRequest("r", prompt, 6, seed=5, shared_prefix=shared)])
    assert eng.prefill_tokens == len(prompt) and restart.cached_tokens == 0
    fresh = MlxEngine.from_loaded(tiny_model, reuse_prefixes=False)
    (want,) = fresh.generate([GenRequest("f", prompt, 6, seed=5)])
    assert restart.tokens == want.tokens
    # a probe builds the prefix once; a restart then starts from it
    list(eng.generate([GenRequest("p", prompt + trace[:40], 4, seed=6, shared_prefix=shared)]))
    before = eng.prefill_tokens
    (again,) = eng.generate([GenRequest("r2", prompt, 6, seed=5, shared_prefix=shared)])
    assert again.tokens == want.tokens and again.cached_tokens == len(prompt) - 1
    assert eng.prefill_tokens == before + 1
