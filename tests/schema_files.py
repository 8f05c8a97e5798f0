"""`assert_file_matches`: a written table file, read back, against its declaration
(breakthrough/schemas), as tests/report/test_output_files.py and tests/test_output_schemas.py
check the files real runs leave."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from breakthrough.schemas.check import layout, same_type
from breakthrough.schemas.columns import Table


def assert_file_matches(table: Table, path: Path) -> None:
    """PATH holds exactly the declared columns in declared order; a parquet file also the
    declared arrow types (never `null`: an empty column keeps its type) and no empty value
    where the declaration allows none."""
    if path.suffix == ".parquet":
        schema = pq.read_schema(path)
        matched, problems = layout(table, schema.names)
        assert not problems, (path, problems)
        for f in schema:
            assert str(f.type) != "null", (path, f.name)
            assert same_type(matched[f.name].type, f.type), (path, f.name, str(f.type))
        data = pd.read_parquet(path)
        for name, entry in matched.items():
            assert entry.nullable or not data[name].isna().any(), (path, name)
    else:
        header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
        assert not layout(table, header)[1], (path, layout(table, header)[1])
