"""The engine contract is complete: a backend written from `contract.Engine` alone (its two
abstract methods, nothing read from `MlxEngine`) runs `bt continue`'s whole pipeline, and the
contract's defaults are what the scheduler plans with."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from breakthrough.engine.contract import (
    Engine,
    EnginePlan,
    EngineStats,
    GenRequest,
    GenResult,
    RowShape,
)
from breakthrough.models.loading import load_model
from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore

pytestmark = pytest.mark.model


class PlainLoopEngine(Engine):
    """A backend a user might add: mlx-lm's own `generate_step`, one request at a time (the
    plain loop the benches compare against), seeded per request. Only `identity` and
    `generate` are written; planning, hints and stats are the base's defaults."""

    batch_size = 1

    def __init__(self, loaded) -> None:
        self.model = loaded.model
        self.eos = frozenset(int(e) for e in loaded.eos_ids)

    def identity(self) -> dict:
        return {"backend": "plain-loop (test)"}

    def generate(self, requests: Iterable[GenRequest | None]) -> Iterator[GenResult]:
        for req in requests:
            assert req is not None, "a one-row engine has nothing in flight when it asks"
            yield self._one(req)

    def _one(self, req: GenRequest) -> GenResult:
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.sample_utils import make_sampler

        t0 = time.perf_counter()
        mx.random.seed(req.seed)
        s = req.sampling
        sampler = make_sampler(temp=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p)
        tokens: list[int] = []
        logprobs: list[float] = []
        entropies: list[float] = []
        reason = "length"
        steps = generate_step(
            mx.array(list(req.prompt)), self.model, max_tokens=req.max_tokens, sampler=sampler
        )
        for token, dist in steps:
            tok = int(token)
            lp = np.asarray(dist.astype(mx.float32))
            tokens.append(tok)
            logprobs.append(float(lp[tok]))
            entropies.append(float(-(np.exp(lp) * lp).sum()))
            self.generated_tokens += 1
            if tok in self.eos:
                reason = "eos"
                break
            if any(tokens[-len(q) :] == list(q) for q in req.stop_sequences if q):
                reason = "stop_sequence"
                break
        self.prefill_tokens += len(req.prompt)
        return GenResult(
            key=req.key,
            tokens=tokens,
            logprobs=np.asarray(logprobs, dtype=np.float32),
            entropies=np.asarray(entropies, dtype=np.float32),
            finish_reason=reason,
            elapsed_s=time.perf_counter() - t0,
            prompt_tokens=len(req.prompt),
        )


def test_an_engine_from_the_base_alone_runs_bt_continue(
    fixture_run: Path, tiny_model_dir: Path
) -> None:
    loaded = load_model(str(tiny_model_dir), family="qwen")
    proto = DEFAULT.with_overrides(
        budget=4, answer_budget=4, restart_budgets=(4,), anchors=(64, 128), refinement_rounds=0
    )
    engine = PlainLoopEngine(loaded)
    report = continue_run(
        fixture_run, loaded, ContinueOptions(protocol=proto, topup=()), engine=engine
    )
    assert report.cells == 2 and report.failed_cells == 0
    # every probe and restart the protocol asks for, 4 samples each, stored and graded
    assert report.samples["probes"] == 2 * 2 * proto.samples
    assert report.samples["restarts"] == 2 * proto.samples
    assert report.generated_tokens == engine.generated_tokens > 0
    assert report.occupancy is None and report.peak_memory_bytes == 0  # the stats' defaults
    with RunStore(fixture_run) as store:
        assert store.manifest()["engine"] == {"backend": "plain-loop (test)"}
        made = {k for k in store.existing_keys() if k[1] != "base"}  # + the 2 base traces
        assert len(made) == report.samples["probes"] + report.samples["restarts"]


def test_the_base_plans_its_batch_size_at_any_length() -> None:
    class Minimal(Engine):
        batch_size = 3

        def identity(self) -> dict:
            return {"backend": "minimal"}

        def generate(self, requests):
            return iter(())

    engine = Minimal()
    plan = engine.plan(RowShape(16_384, shared_tokens=16_000, restart_tokens=9_000))
    assert plan == EnginePlan(RowShape(16_384, 16_000, 9_000), 3, 3, 3)
    assert plan.rows_cap == 3 and plan.prefix_slots is None and not plan.groups_by_prefix
    assert "no --memory-gb cap" in plan.line()
    engine.configure(plan)
    engine.release_prefix("cell")
    assert engine.stats() == EngineStats()
    with pytest.raises(TypeError, match="abstract"):
        Engine()  # type: ignore[abstract]
