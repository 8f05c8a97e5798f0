"""`bt export`: a run's samples (joined with grades and cells) and cells as flat tables, plus
its manifest, for pandas users who never open the store.

Per-token arrays become lists in parquet and JSON strings in CSV (CSV has no list type).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from breakthrough.outputs import make_folder, write_atomic, write_text
from breakthrough.store import RunStore

FORMATS = ("parquet", "csv")
ARRAY_COLUMNS = ("token_ids", "segments", "logprobs", "entropies")


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
    array_cols = [c for c in ARRAY_COLUMNS if c in samples]
    for col in array_cols:
        samples[col] = [a.tolist() for a in samples[col]]
    written = []
    for name, frame in (("samples", samples), ("cells", cells)):
        path = out / f"{name}.{format}"
        if format == "parquet":
            write_atomic(path, partial(frame.to_parquet, index=False))
        else:
            frame = frame.copy()
            for col in array_cols if name == "samples" else []:
                frame[col] = [json.dumps(v) for v in frame[col]]
            write_atomic(path, partial(frame.to_csv, index=False))
        written.append(path)
    write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    return written
