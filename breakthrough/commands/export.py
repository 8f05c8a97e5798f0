"""`bt export`: flat tables of a run for pandas users (samples with grades, and cells)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from breakthrough.errors import BtError


def export(
    run: Path = typer.Argument(..., help="Run directory (holding store.sqlite)."),
    format: str = typer.Option("parquet", "--format", "-f", help="parquet or csv."),
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (default: RUN/export)."),
    arrays: bool = typer.Option(
        True, help="Include per-token arrays (token ids, segments, log-probs, entropies)."
    ),
) -> None:
    """Write RUN's samples (joined with grades and cells) and cells as flat tables."""
    from breakthrough.store import RunStore

    if format not in ("parquet", "csv"):
        raise BtError(f"--format: expected parquet or csv, got {format!r}")
    out = out or Path(run) / "export"
    with RunStore(run) as store:
        samples = store.samples_frame(arrays=arrays)
        cells = store.cells_frame()
        manifest = store.manifest()
    out.mkdir(parents=True, exist_ok=True)
    array_cols = [c for c in ("token_ids", "segments", "logprobs", "entropies") if c in samples]
    for col in array_cols:
        samples[col] = [a.tolist() for a in samples[col]]
    written = []
    for name, frame in (("samples", samples), ("cells", cells)):
        path = out / f"{name}.{format}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        if format == "parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame = frame.copy()
            for col in array_cols if name == "samples" else []:
                frame[col] = [json.dumps(v) for v in frame[col]]
            frame.to_csv(tmp, index=False)
        tmp.replace(path)
        written.append(path)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    for p in written:
        typer.echo(f"wrote {p}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
