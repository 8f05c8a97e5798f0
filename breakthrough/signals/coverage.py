"""What a run's signal table holds and what it lacks, per kind of trajectory (`bt signals`).

Why: base traces and `bt sample` attempts store the protocol 2.2 per-token signals, while
continuations and restarts store log-probs and entropies only unless `bt continue
--instrument` ran (pipeline.cell_loop); HTTP backends cannot see hidden states. A table whose
rows silently hold NaN summaries would read as "no signal"; these lines say which rows hold
which series, from the written table itself (a summary is finite exactly where its series was
stored and long enough)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

KIND_ORDER = ("base", "attempt", "probe", "restart")
TOKEN_MARK = "normalized_entropy_mean"  # finite only where the protocol 2.2 token fields are stored
HIDDEN_MARK = "hidden_norm_robust_slope"  # finite only where the hidden-state fields are stored
LIGHT_KINDS = ("probe", "restart")


def coverage_lines(table: Any) -> list[str]:
    """One line per kind of trajectory in `table` (the `bt signals` parquet table): how many
    rows hold the protocol 2.2 token signals and the hidden-state fields, and, where some do
    not, what their rows lack and why."""
    lines = []
    kinds = [k for k in KIND_ORDER if k in set(table["kind"])]
    kinds += sorted(set(table["kind"]) - set(kinds))
    for kind in kinds:
        rows = table[table["kind"] == kind]
        n = len(rows)
        tokens = int(np.isfinite(rows[TOKEN_MARK].to_numpy(dtype=float)).sum())
        hidden = int(np.isfinite(rows[HIDDEN_MARK].to_numpy(dtype=float)).sum())
        line = (
            f"{kind}: {n:,} trajector{'y' if n == 1 else 'ies'}; protocol 2.2 token signals "
            f"in {tokens:,}, hidden-state fields in {hidden:,}"
        )
        if tokens < n:
            line += (
                f"; {n - tokens:,} hold log-probs and entropies only (their summaries other "
                "than entropy / surprisal are NaN)"
            )
            if kind in LIGHT_KINDS:
                line += (
                    "; continuations store the signals with `bt continue --instrument`, "
                    "in a new run"
                )
        elif hidden < n:
            line += f"; {n - hidden:,} without hidden states (an HTTP backend, or too short)"
        lines.append(line)
    return lines


def table_coverage(path: Path | str) -> list[str]:
    """`coverage_lines` of the parquet table `bt signals` wrote at `path`."""
    import pandas as pd

    return coverage_lines(pd.read_parquet(path, columns=["kind", TOKEN_MARK, HIDDEN_MARK]))
