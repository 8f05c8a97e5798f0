"""What the MLX engine counts over its decode steps, for progress lines, run records and the
benches: rows in flight (occupancy), real against padded attention positions, and tokens, rows
and seconds by the depth of the longest context in flight (the Hydragen curve of a run)."""

from __future__ import annotations

from dataclasses import dataclass, field


def depth_of(context: int) -> int:
    """The power of two a context length is counted under (<= 256, <= 512, ...)."""
    return 1 << max(context - 1, 0).bit_length()


@dataclass
class DecodeCounters:
    """Running totals over every decode step of an engine's life.

    step_rows / step_rows_sq: sum of rows per step (= tokens made) and of its square; their
        ratio is the token-weighted mean of rows in flight (`occupancy`).
    attention_real / attention_padded: the rows' own context positions, and those the step's
        attention read (mlx-lm's batch cache pads every row to the longest; shared-prefix rows
        are not padded).
    rows_in_flight_max: the most rows in flight at once.
    rows_by_context: the most rows in a step, by its longest context's `depth_of`.
    decode_by_context: [tokens made, seconds in the step] by the same depth (the step's own
        time, not the admissions' prefills).
    """

    step_rows: int = 0
    step_rows_sq: int = 0
    attention_real: int = 0
    attention_padded: int = 0
    rows_in_flight_max: int = 0
    rows_by_context: dict[int, int] = field(default_factory=dict)
    decode_by_context: dict[int, list[float]] = field(default_factory=dict)

    def admitted(self, rows_in_flight: int) -> None:
        self.rows_in_flight_max = max(self.rows_in_flight_max, rows_in_flight)

    def step(self, contexts: list[int], padded: bool, seconds: float) -> None:
        """One decode step that made one token for each row of context lengths `contexts`
        (before the token); `padded`: its attention read every row at the longest length."""
        rows, longest = len(contexts), max(contexts)
        self.attention_real += sum(contexts)
        self.attention_padded += rows * longest if padded else sum(contexts)
        depth = depth_of(longest)
        self.rows_by_context[depth] = max(self.rows_by_context.get(depth, 0), rows)
        made = self.decode_by_context.setdefault(depth, [0, 0.0])
        made[0] += rows
        made[1] += seconds
        self.step_rows += rows
        self.step_rows_sq += rows**2

    def occupancy(self, batch_size: int) -> float | None:
        """Token-weighted mean rows in flight over `batch_size` (a step with r rows makes r
        tokens, so sum r^2 / sum r): how full the batch was for the average generated token,
        which is what the throughput depends on; None before the first step."""
        if not self.step_rows:
            return None
        return self.step_rows_sq / self.step_rows / batch_size

    @property
    def attention_fill(self) -> float | None:
        """Share of the attention positions read that were the rows' own tokens, not padding;
        None before the first step."""
        if not self.attention_padded:
            return None
        return self.attention_real / self.attention_padded
