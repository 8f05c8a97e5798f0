"""`bt export`: a run's samples (joined with grades and cells) and cells as flat tables, plus
its manifest, for pandas users who never open the store. The tables' columns are declared in
breakthrough/schemas/export.py (docs/outputs.md).

Per-token arrays become lists in parquet and JSON arrays in CSV (CSV has no list type).

A run is refused as `bt status` and `bt classify` refuse it, in the same line, before the
export folder is made: one its first `bt base` is still making (`store.find_runs` names that
bt), and one whose manifest is empty (a `bt base` killed right after making the store:
`RunStore.protocol`). A run with cells and no samples yet exports the declared empty tables,
as those commands read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from breakthrough.outputs import make_folder, write_text
from breakthrough.schemas import export as schemas
from breakthrough.schemas.write import FORMATS, write_frame
from breakthrough.store import RunStore, find_runs, is_run_dir

if TYPE_CHECKING:
    import pandas as pd

ARRAY_COLUMNS = ("token_ids", "segments", "logprobs", "entropies", "sampling_entropies")


def export_run(
    run: Path | str, out: Path | str | None = None, *, format: str = "parquet", arrays: bool = True
) -> list[Path]:
    """Write RUN's samples.FORMAT, cells.FORMAT and manifest.json under `out` (default
    RUN/export), each table atomically; returns the table paths. Nothing is written for a run
    the other reading commands refuse (module doc)."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    out = Path(out) if out else Path(run) / "export"
    if is_run_dir(run):
        find_runs([run])  # a run its first `bt base` is still making: refused naming that bt
    with RunStore(run, readonly=True) as store:
        store.protocol()  # an empty manifest: refused as `bt status` and `bt classify` do
        samples = store.samples_frame(arrays=arrays)
        cells = store.cells_frame()
        manifest = store.manifest()
    samples = arrays_as_lists(samples)
    make_folder(out)
    written = [
        *write_frame(schemas.SAMPLES, samples, out / "samples", [format]),
        *write_frame(schemas.CELLS, cells, out / "cells", [format]),
    ]
    write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    return written


def arrays_as_lists(samples: pd.DataFrame) -> pd.DataFrame:
    """The per-token NumPy arrays of `samples` as Python lists, each column of object dtype:
    without rows pandas would make such a column float64, which the declared list type refuses
    (an empty object column converts to arrow's null type, which takes the declared one)."""
    import pandas as pd

    for col in (c for c in ARRAY_COLUMNS if c in samples):
        samples[col] = pd.Series(
            [a.tolist() for a in samples[col]], index=samples.index, dtype=object
        )
    return samples
