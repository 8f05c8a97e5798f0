"""The SQL core of a run store: one SQLite database (WAL) per run directory (`RunStore`): its
tables, opening and refusing files that are not whole stores, transactions, the manifest,
cells, samples, grades, errors and the row checks every reader runs. The hidden-vector sidecar
(`hidden.py`) and the pandas readers (`frames.py`) are parts of `RunStore`; identity rules
live in `identity.py`, checksums in `checksums.py`."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from breakthrough.errors import BtError
from breakthrough.protocol import Protocol
from breakthrough.store.checksums import RowDamage, _checked_sql, _checksum, _row_damage
from breakthrough.store.frames import Frames
from breakthrough.store.hidden import HiddenVectors, _hidden_payload
from breakthrough.store.identity import (
    MANIFEST_SCHEMA,
    _schema_number,
    check_identity,
    manifest_problems,
)
from breakthrough.store.queries import Queries
from breakthrough.store.records import (
    HIDDEN_DIR,
    SCHEMA_VERSION,
    STORE_FILE,
    SampleRecord,
    _pack,
    _short,
    _unpack,
)
from breakthrough.tasks.grade import Grade

if TYPE_CHECKING:
    import numpy as np

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


class RunStore(HiddenVectors, Frames, Queries):
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
        # manifest entries held back until the first sample commits (`identity_with_first_sample`)
        self._staged: dict[str, Any] | None = None
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
    @contextmanager
    def identity_with_first_sample(self) -> Iterator[None]:
        """Hold back every manifest entry written inside the block (a continuation's protocol,
        engine, KV setting, top-up rules, a probe arm) and commit it in the same transaction as
        the first sample the block stores, or when the block ends normally.

        Why: a run's identity must describe samples that exist. Written up front, a setting
        whose first generation crashed (or was killed) stayed in the manifest with no sample
        made under it, and every later plain rerun took it up again, or was refused for
        asking for another ("a run never mixes them"). An exception before any sample drops
        the held entries, so the store is as it was; a SIGKILL writes none of them. Entries
        written after the first sample go with the next sample or the block's end. Reads
        inside the block (`manifest`, `check_identity`) see the held entries."""
        if self._staged is not None:  # nested: the outer block decides
            yield
            return
        self._staged = {}
        try:
            yield
        except BaseException:
            self._staged = None  # nothing was made under them: the run is as it was
            raise
        staged, self._staged = self._staged, None
        if staged:
            self._write_manifest(staged)

    def manifest(self) -> dict[str, Any]:
        """key -> value of every manifest entry (with the entries held back for the first
        sample, `identity_with_first_sample`); an entry that is not JSON is refused naming
        its key (a damaged store, never "an older bt")."""
        out = self._stored_manifest()
        if self._staged:
            out.update(json.loads(json.dumps(self._staged, sort_keys=True)))
        return out

    def _stored_manifest(self) -> dict[str, Any]:
        """The manifest as the store holds it (no held-back entry)."""
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
        check_identity(self.run_dir, wanted, self.manifest() if have is None else have)

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
                f"{self.run_dir}: the manifest holds no complete protocol ({exc}); it was made "
                f"by an older bt: rerun `bt continue {self.run_dir}` with the run's settings "
                "to record it"
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
        if self._staged is not None:  # committed with the block's first sample
            self._staged.update(values)
            return
        self._write_manifest(values)

    def _write_manifest(self, values: dict[str, Any], c: sqlite3.Connection | None = None) -> None:
        """Write manifest entries (inside transaction `c`, else in one of their own)."""
        if c is None:
            with self.transaction() as conn:
                self._write_manifest(values, conn)
            return
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
        import numpy as np

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
                    import numpy as np  # here: a store is read without NumPy (records.py)

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
            if written and self._staged:  # the identity they were made under, with them
                self._write_manifest(self._staged, c)
        if written and self._staged is not None:
            self._staged.clear()
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

    def outcomes(
        self, *, kind: str | None = None, cell_id: str | None = None
    ) -> list[tuple[int, str, str, int, int, int, bool | None, int]]:
        """(sample_id, cell_id, kind, anchor, budget, branch, correct, n_tokens) of every sample
        of a cell (of one `kind`, of one `cell_id`), by sample_id; `correct` None while
        ungraded. What `samples_frame` holds of a sample's key and verdict (the same join, the
        same rows checked against their checksums first), as plain tuples: `bt status` and the
        scheduler read panels from these without pandas."""
        where, params = self._where(kind=kind, cell_id=cell_id)
        self.check_where(where, params)
        return [
            (int(sid), cid, kd, int(a), int(b), int(br), None if ok is None else bool(ok), int(n))
            for sid, cid, kd, a, b, br, ok, n in self.conn.execute(
                "SELECT s.sample_id, s.cell_id, s.kind, s.anchor, s.budget, s.branch, g.correct,"
                " s.n_tokens FROM samples s JOIN cells c USING(cell_id)"
                " LEFT JOIN grades g USING(sample_id)" + where + " ORDER BY s.sample_id",
                params,
            )
        ]

    def base_traces(self) -> list[dict[str, Any]]:
        """One dict per stored base trace, by sample_id: cell_id, token_ids (int32) and
        segments (uint8 codes): what a cell's plan is cut from (`pipeline.cells.plan_cell`),
        rows checked against their checksums first, without building a data frame (pandas
        costs `bt continue` a good part of a second before its first sample)."""
        where, params = self._where(kind="base")
        self.check_where(where, params)
        return [
            {"cell_id": cid, "token_ids": _unpack(tok, "<i4"), "segments": _unpack(seg, "u1")}
            for cid, tok, seg in self.conn.execute(
                "SELECT s.cell_id, s.token_ids, s.segments FROM samples s JOIN cells c"
                " USING(cell_id)" + where + " ORDER BY s.sample_id",
                params,
            )
        ]

    def base_trace_gone(self) -> set[str]:
        """Cells whose base trace the store proves was written and no longer holds (no base row
        is left): a probe of the cell was cut from it (prefix_len > 0: its prefix is the
        trace's first tokens), or, in a run `bt continue` continued (manifest `continuation`,
        committed with its first sample), the cell holds any probe or restart, since `bt
        continue` works only the cells whose base trace is stored (a trace shorter than every
        anchor gets restarts alone, and no probe to prove it). Such a cell is unfinished
        (`classify.completeness`), never labelled from what is left; `bt verify` names it."""
        where = " WHERE s.kind IN ('probe', 'restart')"
        self.check_where(where)
        continued = "continuation" in self.manifest()
        return {
            str(cid)
            for (cid,) in self.conn.execute(
                "SELECT DISTINCT s.cell_id FROM samples s" + where + " AND (? OR (s.kind='probe'"
                " AND s.prefix_len > 0)) AND NOT EXISTS (SELECT 1 FROM samples b"
                " WHERE b.cell_id=s.cell_id AND b.kind='base')",
                (continued,),
            )
        }

    def base_segments(self) -> dict[str, bytes]:
        """cell_id -> the segment codes of its base trace (one byte a token, as stored; rows
        checked against their checksums first): the grid each cell's probes must cover
        (`classify.completeness.owed_grid`), read without NumPy (`bt status`)."""
        where, params = self._where(kind="base")
        self.check_where(where, params)
        return {
            str(cid): bytes(seg or b"")
            for cid, seg in self.conn.execute(
                "SELECT s.cell_id, s.segments FROM samples s" + where + " ORDER BY s.sample_id",
                params,
            )
        }

    def cell_reasoning_tokens(self) -> list[tuple[str, int | None]]:
        """(cell_id, reasoning tokens of its base trace, None before one) of every cell, by
        cell_id: the `cells_frame` columns `bt status` shows, without pandas."""
        return [
            (cid, None if rt is None else int(rt))
            for cid, rt in self.conn.execute(
                "SELECT cell_id, reasoning_tokens FROM cells ORDER BY cell_id"
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


READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _read_only_part(path: Path, exc: BaseException) -> str | None:
    """What of a run cannot be written, when that is why a write failed (an archived run:
    `chmod a-w`, `chattr +i`, a read-only mount): the store file, its folder, or the store
    as SQLite said; None when the failure is something else (a full disk, an I/O error)."""
    text = str(exc).lower()
    if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS or "full" in text:
        return None
    for p, name in ((path, str(path)), (path.parent, f"its folder {path.parent}")):
        if p.exists() and not os.access(p, os.W_OK):
            return name
    if isinstance(exc, OSError) and exc.errno in READ_ONLY_ERRNOS:
        return str(path)
    if any(w in text for w in ("readonly", "read-only", "permission")):
        return str(path)
    return None


def _write_error(path: Path, exc: BaseException) -> BtError:
    """One line for a store that cannot be written: what SQLite or the OS said, and what it
    means. A read-only run (an archived copy) is named as such, with the fact that matters:
    nothing was written and nothing it holds was lost (the readers still read it). Otherwise
    (a full disk, an I/O error) the batch in progress was not written (a transaction is all
    or nothing)."""
    what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    part = _read_only_part(path, exc)
    if part is not None:
        return BtError(
            f"{path}: cannot write the run store ({what}): the run is read-only ({part} "
            f"cannot be written: an archived copy, chmod a-w or chattr +i); nothing more "
            f"was written and nothing it holds was lost (bt verify, status, export and classify "
            f"read it as it is); make it writable to add to it"
        )
    return BtError(
        f"{path}: cannot write the run store ({what}): the disk is full or the file "
        f"or its folder is read-only; nothing of the unfinished batch was kept, free "
        f"space or fix the permissions and rerun to resume"
    )
