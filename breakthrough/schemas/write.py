"""Every declared table is written here: conformed to its declaration, checked, then written
atomically (`outputs.write_atomic`: a failure leaves an earlier file as it was, an OS error is
one line naming the file). parquet gets the checked arrow table (`check.arrow_table`), so its
types are the declared ones; CSV the same columns, in the same order, as pandas writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from breakthrough.outputs import write_atomic, write_json
from breakthrough.schemas.check import arrow_table, check, check_document, conform
from breakthrough.schemas.columns import Document, Table

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("parquet", "csv")


def write_parquet(table: Table, frame: pd.DataFrame, path: Path) -> Path:
    """`frame`, conformed and checked, as the parquet file `path`."""
    import pyarrow.parquet as pq

    data = arrow_table(table, conform(table, frame))
    return write_atomic(path, lambda tmp: pq.write_table(data, tmp))


def write_csv(table: Table, frame: pd.DataFrame, path: Path) -> Path:
    """`frame`, conformed and checked, as the CSV file `path` (no index); a list column's
    values as JSON arrays (CSV has no list type)."""
    out = check(table, conform(table, frame))
    lists = [c.name for c in table.columns if c.type.startswith("list<") and c.name in out]
    if lists:
        out = out.assign(**{c: [json.dumps(_plain(v)) for v in out[c]] for c in lists})
    return write_atomic(path, lambda tmp: out.to_csv(tmp, index=False))


def _plain(values: Any) -> list:
    """A list cell (a list, or a NumPy array) as a Python list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def write_frame(
    table: Table, frame: pd.DataFrame, stem: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """`frame` as STEM.parquet (for pandas) and STEM.csv (for everyone else), or the
    `formats` asked for; returns the paths in that order."""
    writers = {"parquet": write_parquet, "csv": write_csv}
    return [writers[f](table, frame, Path(stem).with_suffix(f".{f}")) for f in formats]


def write_document(doc: Document, obj: Any, path: Path) -> Path:
    """`obj` as strict JSON (`outputs.write_json`), after checking what will be written
    against its declaration."""
    from breakthrough.outputs import json_ready

    check_document(doc, json_ready(obj))
    return write_json(path, obj)
