"""The hidden-vector sidecar of a run store (protocol 2.2's hidden_states.npz): megabytes per
trajectory, so kept outside SQLite. `hidden/<sample_id>.npz` (arrays `token_index` int32 and
`hidden` float16) is written atomically and durably inside the sample's transaction, before it
commits; its `hidden_vectors` row (size and sha256 of the file) commits with the sample. A kill
between the rename and the commit leaves a file no row names (an orphan), which
`remove_orphan_hidden` removes and `verify_hidden` lists."""

from __future__ import annotations

import hashlib
import io
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from breakthrough.errors import BtError
from breakthrough.outputs import replace_atomic
from breakthrough.store.records import HIDDEN_DIR, SampleRecord

if TYPE_CHECKING:
    import numpy as np


def _hidden_payload(rec: SampleRecord) -> bytes | None:
    """The .npz bytes of a record's hidden vectors (None without any), refused in one line when
    they cannot be what the engine recorded: checked before the transaction writes anything."""
    if rec.hidden is None:
        return None
    import numpy as np

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
    replace_atomic(path, lambda tmp: tmp.write_bytes(data), durable=True)


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


class HiddenVectors:
    """The hidden-vector sidecar of `RunStore` (which this class is a part of): per-sample
    `.npz` files under RUN/hidden/, indexed in the `hidden_vectors` table. Uses the store's
    connection, folder and transactions."""

    run_dir: Path
    path: Path
    readonly: bool
    conn: sqlite3.Connection

    if TYPE_CHECKING:

        def _tables(self) -> set[str]: ...
        def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

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
        import numpy as np

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
