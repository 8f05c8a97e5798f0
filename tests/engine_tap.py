"""A real engine behind the `Engine` base, with what it is asked recorded: the tests that count
the requests a pipeline step pulls, or the prefixes it releases, wrap the engine they run in
`Tapped` (every method of the contract forwarded, so the wrapped engine's plan, stats and
hints are the ones that run)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from breakthrough.engine.contract import (
    Engine,
    EnginePlan,
    EngineStats,
    GenRequest,
    GenResult,
    RowShape,
)


class Tapped(Engine):
    """`inner`, recording the requests it pulls (`pulled`, None left out) and the prefixes
    released (`released`)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.pulled: list[GenRequest] = []
        self.released: list[str] = []

    @property  # type: ignore[override]
    def generated_tokens(self) -> int:
        return self.inner.generated_tokens

    @property  # type: ignore[override]
    def prefill_tokens(self) -> int:
        return self.inner.prefill_tokens

    @property  # type: ignore[override]
    def batch_size(self) -> int:
        return self.inner.batch_size

    def identity(self) -> dict:
        return self.inner.identity()

    def generate(self, requests: Iterable[GenRequest | None]) -> Iterator[GenResult]:
        def tap() -> Iterator[GenRequest | None]:
            for req in requests:
                if req is not None:
                    self.pulled.append(req)
                yield req

        return self.inner.generate(tap())

    def plan(self, shape: RowShape) -> EnginePlan:
        return self.inner.plan(shape)

    def configure(self, plan: EnginePlan) -> None:
        self.inner.configure(plan)

    def release_prefix(self, key: str) -> None:
        self.released.append(key)
        self.inner.release_prefix(key)

    def stats(self) -> EngineStats:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()
