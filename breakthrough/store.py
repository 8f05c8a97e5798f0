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
2, a row's token ids, text, finish reason, seed and prefix length (stores made before issue
29); 3, every stored field a label or signal is computed from (`CHECKED_FIELDS`: the row, its
signals and hidden-vector index row, its grade, its cell's gold answer and cohort row), one
digest per field, so a mismatch names the field. A schema-2 store keeps schema-2 checksums when
this bt adds to it: each store verifies under the one rule it was written with.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from breakthrough.errors import BtError
from breakthrough.protocol import OPTION_NAMES, Protocol
from breakthrough.tasks.grade import Grade

STORE_FILE = "store.sqlite"
# The layout and checksum coverage this bt writes into a new store (module docstring); it reads
# OLDEST_SCHEMA..SCHEMA_VERSION. A bt that reads only 2 refuses a 3 ("made by a newer bt")
# rather than calling every row of it damaged.
SCHEMA_VERSION = "3"
OLDEST_SCHEMA = 2
COVERAGE = {
    2: "token ids, text, finish reason, seed and prefix length only",
    3: "every field a label or signal is computed from",
}
# Manifest keys that define a run's identity; any difference means "another experiment".
IDENTITY_FIELDS = (
    "schema_version",
    "run_kind",  # base | sample: `bt continue` never writes into a `bt sample` run
    "model_id",
    "model_revision",
    "model_digest",  # models.digest: the content of every file that changes generated tokens
    "family",
    "task_family",
    "protocol_digest",
    "cohort_digest",
    "prompt_version",
    "continue_answer_budget",
    "engine",
    "hidden_stride",  # stored hidden vectors (protocol 2.2): every Nth token, 0 none
    "continuation",  # what continuations store and when they end (pipeline.cell_loop)
)
HIDDEN_DIR = "hidden"

# The option a user types to set each identity field (a refusal names it first, then the
# stored setting): `--cohort demo` into an arith run is a --cohort refusal, not "task_family".
IDENTITY_OPTIONS = {
    "model_id": "--model",
    "model_revision": "--model",
    "model_digest": "--model",
    "family": "--model",
    "task_family": "--cohort",
    "cohort_digest": "--cohort",
    "continue_answer_budget": "--answer-budget",
    "hidden_stride": "--hidden-stride",
    "continuation.signals": "--instrument",
    "continuation.kv_bits": "--kv-bits",
    "engine.backend": "--backend",
    "engine.server": "--endpoint",
    "engine.server_version": "--endpoint",
    "engine.model": "--endpoint",
}


def identity_option(name: str) -> str | None:
    """The option that sets identity field `name` (`protocol.budget` -> --budget,
    `continuation.signals` -> --instrument), or None when no option sets it."""
    if name.startswith("protocol."):
        return OPTION_NAMES.get(name.split(".")[1])
    return IDENTITY_OPTIONS.get(name)


def _schema_number(value: Any) -> int | None:
    """A manifest's schema_version as a number ("3" or 3), None when it is not one."""
    try:
        return int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    except ValueError:
        return None


def _expect(
    kind: type | tuple[type, ...], what: str, ok: Callable[[Any], bool] = bool
) -> Callable[[Any], str | None]:
    return lambda v: (
        None
        if isinstance(v, kind) and not isinstance(v, bool) and ok(v)
        else f"expected {what}, got {_short(v)[:60]}"
    )


def _protocol_problem(value: Any) -> str | None:
    """A stored protocol that cannot be read back, or holds a constant no run could have run
    under (a subset of the constants is an older bt's, read with the defaults)."""
    try:
        problems = Protocol.from_dict(value, partial=True).problems()
    except (TypeError, ValueError) as exc:
        return str(exc)
    return f"{problems[0][0]}: {problems[0][1]}" if problems else None


_TEXT = _expect(str, "a string", lambda v: True)
_NAME = _expect(str, "a non-empty string")
_OBJECT = _expect(dict, "an object", lambda v: True)
# What each manifest value must be (`manifest_problems`), checked on every open of a store,
# read-only or not, and before a value is written: a damaged manifest is named (its key and what
# it holds) and never computed with. Keys not listed are documentation and are only JSON.
MANIFEST_SCHEMA: dict[str, Callable[[Any], str | None]] = {
    "schema_version": lambda v: (
        None
        if OLDEST_SCHEMA <= (_schema_number(v) or 0) <= int(SCHEMA_VERSION)
        else f"expected a schema number {OLDEST_SCHEMA}..{SCHEMA_VERSION}, got {_short(v)[:60]}"
    ),
    "run_kind": lambda v: (
        None if v in ("base", "sample") else f"expected base or sample, got {v!r}"
    ),
    "model_id": _NAME,
    "model_revision": _TEXT,
    "model_digest": _NAME,
    "model_alias": _NAME,
    "family": _NAME,
    "task_family": _NAME,
    "protocol_digest": _NAME,
    "cohort": _NAME,
    "cohort_digest": _NAME,
    "prompt_version": _NAME,
    "platform": _TEXT,
    "protocol": _protocol_problem,
    "continue_answer_budget": _expect(int, "a positive integer", lambda v: v > 0),
    "hidden_stride": _expect(int, "an integer >= 0", lambda v: v >= 0),
    "engine": _OBJECT,
    "continuation": _OBJECT,
    "packages": _OBJECT,
    "throughput": _OBJECT,
    "attempts": _OBJECT,
    "topup": _NAME,
    "probe_arms": _expect(list, "a list of objects", lambda v: all(isinstance(a, dict) for a in v)),
}
# What every run's manifest holds from its first write (`bt base`, `bt sample`) on.
MANIFEST_REQUIRED = ("schema_version", "model_id", "cohort_digest", "protocol")


def manifest_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, what is wrong) for every manifest entry that is not JSON, required key that is
    missing and value that does not fit `MANIFEST_SCHEMA`; `raw` is key -> the stored JSON
    text. An empty manifest (a store whose first write has not happened) has none."""
    if not raw:
        return []
    out = [(key, "missing") for key in MANIFEST_REQUIRED if key not in raw]
    for key, text in sorted(raw.items()):
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            out.append((key, f"not valid JSON ({_short(text)[:40]!r})"))
            continue
        problem = MANIFEST_SCHEMA[key](value) if key in MANIFEST_SCHEMA else None
        if problem:
            out.append((key, problem))
    return out


_SCHEMA = """
CREATE TABLE IF NOT EXISTS manifest (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
    cell_id          TEXT PRIMARY KEY,
    problem_id       TEXT NOT NULL,
    model            TEXT NOT NULL,
    stage            TEXT,
    level            INTEGER,
    subject          TEXT,
    answer           TEXT,
    item             TEXT NOT NULL,
    prompt_ids       BLOB NOT NULL,
    reasoning_tokens INTEGER
);
CREATE TABLE IF NOT EXISTS samples (
    sample_id     INTEGER PRIMARY KEY,
    cell_id       TEXT NOT NULL REFERENCES cells(cell_id),
    kind          TEXT NOT NULL CHECK (kind IN ('base', 'probe', 'restart', 'attempt')),
    anchor        INTEGER NOT NULL,
    budget        INTEGER NOT NULL,
    branch        INTEGER NOT NULL,
    seed          INTEGER NOT NULL,
    prefix_len    INTEGER NOT NULL,
    n_tokens      INTEGER NOT NULL,
    token_ids     BLOB NOT NULL,
    segments      BLOB,
    logprobs      BLOB,
    entropies     BLOB,
    sampling_entropies BLOB,
    text          TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    extra         TEXT NOT NULL DEFAULT '{}',
    elapsed_s     REAL,
    peak_mem_mb   REAL,
    created_at    REAL NOT NULL,
    checksum      TEXT NOT NULL,
    UNIQUE (cell_id, kind, anchor, budget, branch)
);
CREATE TABLE IF NOT EXISTS grades (
    sample_id  INTEGER PRIMARY KEY REFERENCES samples(sample_id),
    grader     TEXT NOT NULL,
    version    TEXT NOT NULL,
    correct    INTEGER NOT NULL,
    status     TEXT NOT NULL,
    method     TEXT NOT NULL,
    extracted  TEXT,
    detail     TEXT NOT NULL DEFAULT '{}',
    graded_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS signals (
    sample_id  INTEGER PRIMARY KEY REFERENCES samples(sample_id),
    names      TEXT NOT NULL,
    data       BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS hidden_vectors (
    sample_id  INTEGER PRIMARY KEY REFERENCES samples(sample_id),
    path       TEXT NOT NULL,
    rows       INTEGER NOT NULL,
    dim        INTEGER NOT NULL,
    stride     INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    sha256     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS errors (
    error_id   INTEGER PRIMARY KEY,
    cell_id    TEXT NOT NULL,
    request    TEXT NOT NULL,
    endpoint   TEXT NOT NULL DEFAULT '',
    message    TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""


@dataclass
class SampleRecord:
    """One finished generation, as the scheduler hands it to the store."""

    cell_id: str
    kind: str  # base | probe | restart | attempt (bt sample: an independent whole solution)
    anchor: int  # t for probes, -1 otherwise
    budget: int  # B for probes, C for restarts, 0 for base
    branch: int
    seed: int
    prefix_len: int  # generated tokens taken from the base trace (0 for base and restarts)
    token_ids: np.ndarray  # every generated token (prefix included for probes)
    text: str
    finish_reason: str
    segments: np.ndarray | None = None  # uint8 codes (breakthrough.models.segments)
    logprobs: np.ndarray | None = None  # float32 per newly generated token
    entropies: np.ndarray | None = None  # float32 per newly generated token (full distribution)
    sampling_entropies: np.ndarray | None = None  # float32: entropy of what it was drawn from
    # per-token instrumentation (GenResult.signals: name -> float32 per newly generated token);
    # stored beside the sample in table `signals` (float32 [fields, tokens], names in order)
    signals: dict[str, np.ndarray] | None = None
    # GenResult.hidden: (token indices int32 [m], float16 vectors [m, d]) of every
    # `hidden_stride`-th token; stored in RUN/hidden/<sample_id>.npz, indexed in hidden_vectors
    hidden: tuple[np.ndarray, np.ndarray] | None = None
    hidden_stride: int = 0
    elapsed_s: float | None = None
    peak_mem_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.cell_id, self.kind, self.anchor, self.budget, self.branch)


def _pack(arr: np.ndarray | None, dtype: str) -> bytes | None:
    return None if arr is None else np.ascontiguousarray(arr, dtype=dtype).tobytes()


def _unpack(blob: bytes | None, dtype: str) -> np.ndarray:
    return np.frombuffer(blob or b"", dtype=dtype)


def _hidden_payload(rec: SampleRecord) -> bytes | None:
    """The .npz bytes of a record's hidden vectors (None without any), refused in one line when
    they cannot be what the engine recorded: checked before the transaction writes anything."""
    if rec.hidden is None:
        return None
    index = np.ascontiguousarray(rec.hidden[0], dtype="<i4")
    vectors = np.ascontiguousarray(rec.hidden[1], dtype="<f2")
    where = f"hidden vectors of {rec.cell_id} {rec.kind} branch {rec.branch}"
    if index.ndim != 1 or vectors.ndim != 2 or len(index) != len(vectors):
        raise BtError(
            f"{where}: expected indices [m] and vectors [m, d], got {index.shape} and "
            f"{vectors.shape}"
        )
    if not isinstance(rec.hidden_stride, (int, np.integer)) or rec.hidden_stride < 1:
        raise BtError(
            f"{where}: hidden_stride must be a positive integer, got {rec.hidden_stride!r}"
        )
    if len(index) and (index.min() < 0 or index.max() >= len(rec.token_ids)):
        raise BtError(
            f"{where}: token index {int(index.max())} outside the {len(rec.token_ids)} "
            "generated tokens"
        )
    buf = io.BytesIO()
    np.savez(buf, token_index=index, hidden=vectors)
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    """`data` to `path` so that a kill at any moment leaves the old file or the whole new one
    (protocol 8.1: temp file, fsync, rename, then the folder's entry made durable)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@dataclass
class HiddenCheck:
    """What `RunStore.verify_hidden` found: rows checked, one line per row whose file is missing
    or does not match its recorded size and sha256, and the files under hidden/ that no row
    names (orphans of a kill between a file's rename and its sample's commit, or temp files)."""

    checked: int
    problems: list[str]
    orphans: list[Path]

    @property
    def ok(self) -> bool:
        return not self.problems and not self.orphans


# Schema 3: what a sample row's checksum covers, one digest per field in this order (so a
# mismatch names the field), each of its SQLite storage class and bytes: the row (its key, seed,
# prefix, tokens, segment codes, per-token arrays, text, finish reason, request facts), the
# sidecars its signals are read from (signals; the hidden-vector index row, whose sha256 covers
# the file), its grade, and its cell's row (the gold answer and the cohort row it is graded
# against). Not covered: timings (elapsed_s, peak_mem_mb, created_at, graded_at), which no result
# reads. With each field, the storage classes it may hold: another is damage in any schema (a
# BLOB column holding TEXT cannot be read as tokens), as is TEXT that is not UTF-8.
_ANY = ("integer", "real", "text", "null")
CHECKED_FIELDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("cell_id", "s.cell_id", ("text",)),
    ("kind", "s.kind", ("text",)),
    ("anchor", "s.anchor", ("integer",)),
    ("budget", "s.budget", ("integer",)),
    ("branch", "s.branch", ("integer",)),
    ("seed", "s.seed", ("integer",)),
    ("prefix_len", "s.prefix_len", ("integer",)),
    ("n_tokens", "s.n_tokens", ("integer",)),
    ("token_ids", "s.token_ids", ("blob",)),
    ("segments", "s.segments", ("blob", "null")),
    ("logprobs", "s.logprobs", ("blob", "null")),
    ("entropies", "s.entropies", ("blob", "null")),
    ("sampling_entropies", "s.sampling_entropies", ("blob", "null")),
    ("text", "s.text", ("text",)),
    ("finish_reason", "s.finish_reason", ("text",)),
    ("extra", "s.extra", ("text",)),
    ("signals.names", "sig.names", ("text", "null")),
    ("signals.data", "sig.data", ("blob", "null")),
    ("hidden_vectors.path", "h.path", ("text", "null")),
    ("hidden_vectors.rows", "h.rows", ("integer", "null")),
    ("hidden_vectors.dim", "h.dim", ("integer", "null")),
    ("hidden_vectors.stride", "h.stride", ("integer", "null")),
    ("hidden_vectors.bytes", "h.bytes", ("integer", "null")),
    ("hidden_vectors.sha256", "h.sha256", ("text", "null")),
    ("grade.grader", "g.grader", ("text", "null")),
    ("grade.version", "g.version", ("text", "null")),
    ("grade.correct", "g.correct", ("integer", "null")),
    ("grade.status", "g.status", ("text", "null")),
    ("grade.method", "g.method", ("text", "null")),
    ("grade.extracted", "g.extracted", ("text", "null")),
    ("grade.detail", "g.detail", ("text", "null")),
    ("cell.problem_id", "c.problem_id", ("text",)),
    ("cell.model", "c.model", ("text",)),
    ("cell.stage", "c.stage", _ANY),
    ("cell.level", "c.level", _ANY),
    ("cell.subject", "c.subject", _ANY),
    ("cell.answer", "c.answer", _ANY),
    ("cell.item", "c.item", ("text",)),
    ("cell.prompt_ids", "c.prompt_ids", ("blob",)),
    ("cell.reasoning_tokens", "c.reasoning_tokens", ("integer", "null")),
)
_FIELD = {name: i for i, (name, _, _) in enumerate(CHECKED_FIELDS)}
_DIGEST = 16  # hex characters per field: a schema-3 checksum is 16 x len(CHECKED_FIELDS)
# the tables besides samples the fields come from (absent from a store made before them: NULL)
_JOINS = {
    "c": ("cells", "c.cell_id = s.cell_id"),
    "g": ("grades", "g.sample_id = s.sample_id"),
    "sig": ("signals", "sig.sample_id = s.sample_id"),
    "h": ("hidden_vectors", "h.sample_id = s.sample_id"),
}


def _checked_sql(tables: set[str]) -> str:
    """SELECT of every sample's id, stored checksum and, per `CHECKED_FIELDS` entry, its storage
    class and its bytes (`CAST AS BLOB`: what SQLite stores, read without decoding, so TEXT that
    is not UTF-8 is damage to report, never a traceback)."""
    cols = []
    for _, expr, _ in CHECKED_FIELDS:
        alias = expr.split(".")[0]
        cols.append(
            "NULL, NULL"
            if alias != "s" and _JOINS[alias][0] not in tables
            else f"typeof({expr}), CAST({expr} AS BLOB)"
        )
    joins = "".join(
        f" LEFT JOIN {table} {alias} ON {on}"
        for alias, (table, on) in _JOINS.items()
        if table in tables
    )
    return (
        f"SELECT s.sample_id, typeof(s.checksum), CAST(s.checksum AS BLOB), {', '.join(cols)} "
        f"FROM samples s{joins}"
    )


@dataclass
class RowDamage:
    """One sample row that does not match its checksum: where it is (its key, read without
    trusting it), the fields whose digests differ (schema 3), and what else is wrong, in words:
    a field that holds what it cannot (a storage class, text that is not UTF-8), a checksum
    that is not one, a grade or sidecar row that was removed. Both are empty for a schema-2
    mismatch, which cannot say which field changed."""

    sample_id: int
    where: str  # "cell kind anchor A budget B branch N"
    cell_id: str
    changed: list[str]
    wrong: list[str]

    def describe(self) -> str:
        parts = (
            [f"{', '.join(self.changed)} changed since it was written"] if self.changed else []
        ) + self.wrong
        if not parts:
            parts = [
                "its token ids, text, finish reason, seed or prefix length changed since it "
                "was written"
            ]
        return f"sample {self.sample_id} ({self.where}): {'; '.join(parts)}"


def _field_digest(storage: str | None, data: bytes | None) -> str:
    return hashlib.sha256(b"%s:%s" % ((storage or "null").encode(), data or b"")).hexdigest()[
        :_DIGEST
    ]


def _checksum(values: Sequence[Any], schema: int) -> str:
    """A row's checksum under `schema` from its `_checked_sql` values (storage class, bytes per
    field): 3, the field digests in order; 2, what stores made before issue 29 hold (a sha256
    of token ids, text, finish reason, seed and prefix length; the same bytes as then)."""
    if schema >= 3:
        return "".join(
            _field_digest(values[2 * i], values[2 * i + 1]) for i in range(len(CHECKED_FIELDS))
        )
    blob = lambda name: values[2 * _FIELD[name] + 1] or b""  # noqa: E731
    h = hashlib.sha256(blob("token_ids"))
    h.update(blob("text"))
    h.update(b"|" + blob("finish_reason") + b"|" + blob("seed") + b"|" + blob("prefix_len"))
    return h.hexdigest()[:32]


def _row_damage(row: Sequence[Any], schema: int | None) -> RowDamage | None:
    """What is wrong with one `_checked_sql` row (None when nothing). `schema` None (a store
    whose manifest cannot say, being checked by `bt verify`): the checksum's own length says."""
    values = row[3:]
    stored = (row[2] or b"").decode("ascii", "replace") if row[1] == "text" else ""
    if schema is None:
        schema = 2 if len(stored) == 32 else int(SCHEMA_VERSION)
    wrong, mistyped = [], set()
    for i, (name, _, allowed) in enumerate(CHECKED_FIELDS):
        storage, data = values[2 * i] or "null", values[2 * i + 1]
        if storage not in allowed:
            wrong.append(f"{name} holds {storage}, not {' or '.join(allowed)}")
        elif storage == "text" and not _utf8(data):
            wrong.append(f"{name} holds text that is not UTF-8")
        else:
            continue
        mistyped.add(name)
    expected = _checksum(values, schema)
    changed: list[str] = []
    if schema < 3:  # one digest of five fields: a mismatch cannot say which
        if stored == expected and not wrong:
            return None
    elif stored == expected and not wrong:
        return None
    elif len(stored) != len(expected):
        wrong.append("its checksum is not a schema-3 checksum")
    else:
        changed = [
            name
            for i, (name, _, _) in enumerate(CHECKED_FIELDS)
            if name not in mistyped
            and stored[i * _DIGEST : (i + 1) * _DIGEST] != expected[i * _DIGEST : (i + 1) * _DIGEST]
        ]
        if not changed and not wrong:
            return None
        for group in ("signals", "hidden_vectors", "grade"):  # a whole sidecar row gone: one word
            names = [n for n, _, _ in CHECKED_FIELDS if n.startswith(group + ".")]
            if all((values[2 * _FIELD[n]] or "null") == "null" for n in names) and set(names) & set(
                changed
            ):
                changed = [n for n in changed if n not in names]
                wrong.append(f"its {group} row was removed")
    text = lambda name: (values[2 * _FIELD[name] + 1] or b"").decode("utf-8", "replace")  # noqa: E731
    where = (
        f"{text('cell_id')} {text('kind')} anchor {text('anchor')} budget {text('budget')} "
        f"branch {text('branch')}"
    )
    return RowDamage(
        sample_id=int(row[0]), where=where, cell_id=text("cell_id"), changed=changed, wrong=wrong
    )


def _utf8(data: bytes | None) -> bool:
    try:
        (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RunStore:
    """The store of one run directory. `RunStore(run_dir)` opens an existing store for writing,
    `create=True` makes a new one, `readonly=True` only reads (status, export, classify,
    reports): it never creates a schema or writes a byte, so a 0-byte or damaged file stays as
    it was and is refused with one line naming it; a run whose folder cannot be written (an
    archived copy, `chattr +i`) is read as an immutable file.

    Every open checks the manifest against `MANIFEST_SCHEMA` and refuses a damaged one in one
    line naming its key, before anything is read or written; `check_manifest=False` (`bt
    verify`, which lists every problem itself) opens it anyway."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        create: bool = False,
        readonly: bool = False,
        check_manifest: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / STORE_FILE
        self.readonly = readonly
        self._verified: set[int] = set()  # sample ids checked (or written) by this object
        # the store's schema: what its checksums cover (None: its manifest cannot say)
        self.schema: int | None = int(SCHEMA_VERSION)
        if not self.path.exists() and (readonly or not create):
            raise BtError(
                f"{self.run_dir}: not a run directory (no {STORE_FILE}); run `bt base` first"
            )
        if self.path.exists() and not (create and self.path.stat().st_size == 0):
            _check_file(
                self.path
            )  # (an empty file is only a new store to `bt base`, which makes it)
        # a store this call makes (no file, or an empty one): removed again, with the folder when
        # it made that too, if it cannot be made whole (`discard_new`)
        self.created = not readonly and (not self.path.exists() or self.path.stat().st_size == 0)
        self._made_dir = not readonly and not self.run_dir.exists()
        try:
            if not readonly:
                self.run_dir.mkdir(parents=True, exist_ok=True)
            if readonly:
                self.conn = sqlite3.connect(
                    _readonly_uri(self.path), uri=True, timeout=60, isolation_level=None
                )
                self.conn.execute("PRAGMA query_only=ON")
            else:
                self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._check_header()
            tables = self._tables()
            missing = {"manifest", "cells", "samples", "grades"} - tables
            if tables and missing:  # another application's database: never add bt's tables to it
                raise BtError(
                    f"{self.path}: not a bt run store (it holds other tables: "
                    f"{', '.join(sorted(tables)[:5])}); bt writes only into its own stores"
                )
            if "manifest" in tables:
                self._check_manifest(check_manifest)
            if not readonly:
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=FULL")
                self.conn.execute("PRAGMA foreign_keys=ON")
                self.conn.executescript(_SCHEMA)
            missing = {"manifest", "cells", "samples", "grades"} - self._tables()
        except BtError:
            self.discard_new()
            raise
        except (sqlite3.OperationalError, OSError) as exc:
            self.discard_new()
            if readonly and isinstance(exc, sqlite3.OperationalError) and _is_write_failure(exc):
                raise _read_error(self.path, exc) from None
            if isinstance(exc, OSError) or _is_write_failure(exc):
                raise _write_error(self.path, exc) from None
            raise BtError(
                f"{self.path}: not a readable run store ({exc}); it is damaged or truncated"
            ) from None
        except sqlite3.DatabaseError as exc:
            self.discard_new()
            raise BtError(
                f"{self.path}: not a readable run store ({exc}); it is damaged or truncated"
            ) from None
        except BaseException:
            self.discard_new()
            raise
        if missing:
            self.conn.close()
            raise BtError(f"{self.path}: not a run store (no table {', '.join(sorted(missing))})")

    def discard_new(self) -> None:
        """Close, and when this object made the store (and its folder), remove them again: a
        creation that fails (disk full, Ctrl-C, a refusal) leaves nothing behind that a rerun
        would have to be told to remove."""
        self._close_quietly()
        if not getattr(self, "created", False):
            return
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        if self._made_dir:
            try:
                self.run_dir.rmdir()
            except OSError:
                pass  # something else was put there meanwhile: leave it
        self.created = False

    def raw_manifest(self) -> dict[str, bytes]:
        """key -> stored JSON bytes of every manifest entry (read as bytes: an entry that is not
        UTF-8 is a damaged value to name, never a decoding traceback)."""
        rows = self.conn.execute("SELECT CAST(key AS BLOB), CAST(value AS BLOB) FROM manifest")
        return {bytes(k or b"").decode("utf-8", "replace"): bytes(v or b"") for k, v in rows}

    def manifest_problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) of every manifest entry that does not fit `MANIFEST_SCHEMA`."""
        return manifest_problems(self.raw_manifest())

    def _check_manifest(self, refuse: bool) -> None:
        """A store made by a newer bt is refused (its layout may mean other things); with
        `refuse`, so is a manifest that does not fit `MANIFEST_SCHEMA`, naming the first key.
        Sets `schema` (an empty manifest: the schema its first write will record)."""
        raw = self.raw_manifest()
        try:
            version = (
                _schema_number(json.loads(raw["schema_version"])) if raw else int(SCHEMA_VERSION)
            )
        except (KeyError, ValueError):
            version = None
        if version is not None and version > int(SCHEMA_VERSION):
            raise BtError(
                f"{self.path}: made by a newer bt (store schema {version}, this bt reads "
                f"schema {SCHEMA_VERSION}); upgrade bt (pip install -U breakthrough)"
            )
        problems = manifest_problems(raw)
        self.schema = None if any(k == "schema_version" for k, _ in problems) else version
        if problems and refuse:
            key, problem = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise BtError(
                f"{self.path}: damaged manifest: key {key!r}: {problem}{more}; the run "
                f"cannot be trusted: restore the store from a copy"
            )

    def _check_header(self) -> None:
        """A file that is not SQLite, or one cut short, fails here before anything is written
        (sqlite3 opens lazily; reading the schema forces it)."""
        self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if self.readonly:  # a reader checks every page once (writers rely on the cheap checks)
            row = self.conn.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                raise sqlite3.DatabaseError(row[0] if row else "quick_check failed")

    def _tables(self) -> set[str]:
        return {
            r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }

    def _close_quietly(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic unit: everything inside is committed together or not at all."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _write_error(self.path, exc) from None
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException as exc:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (e.g. a full disk)
            if isinstance(exc, sqlite3.OperationalError) and _is_write_failure(exc):
                raise _write_error(self.path, exc) from None
            if isinstance(exc, OSError) and exc.errno in (
                errno.ENOSPC,
                errno.EROFS,
                errno.EFBIG,
                errno.EDQUOT,
            ):
                raise _write_error(self.path, exc) from None
            raise

    # ---- manifest -----------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        """key -> value of every manifest entry; an entry that is not JSON is refused naming
        its key (a damaged store, never "an older bt")."""
        out = {}
        for key, value in self.raw_manifest().items():
            try:
                out[key] = json.loads(value)
            except (ValueError, TypeError):
                raise BtError(
                    f"{self.path}: damaged manifest: key {key!r} is not valid JSON "
                    f"({_short(value)[:40]!r}); restore the store from a copy"
                ) from None
        return out

    def ensure_manifest(self, wanted: dict[str, Any]) -> None:
        """Write the manifest of a new run, or refuse a request whose identity differs. The
        schema a store was made with stays its own (a schema-2 store keeps its checksums)."""
        wanted = {"schema_version": str(self.schema or SCHEMA_VERSION), **wanted}
        have = self.manifest()
        self.check_identity(wanted, have)
        self.update_manifest({k: v for k, v in wanted.items() if k not in have})

    def check_identity(self, wanted: dict[str, Any], have: dict[str, Any] | None = None) -> None:
        """Refuse a request whose identity differs from the run's, naming the first differing
        setting (`protocol.base_max_tokens 48 vs 16`, `engine.backend ...`), not two digests.
        Needs no write, so `bt base` calls it on a read-only store before loading a model."""
        have = self.manifest() if have is None else have
        if "model_digest" in have and "model_digest" in wanted:
            same_weights = have["model_digest"] == wanted["model_digest"]
        else:  # a run made before model_digest: its revision
            same_weights = "model_revision" in have and have.get("model_revision") == wanted.get(
                "model_revision"
            )
        by_digest = "model_digest" in have and "model_digest" in wanted
        for key in IDENTITY_FIELDS:
            if key == "model_id" and same_weights:
                continue  # the same weights found another way (a run made when ids were paths)
            if key in ("model_id", "model_revision") and by_digest:
                continue  # the content digest decides (a copy elsewhere, a marker, a new id scheme)
            if key in wanted and key in have and have[key] != wanted[key]:
                name, was, now = _first_difference(key, have[key], wanted[key])
                if key == "protocol_digest":
                    name, was, now = _protocol_difference(have, wanted) or (name, was, now)
                why = (
                    " (another network: its weights, config or tokenizer files differ)"
                    if key == "model_digest"
                    else ""
                )
                option = identity_option(name)
                raise BtError(
                    f"{self.run_dir}: {option + ': ' if option else ''}"
                    f"run was made with {name}={was!r}, this request has "
                    f"{name}={now!r} ({name} {_short(was)} vs {_short(now)}){why}; use a new run "
                    f"directory (--run NAME) or the run's setting"
                )

    def run_kind(self) -> str:
        """ "base" (a `bt base` run, continued by `bt continue`: a study run) or "sample" (a
        `bt sample` run of independent attempts; one made before `run_kind` was recorded holds
        the `attempts` entry)."""
        man = self.manifest()
        return str(man.get("run_kind", "sample" if "attempts" in man else "base"))

    def protocol(self) -> Protocol:
        """The protocol the run was made (or last continued) under, stored whole in the manifest
        and read back whole by every later command; a run that does not hold one is refused
        with the way to fix it (never re-inferred from samples)."""
        man = self.manifest()
        if not man:
            raise BtError(
                f"{self.path}: the manifest is empty: the run was never started, or its "
                f"store is damaged; rerun `bt base` (or restore the store from a copy)"
            )
        if not isinstance(man.get("protocol"), dict):
            raise BtError(
                f"{self.path}: damaged manifest: key 'protocol' is "
                f"{'missing' if 'protocol' not in man else 'not a protocol object'}; "
                f"restore the store from a copy"
            )
        try:
            return Protocol.from_dict(man.get("protocol"))
        except (TypeError, ValueError) as exc:
            raise BtError(
                f"{self.run_dir}: the manifest holds no complete protocol ({exc}); it was made by "
                f"an older bt: rerun `bt continue {self.run_dir}` with the run's settings to "
                "record it"
            ) from None

    def update_manifest(self, values: dict[str, Any]) -> None:
        """Set manifest entries (the first writer of a key is `ensure_manifest`; later phases,
        e.g. `bt continue` recording its B and anchors, update documentation entries here).
        A value that does not fit `MANIFEST_SCHEMA` is refused before anything is written; the
        first write of a store's manifest records the schema it is written with."""
        for key, value in values.items():
            problem = MANIFEST_SCHEMA[key](value) if key in MANIFEST_SCHEMA else None
            if problem:
                raise BtError(
                    f"{self.path}: manifest key {key!r} would hold a wrong value "
                    f"({problem}); nothing was written"
                )
        with self.transaction() as c:
            if c.execute("SELECT 1 FROM manifest LIMIT 1").fetchone() is None:
                values = {"schema_version": str(self.schema or SCHEMA_VERSION), **values}
            for key, value in values.items():
                c.execute(
                    "INSERT OR REPLACE INTO manifest(key, value) VALUES (?, ?)",
                    (key, json.dumps(value, sort_keys=True)),
                )

    # ---- cells --------------------------------------------------------------------------
    def add_cells(self, cells: Iterable[dict[str, Any]]) -> None:
        """Insert cells that are new; existing cells are left untouched (idempotent)."""
        with self.transaction() as c:
            for cell in cells:
                item = cell["item"]
                c.execute(
                    "INSERT OR IGNORE INTO cells(cell_id, problem_id, model, stage, level, subject,"
                    " answer, item, prompt_ids) VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        cell["cell_id"],
                        item["id"],
                        cell["model"],
                        item.get("stage"),
                        item.get("level"),
                        item.get("subject") or item.get("kind"),
                        None if item.get("answer") is None else str(item.get("answer")),
                        json.dumps(item, sort_keys=True, ensure_ascii=False),
                        _pack(np.asarray(cell["prompt_ids"]), "<i4"),
                    ),
                )

    def cell_prompt(self, cell_id: str) -> tuple[dict[str, Any], np.ndarray]:
        """(cohort row, prompt token ids) of one cell."""
        row = self.conn.execute(
            "SELECT item, prompt_ids FROM cells WHERE cell_id=?", (cell_id,)
        ).fetchone()
        if row is None:
            raise BtError(f"{self.path}: no cell {cell_id!r}")
        return json.loads(row[0]), _unpack(row[1], "<i4")

    # ---- samples and grades ---------------------------------------------------------------
    def existing_keys(
        self, kind: str | None = None, cell_id: str | None = None
    ) -> set[tuple[str, str, int, int, int]]:
        """Keys (cell_id, kind, anchor, budget, branch) of the stored samples."""
        where, params = self._where(kind=kind, cell_id=cell_id)
        rows = self.conn.execute(
            "SELECT cell_id, kind, anchor, budget, branch FROM samples s" + where, params
        )
        return {tuple(r) for r in rows}

    @staticmethod
    def _where(**filters: str | None) -> tuple[str, tuple]:
        """A WHERE clause on samples (alias s) for the given non-None column filters."""
        used = {k: v for k, v in filters.items() if v is not None}
        if not used:
            return "", ()
        return " WHERE " + " AND ".join(f"s.{k}=?" for k in used), tuple(used.values())

    def add_samples(
        self,
        records: Sequence[SampleRecord],
        grades: Sequence[Grade | None] | None = None,
        reasoning_tokens: dict[str, int] | None = None,
    ) -> int:
        """Commit one finished batch (samples, their grades, base reasoning lengths) atomically.

        Samples whose key already exists are skipped, so a rerun after a crash never duplicates.
        Returns the number of samples inserted."""
        grades = list(grades) if grades is not None else [None] * len(records)
        payloads = [_hidden_payload(rec) for rec in records]  # refused before anything is written
        if any(p is not None for p in payloads):
            (self.run_dir / HIDDEN_DIR).mkdir(exist_ok=True)
        inserted = 0
        written: list[int] = []
        with self.transaction() as c:
            for rec, grade, payload in zip(records, grades, payloads, strict=True):
                tok = _pack(rec.token_ids, "<i4")
                cur = c.execute(
                    "INSERT OR IGNORE INTO samples(cell_id, kind, anchor, budget, branch, seed,"
                    " prefix_len, n_tokens, token_ids, segments, logprobs, entropies,"
                    " sampling_entropies, text, finish_reason, extra, elapsed_s, peak_mem_mb,"
                    " created_at, checksum) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        rec.cell_id,
                        rec.kind,
                        rec.anchor,
                        rec.budget,
                        rec.branch,
                        rec.seed,
                        rec.prefix_len,
                        len(rec.token_ids),
                        tok,
                        _pack(rec.segments, "u1"),
                        _pack(rec.logprobs, "<f4"),
                        _pack(rec.entropies, "<f4"),
                        _pack(rec.sampling_entropies, "<f4"),
                        rec.text,
                        rec.finish_reason,
                        json.dumps(rec.extra, sort_keys=True),
                        rec.elapsed_s,
                        rec.peak_mem_mb,
                        time.time(),
                        "",  # sealed below, once the row's grade, signals and vectors are in
                    ),
                )
                if cur.rowcount == 0:
                    continue
                inserted += 1
                sid = cur.lastrowid
                assert sid is not None  # the id of the row this INSERT just wrote
                written.append(sid)
                if rec.signals:
                    names = sorted(rec.signals)
                    data = np.stack([np.asarray(rec.signals[k], dtype="<f4") for k in names])
                    c.execute(
                        "INSERT INTO signals(sample_id, names, data) VALUES (?,?,?)",
                        (sid, json.dumps(names), data.tobytes()),
                    )
                if payload is not None:
                    self._write_hidden(c, sid, rec, payload)
                if grade is not None:
                    self._write_grade(c, sid, grade)
            for cell_id, n in (reasoning_tokens or {}).items():
                # set once, with the cell's base trace: its samples' checksums cover it
                c.execute(
                    "UPDATE cells SET reasoning_tokens=? WHERE cell_id=? AND "
                    "reasoning_tokens IS NULL",
                    (n, cell_id),
                )
            self._seal(c, written)
        self._verified.update(written)  # committed by this object: no need to hash them again
        return inserted

    def _seal(self, c: sqlite3.Connection, ids: Sequence[int]) -> None:
        """Write the checksums of rows `ids` (inside the transaction that wrote them), computed
        from what the store now holds, read back by the query every check uses: what is
        checked later is exactly what was sealed."""
        for rows in self._checked_rows(ids, c):
            c.executemany(
                "UPDATE samples SET checksum=? WHERE sample_id=?",
                [(_checksum(r[3:], self.schema or int(SCHEMA_VERSION)), r[0]) for r in rows],
            )

    def _checked_rows(
        self, ids: Sequence[int] | None = None, conn: sqlite3.Connection | None = None
    ) -> Iterator[list[tuple]]:
        """`_checked_sql` rows of samples `ids` (all samples when None), in chunks."""
        conn = conn or self.conn
        sql = _checked_sql(self._tables())
        if ids is None:
            cur = conn.execute(sql + " ORDER BY s.sample_id")
            while rows := cur.fetchmany(500):
                yield rows
            return
        ids = list(ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            yield conn.execute(
                f"{sql} WHERE s.sample_id IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()

    def _write_hidden(
        self, c: sqlite3.Connection, sample_id: int, rec: SampleRecord, payload: bytes
    ) -> None:
        """The sample's hidden-vector file, durable before its row (and the sample) commit:
        a kill after this leaves at worst an orphan file, never a row without its file."""
        rel = f"{HIDDEN_DIR}/{sample_id}.npz"
        _write_atomic(self.run_dir / rel, payload)
        vectors = rec.hidden[1]  # type: ignore[index]
        c.execute(
            "INSERT INTO hidden_vectors(sample_id, path, rows, dim, stride, bytes,"
            " sha256) VALUES (?,?,?,?,?,?,?)",
            (
                sample_id,
                rel,
                int(vectors.shape[0]),
                int(vectors.shape[1]),
                int(rec.hidden_stride),
                len(payload),
                hashlib.sha256(payload).hexdigest(),
            ),
        )

    # ---- hidden vectors ---------------------------------------------------------------------
    def _hidden_index(
        self, sample_id: int | None = None
    ) -> dict[int, tuple[str, int, int, int, int, str]]:
        """sample id -> (path, rows, dim, stride, bytes, sha256) of every stored file, or of
        `sample_id`'s (none in a store made before the table existed)."""
        if "hidden_vectors" not in self._tables():
            return {}
        sql = "SELECT sample_id, path, rows, dim, stride, bytes, sha256 FROM hidden_vectors"
        rows = (
            self.conn.execute(sql + " ORDER BY sample_id")
            if sample_id is None
            else self.conn.execute(sql + " WHERE sample_id=?", (int(sample_id),))
        )
        return {int(r[0]): tuple(r[1:]) for r in rows}

    def hidden_table(self):  # -> pd.DataFrame
        """One row per sample with stored hidden vectors: sample_id, path (relative to the run
        directory), rows, dim, stride, bytes, sha256."""
        import pandas as pd

        cols = ["sample_id", "path", "rows", "dim", "stride", "bytes", "sha256"]
        return pd.DataFrame([(sid, *v) for sid, v in self._hidden_index().items()], columns=cols)

    def hidden_vectors(self, sample_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(token indices int32 [m], float16 vectors [m, d]) of one sample, read only after the
        file matches its recorded size and sha256; a missing or damaged file is refused in one
        line naming it."""
        have = self._hidden_index(sample_id).get(int(sample_id))
        if have is None:
            raise BtError(f"{self.run_dir}: sample {sample_id} has no stored hidden vectors")
        rel, rows, dim, _, size, sha = have
        path = self.run_dir / rel
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise BtError(
                f"{path}: hidden vectors of sample {sample_id} cannot be read "
                f"({exc.strerror or exc})"
            ) from None
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise BtError(
                f"{path}: hidden vectors of sample {sample_id} do not match their "
                f"recorded checksum ({len(data):,} bytes, recorded {size:,}, sha256 "
                f"{hashlib.sha256(data).hexdigest()[:12]} vs {sha[:12]}); the file is "
                "damaged"
            )
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            index, vectors = npz["token_index"], npz["hidden"]
        if vectors.shape != (rows, dim) or index.shape != (rows,):
            raise BtError(f"{path}: holds {vectors.shape} vectors, its row records ({rows}, {dim})")
        return index, vectors

    def _hidden_orphans(self, index: dict[int, tuple]) -> list[Path]:
        folder = self.run_dir / HIDDEN_DIR
        if not folder.is_dir():
            return []
        named = {self.run_dir / v[0] for v in index.values()}
        return sorted(p for p in folder.iterdir() if p.is_file() and p not in named)

    def verify_hidden(self) -> HiddenCheck:
        """Every hidden_vectors row's file exists with its recorded size and sha256 (protocol
        8.1's payload check), and every file under hidden/ is named by a row."""
        index = self._hidden_index()
        problems = []
        for sid, (rel, _, _, _, size, sha) in index.items():
            path = self.run_dir / rel
            if not path.is_file():
                problems.append(f"{path}: missing (hidden vectors of sample {sid})")
                continue
            data = path.read_bytes()
            if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                problems.append(
                    f"{path}: does not match its recorded size and sha256 "
                    f"(hidden vectors of sample {sid})"
                )
        return HiddenCheck(
            checked=len(index), problems=problems, orphans=self._hidden_orphans(index)
        )

    def remove_orphan_hidden(self) -> list[Path]:
        """Remove the files under hidden/ that no committed row names (left by a kill between a
        file's rename and its sample's commit). Done holding the store's write lock: files are
        only written under it, so no other writer can be between its rename and its commit."""
        if self.readonly:
            raise BtError(
                f"{self.path}: opened read-only; cannot remove orphan hidden-vector files"
            )
        with self.transaction():
            orphans = self._hidden_orphans(self._hidden_index())
            for path in orphans:
                path.unlink(missing_ok=True)
        return orphans

    @staticmethod
    def _write_grade(c: sqlite3.Connection, sample_id: int, g: Grade) -> None:
        c.execute(
            "INSERT OR REPLACE INTO grades(sample_id, grader, version, correct, status, method,"
            " extracted, detail, graded_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                sample_id,
                g.grader,
                g.version,
                int(g.correct),
                g.status,
                g.method,
                g.extracted,
                json.dumps(g.detail, sort_keys=True, default=str),
                time.time(),
            ),
        )

    def add_error(self, cell_id: str, request: str, message: str, endpoint: str = "") -> None:
        """Record a request a remote backend gave up on (GenResult.finish_reason "error"): the
        cell's sample stays missing, so a rerun retries it; the row says what happened."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO errors (cell_id, request, endpoint, message, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (cell_id, request, endpoint, message, time.time()),
            )

    def errors(self) -> list[dict[str, Any]]:
        """Stored request errors, oldest first (none in a store made before the table existed)."""
        if "errors" not in self._tables():
            return []
        rows = self.conn.execute(
            "SELECT cell_id, request, endpoint, message, created_at FROM errors ORDER BY error_id"
        ).fetchall()
        return [
            dict(zip(("cell_id", "request", "endpoint", "message", "created_at"), r, strict=True))
            for r in rows
        ]

    def set_grades(self, pairs: Sequence[tuple[int, Grade]]) -> None:
        """Store (or replace) grades for existing samples in one transaction (`bt grade`), and
        the checksums that cover them: only of rows that match theirs first (a damaged row is
        refused, never sealed again as if it were whole)."""
        ids = [int(sid) for sid, _ in pairs]
        self._check_ids(ids)
        with self.transaction() as c:
            for sample_id, grade in pairs:
                self._write_grade(c, sample_id, grade)
            self._seal(c, ids)

    def ungraded(self, *, include_graded: bool = False) -> list[tuple[int, str, str, str]]:
        """(sample_id, cell_id, text, finish_reason) of samples without a grade (of every
        sample with `include_graded`, for a regrade)."""
        where = "" if include_graded else " WHERE s.sample_id NOT IN (SELECT sample_id FROM grades)"
        self.check_where(where)  # a grade of a changed row would look like a real result
        return [
            tuple(r)
            for r in self.conn.execute(
                "SELECT s.sample_id, s.cell_id, s.text, s.finish_reason FROM samples s"
                + where
                + " ORDER BY s.sample_id"
            )
        ]

    def items(self) -> dict[str, dict[str, Any]]:
        """cell_id -> the cohort row the cell was made from (what graders judge against)."""
        return {
            cid: json.loads(item)
            for cid, item in self.conn.execute("SELECT cell_id, item FROM cells")
        }

    def verify_integrity(self) -> list[RowDamage]:
        """Every sample row that does not match its checksum (empty when the store is whole)."""
        return [
            d
            for rows in self._checked_rows()
            for r in rows
            if (d := _row_damage(r, self.schema)) is not None
        ]

    def check_where(self, where: str = "", params: tuple = ()) -> None:
        """`_check_ids` of the samples `where` selects (a WHERE clause on samples as `s`)."""
        self._check_ids(
            [
                int(r[0])
                for r in self.conn.execute("SELECT s.sample_id FROM samples s" + where, params)
            ]
        )

    def _check_ids(self, ids: Iterable[int]) -> None:
        """Refuse, in one line, sample rows `ids` that do not match their checksums: every
        command that reads samples checks the rows it uses (a sha256 of a few KB per row) once
        per command (rows this object checked or wrote are not hashed again); `bt verify`
        checks all."""
        todo = [i for i in ids if i not in self._verified]
        bad: list[RowDamage] = []
        for rows in self._checked_rows(todo):
            for r in rows:
                damage = _row_damage(r, self.schema)
                if damage is None:
                    self._verified.add(int(r[0]))
                else:
                    bad.append(damage)
        if bad:
            more = f" (and {len(bad) - 1:,} more rows)" if len(bad) > 1 else ""
            raise BtError(
                f"{self.path}: {bad[0].describe()}: it does not match its checksum"
                f"{more}; the store is damaged: `bt verify {self.run_dir}` lists what, "
                f"restore it from a copy"
            )

    # ---- frames -------------------------------------------------------------------------
    def cells_frame(self):  # -> pd.DataFrame
        import pandas as pd

        return pd.read_sql_query(
            "SELECT cell_id, problem_id, model, stage, level, subject, answer, reasoning_tokens"
            " FROM cells ORDER BY cell_id",
            self.conn,
        )

    def samples_frame(
        self,
        *,
        arrays: bool = True,
        kind: str | None = None,
        cell_id: str | None = None,
        signals: bool = False,
    ):  # -> pd.DataFrame
        """One row per sample joined with its cell and grade (columns in docs/architecture.md).
        `signals=True` adds a column `signals`: per sample a dict name -> float32 array of the
        per-token instrumentation (SampleRecord.signals), empty where none was recorded."""
        import pandas as pd

        cols = (
            "s.sample_id, s.cell_id, c.problem_id, c.model, c.stage, c.level, c.subject,"
            " s.kind, s.anchor, s.budget, s.branch, s.seed, s.prefix_len, s.n_tokens,"
            " s.finish_reason, s.text, s.extra, s.elapsed_s, s.peak_mem_mb,"
            " g.correct, g.status AS grade_status, g.method AS grade_method,"
            " g.extracted AS grade_extracted, g.detail AS grade_detail, g.version AS grader_version"
        )
        if arrays:
            cols += ", s.token_ids, s.segments, s.logprobs, s.entropies, s.sampling_entropies"
        sql = (
            f"SELECT {cols} FROM samples s JOIN cells c USING(cell_id) "
            "LEFT JOIN grades g USING(sample_id)"
        )
        where, params = self._where(kind=kind, cell_id=cell_id)
        self.check_where(where, params)  # the rows this frame holds, before anything uses them
        df = pd.read_sql_query(sql + where + " ORDER BY s.sample_id", self.conn, params=params)
        df["correct"] = df["correct"].map(lambda v: bool(v) if v == v and v is not None else np.nan)
        if arrays:
            for col, dtype in (
                ("token_ids", "<i4"),
                ("segments", "u1"),
                ("logprobs", "<f4"),
                ("entropies", "<f4"),
                ("sampling_entropies", "<f4"),
            ):
                df[col] = [_unpack(b, dtype) for b in df[col]]
        if signals:
            have = self._signals(where, params)
            df["signals"] = [have.get(int(sid), {}) for sid in df["sample_id"]]
        return df

    def _signals(self, where: str, params: tuple) -> dict[int, dict[str, np.ndarray]]:
        """Stored instrumentation by sample id (none in stores made before it existed)."""
        if "signals" not in self._tables():
            return {}
        out: dict[int, dict[str, np.ndarray]] = {}
        sql = "SELECT g.sample_id, g.names, g.data FROM signals g JOIN samples s USING(sample_id)"
        for sid, names_json, blob in self.conn.execute(sql + where, params):
            names = json.loads(names_json)
            data = np.frombuffer(blob, dtype="<f4").reshape(len(names), -1)
            out[int(sid)] = {k: data[j] for j, k in enumerate(names)}
        return out


SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_file(path: Path) -> None:
    """Refuse a file that cannot be a whole SQLite store from its 100-byte header alone, before
    sqlite3 opens it (and adds its -wal/-shm files beside it): empty, not SQLite, or shorter
    than the page count its header records (a truncated copy)."""
    size = path.stat().st_size
    if size == 0:
        raise BtError(
            f"{path}: empty file (0 bytes), not a run store; remove it and rerun `bt base`"
        )
    with open(path, "rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise BtError(f"{path}: not a run store (not an SQLite file); it is damaged or not bt's")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    header_valid = head[24:28] == head[92:96]  # the page count is valid only then (SQLite docs)
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:  # a checkpoint cut short: the WAL still holds the pages
        return  # (SQLite recovers it; its own checks run when the store is read)
    if size % page or (header_valid and size < pages * page):
        raise BtError(
            f"{path}: truncated run store ({size:,} bytes, its header records "
            f"{pages * page:,}); restore it from a copy"
        )


def _protocol_difference(
    have: dict[str, Any], wanted: dict[str, Any]
) -> tuple[str, Any, Any] | None:
    """The first differing constant of the protocols' identities (what `protocol_digest` is a
    digest of), when both manifests hold a whole protocol."""
    try:
        was = Protocol.from_dict(have.get("protocol"), partial=True).identity()
        now = Protocol.from_dict(wanted.get("protocol"), partial=True).identity()
    except (TypeError, ValueError):
        return None
    # `bt continue` rewrites the stored protocol's answer budget (its own identity field), so a
    # difference there names the base request's setting only when it is the only one.
    keys = [k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
    keys.sort(key=lambda k: k == "answer_budget")
    if not keys:
        return None
    return _first_difference(f"protocol.{keys[0]}", was.get(keys[0]), now.get(keys[0]))


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _first_difference(name: str, was: Any, now: Any) -> tuple[str, Any, Any]:
    """The first differing setting inside two manifest values (dicts are compared key by key),
    so a refusal names it (e.g. `engine.backend='mlx'`) instead of two whole objects."""
    if isinstance(was, dict) and isinstance(now, dict):
        for key in sorted(set(was) | set(now)):
            if was.get(key) != now.get(key):
                return _first_difference(f"{name}.{key}", was.get(key), now.get(key))
    return name, was, now


# The files that mark a folder as the output of an analysis command (never a run: no store).
OUTPUT_MARKERS = (
    ("labels.parquet", "bt classify output"),
    ("headlines.json", "bt report study output"),
    ("confirm.json", "bt confirm output"),
    ("sweep.json", "bt confirm output"),
    ("probe_summary.json", "bt probe output"),
    ("index.html", "a report"),
)


def is_run_dir(path: str | Path) -> bool:
    """The one test of what a run is: a folder holding bt's store (`store.sqlite`). Analysis
    outputs (`classify/`, `study/`, `confirm/`, `probe/`) hold none, so they are never runs."""
    return (Path(path) / STORE_FILE).is_file()


def _not_a_run(path: Path) -> str:
    """Why `path` is no run, in a few words (the output it is, when it is one)."""
    what = next((w for f, w in OUTPUT_MARKERS if (path / f).is_file()), None)
    return f"not a run: {what}" if what else f"not a run: no {STORE_FILE}"


@dataclass
class FoundRuns:
    """What `find_runs` made of the paths given: the runs, and one note per path skipped."""

    runs: list[Path]
    notes: list[str] = field(default_factory=list)


def find_runs(paths: Sequence[str | Path], *, study: bool = False) -> FoundRuns:
    """Expand the paths a command was given (`runs/`, `runs/*`, run folders) into runs: a run
    folder (`is_run_dir`) is kept; a folder holding runs stands for them; any other folder
    (an analysis output such as `runs/classify`, an empty folder) is skipped with one note.
    With `study`, a `bt sample` / `bt cohorts screen` run (independent attempts: no probes, no
    restarts) is skipped too, with one note naming them; it is a run, but not of the study.
    Refused (one line) when a path does not exist or no run is left."""
    found: list[Path] = []
    notes: list[str] = []
    for p in map(Path, paths):
        if is_run_dir(p):
            found.append(p)
        elif p.is_dir():
            inside = sorted(d for d in p.iterdir() if is_run_dir(d))
            if inside:
                found.extend(inside)
            else:
                notes.append(f"skipped {p} ({_not_a_run(p)})")
        else:
            raise BtError(f"{p}: no such run directory")
    seen: set[Path] = set()  # a run named twice (`bt continue r r`, or `r` and `./r`) is one run
    unique = []
    for run in found:
        key = run.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(run)
    skipped: list[Path] = []
    if study:
        kept: list[Path] = []
        for d in unique:
            with RunStore(d, readonly=True) as store:
                (kept if store.run_kind() == "base" else skipped).append(d)
        if skipped and not kept:
            raise BtError(
                f"{', '.join(map(str, skipped))}: `bt sample` run"
                f"{'s' if len(skipped) > 1 else ''} (independent attempts), not a study "
                f"run of `bt base` + `bt continue`; nothing to label"
            )
        unique = kept
    if not unique:
        raise BtError(
            f"no run directories (with {STORE_FILE}) under {', '.join(map(str, paths))}"
            + (f" ({'; '.join(notes)})" if notes else "")
        )
    if skipped:
        notes.append(
            f"skipped {len(skipped)} `bt sample` run{'s' if len(skipped) > 1 else ''} "
            f"(independent attempts, not a study run): {', '.join(map(str, skipped))}"
        )
    return FoundRuns(unique, notes)


def run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """`find_runs(paths).runs`, for a caller with no one to tell what was skipped."""
    return find_runs(paths).runs


def check_writable(run_dir: Path) -> None:
    """Before a model is loaded: refuse an existing run whose store or folder cannot be written
    (read-only, or immutable: `chattr +i`), in the one line a failed write would give later."""
    run_dir = Path(run_dir)
    path = run_dir / STORE_FILE
    for p in (path, run_dir):
        if p.exists() and not os.access(p, os.W_OK):
            raise _write_error(path, OSError(errno.EACCES, f"{p} is read-only or immutable"))


def _readonly_uri(path: Path) -> str:
    """The URI a reader opens `path` with: `mode=ro`, and `immutable=1` when its folder cannot be
    written and no -wal file holds commits: a WAL store's readers need a -shm file beside it,
    which an archived run's folder (read-only, `chattr +i`) cannot take, and no writer can
    change such a store either (it would need its own -wal there)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    wal = path.with_name(path.name + "-wal")
    if not os.access(path.parent, os.W_OK) and not (wal.exists() and wal.stat().st_size):
        uri += "&immutable=1"
    return uri


def _read_error(path: Path, exc: BaseException) -> BtError:
    """One line for a store a reader cannot open (a folder it cannot write whose -wal file
    still holds commits: SQLite needs a -shm file beside it to read them)."""
    wal = path.with_name(path.name + "-wal")
    why = (
        f"{wal.name} holds commits not yet in {path.name} and its folder cannot be written"
        if wal.exists() and wal.stat().st_size
        else "its folder or file cannot be read"
    )
    return BtError(
        f"{path}: cannot read the run store ({exc}): {why}; make the folder "
        f"writable, or read a copy of the run folder"
    )


def _is_write_failure(exc: sqlite3.OperationalError) -> bool:
    """SQLite's words for a store it cannot write (full disk, read-only or immutable file,
    I/O error), as opposed to a damaged one."""
    text = str(exc).lower()
    return any(
        w in text
        for w in (
            "readonly",
            "read-only",
            "full",
            "disk i/o",
            "unable to open",
            "locked",
            "permission",
        )
    )


def _write_error(path: Path, exc: BaseException) -> BtError:
    """One line for a store that cannot be written: what SQLite or the OS said, and that the
    batch in progress was not written (a transaction is all or nothing)."""
    what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return BtError(
        f"{path}: cannot write the run store ({what}): the disk is full or the file "
        f"or its folder is read-only; nothing of the unfinished batch was kept, free "
        f"space or fix the permissions and rerun to resume"
    )
