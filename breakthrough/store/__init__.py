"""The run store: one SQLite database (WAL) per run directory.

Why SQLite: a finished batch is one transaction, so a SIGKILL at any moment leaves either the
whole batch or none of it (protocol 8.1's "complete marker" for free). A unique key per sample
(cell, kind, anchor, budget, branch) makes reruns idempotent (design decision 5); a run whose
identity differs from the request is refused, never mixed (protocol 8.2).

Tables: manifest (key → JSON value), cells, samples (token ids, segment codes, per-token
log-probs and entropies as packed arrays), grades (beside samples, with grader version),
signals (per-token instrumentation), errors, and hidden_vectors: the index of the per-trajectory
hidden-vector files (protocol 2.2's hidden_states.npz) kept outside SQLite under `RUN/hidden/`.

Hidden vectors: megabytes per trajectory, so not in the rows. `hidden/<sample_id>.npz` (arrays
`token_index` int32 and `hidden` float16) is written atomically (temp file, fsync, rename) inside
the sample's transaction, before it commits; its row (size and sha256 of the file: protocol 8.1's
complete.json) commits with the sample. A kill between the rename and the commit leaves a file no
row names (an orphan): the next sample committed takes that id and replaces it, and
`remove_orphan_hidden` (run by `bt base` / `bt sample` before generating) removes any other;
`verify_hidden` checks every file against its row and lists orphans.

Row checksums: every sample row holds a checksum of what it was written with, checked by every
command that reads the row and by `bt verify`. What it covers is the store's schema version
(the manifest's `schema_version`, recorded by the first write and kept for the store's life):
2, a row's token ids, text, finish reason, seed and prefix length (stores made before
per-field digests); 3, every stored field a label or signal is computed from
(`CHECKED_FIELDS`: the row, its signals and hidden-vector index row, its grade, its cell's gold
answer and cohort row), one digest per field, so a mismatch names the field. A schema-2 store
keeps schema-2 checksums when this bt adds to it: each store verifies under the one rule it was
written with.

Modules: `core` (the SQL: `RunStore`), `hidden` (the hidden-vector sidecar, part of
`RunStore`), `frames` (pandas readers, part of `RunStore`), `identity` (identity fields, the
manifest's shape, the refusal of a differing request), `checksums` (row checksums),
`records` (file names, schema versions, `SampleRecord`), `runs` (run folders and names).
What other modules import is here: `from breakthrough.store import RunStore`.
"""

from __future__ import annotations

from breakthrough.store.checksums import CHECKED_FIELDS, RowDamage
from breakthrough.store.core import RunStore, check_writable
from breakthrough.store.hidden import HiddenCheck
from breakthrough.store.identity import (
    IDENTITY_FIELDS,
    IDENTITY_OPTIONS,
    MANIFEST_REQUIRED,
    MANIFEST_SCHEMA,
    identity_option,
    manifest_problems,
)
from breakthrough.store.records import (
    COVERAGE,
    HIDDEN_DIR,
    OLDEST_SCHEMA,
    SCHEMA_VERSION,
    STORE_FILE,
    SampleRecord,
)
from breakthrough.store.runs import (
    OUTPUT_MARKERS,
    FoundRuns,
    find_runs,
    is_run_dir,
    run_dirs,
    run_names,
)

__all__ = [
    "CHECKED_FIELDS",
    "COVERAGE",
    "HIDDEN_DIR",
    "IDENTITY_FIELDS",
    "IDENTITY_OPTIONS",
    "MANIFEST_REQUIRED",
    "MANIFEST_SCHEMA",
    "OLDEST_SCHEMA",
    "OUTPUT_MARKERS",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "FoundRuns",
    "HiddenCheck",
    "RowDamage",
    "RunStore",
    "SampleRecord",
    "check_writable",
    "find_runs",
    "identity_option",
    "is_run_dir",
    "manifest_problems",
    "run_dirs",
    "run_names",
]
