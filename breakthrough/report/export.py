"""`bt export`: a run's samples (joined with grades and cells) and cells as flat tables, plus
its manifest, for pandas users who never open the store. The tables' columns are declared in
breakthrough/schemas/export.py (docs/outputs.md).

Per-token arrays become lists in parquet and JSON arrays in CSV (CSV has no list type).
"""

from __future__ import annotations

import json
from pathlib import Path

from breakthrough.outputs import make_folder, write_text
from breakthrough.schemas import export as schemas
from breakthrough.schemas.write import FORMATS, write_frame
from breakthrough.store import RunStore

ARRAY_COLUMNS = ("token_ids", "segments", "logprobs", "entropies", "sampling_entropies")


def export_run(
    run: Path | str, out: Path | str | None = None, *, format: str = "parquet", arrays: bool = True
) -> list[Path]:
    """Write RUN's samples.FORMAT, cells.FORMAT and manifest.json under `out` (default
    RUN/export), each table atomically; returns the table paths."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    out = Path(out) if out else Path(run) / "export"
    with RunStore(run, readonly=True) as store:
        samples = store.samples_frame(arrays=arrays)
        cells = store.cells_frame()
        manifest = store.manifest()
    make_folder(out)
    for col in (c for c in ARRAY_COLUMNS if c in samples):  # NumPy arrays -> Python lists
        samples[col] = [a.tolist() for a in samples[col]]
    written = [
        *write_frame(schemas.SAMPLES, samples, out / "samples", [format]),
        *write_frame(schemas.CELLS, cells, out / "cells", [format]),
    ]
    write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    return written
