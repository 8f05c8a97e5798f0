"""The fresh-prefill oracle (`pipeline.branches.reference_branch`) computed once per distinct
request: tests that compare many engine branches with fresh prefills ask it the same question
many times (two branches at one cut under greedy sampling, a repeated round of the same
requests). A greedy reference does not depend on its seed (temperature 0 is argmax), so two
branches at the same cut share one; a sampled one is computed per seed, as before."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def greedy_references(
    engine: Any, loaded: Any, prompt: Sequence[int], trace: Sequence[int], protocol: Any
) -> Callable[[int, int, int], list[int]]:
    """`ref(cut, budget, seed)`: `reference_branch(engine, loaded, prompt, trace[:cut], budget,
    seed, protocol)`, the seed left out of the key when the protocol samples greedily."""
    from breakthrough.pipeline.branches import reference_branch

    greedy = protocol.sampling.temperature <= 0
    memo: dict[tuple[int, int, int | None], list[int]] = {}

    def ref(cut: int, budget: int, seed: int) -> list[int]:
        key = (cut, budget, None if greedy else seed)
        if key not in memo:
            memo[key] = reference_branch(
                engine, loaded, prompt, trace[:cut], budget, seed, protocol
            )
        return list(memo[key])

    return ref
