"""`bt signals`: the per-trajectory summaries (signals.summaries) of every sample of one run,
as one parquet table (one row per trajectory).

Why a table per run: protocol 9.5's confirmatory test joins these summaries with the labels of
`bt classify` by cell; keeping them in a file beside the store leaves the store's meaning alone.
The series are the engine's per-token instrumentation (GenResult.signals, stored by
RunStore); `entropy` and `surprisal` also come from the stored entropies and log-probs, so runs
made before the instrumentation existed still get their entropy / surprisal summaries (the
others are NaN). The hidden-state series (hidden_norm, relative_l2_step, cosine_drift) are
recorded by the MLX backend; HTTP backends cannot see hidden states, so there they are NaN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from breakthrough.errors import BtError
from breakthrough.schemas.signals import SIGNALS
from breakthrough.schemas.write import write_parquet
from breakthrough.signals.summaries import (
    DEFAULT_WINDOW,
    FROZEN_SUMMARIES,
    STREAM_SUMMARIES,
    summarize,
)
from breakthrough.store import RunStore

ID_COLUMNS = (
    "sample_id",
    "cell_id",
    "problem_id",
    "model",
    "level",
    "kind",
    "anchor",
    "budget",
    "branch",
    "seed",
    "n_tokens",
    "observed_token_count",
    "finish_reason",
    "correct",
)
OUTPUT_NAME = "signals.parquet"


def trajectory_series(row) -> dict[str, np.ndarray]:
    """Per-token series of one sample (a `samples_frame(signals=True)` row), by protocol 2.2
    name."""
    series = {k: np.asarray(v, dtype=np.float64) for k, v in (row["signals"] or {}).items()}
    series["entropy"] = np.asarray(row["entropies"], dtype=np.float64)
    series["sampled_logprob"] = np.asarray(row["logprobs"], dtype=np.float64)
    series.setdefault("surprisal", -series["sampled_logprob"])
    return series


def run_signals(
    run: Path | str, out: Path | str | None = None, *, window: int = DEFAULT_WINDOW
) -> tuple[Path, int]:
    """Write the summaries of every trajectory of RUN to `out` (default RUN/signals.parquet),
    atomically; returns (path, rows)."""
    import pandas as pd

    if window < 2:
        raise BtError(f"--window: must be at least 2 tokens, got {window}")
    with RunStore(run, readonly=True) as store:
        frame = store.samples_frame(signals=True)
    rows = summary_rows(frame, window)
    table = pd.DataFrame(
        rows, columns=[*ID_COLUMNS, "window", *FROZEN_SUMMARIES, *STREAM_SUMMARIES]
    )
    path = write_parquet(SIGNALS, table, Path(out) if out else Path(run) / OUTPUT_NAME)
    return path, len(table)


def summary_rows(frame: Any, window: int) -> list[dict]:
    """One row per trajectory of `frame` (a `samples_frame(signals=True)`): its id columns, the
    tokens observed within `window`, and `summaries.summarize` of its series. `bt signals` and
    `bt confirm`'s sweep (a window no table holds) both build their tables from it, so the two
    agree by construction."""
    rows = []
    for _, row in frame.iterrows():
        series = trajectory_series(row)
        ids = {c: row[c] for c in ID_COLUMNS if c in row.index}
        ids["observed_token_count"] = int(min(len(series["entropy"]), window))
        rows.append({**ids, "window": window, **summarize(series, window)})
    return rows
