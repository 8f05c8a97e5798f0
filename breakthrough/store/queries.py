"""Named questions other packages ask a run's store, each one SQL statement here rather than in
the pipeline (a mixin of `RunStore`, like `frames.Frames`): whether the store file is whole
(`bt verify`), its rows' keys and base segments as stored, whether the run holds probes, its
longest base trace, whether its samples table takes `bt sample` attempts.

Unlike the readers of `core` and `frames`, these read rows without checking their checksums
first where the caller reports damage itself (`bt verify` lists every problem; a checked read
would stop at the first)."""

from __future__ import annotations

import sqlite3


class Queries:
    """The named read queries of `RunStore` (which this class is a part of)."""

    conn: sqlite3.Connection

    def integrity_problems(self) -> list[str]:
        """SQLite's own integrity check of the file: one line per problem, none when whole."""
        return [
            str(line) for (line,) in self.conn.execute("PRAGMA integrity_check") if line != "ok"
        ]

    def foreign_key_problems(self) -> list[tuple[str, int, str]]:
        """(table, rowid, missing parent table) of every row naming a row that is gone."""
        return [
            (str(t), int(r), str(p)) for t, r, p, _ in self.conn.execute("PRAGMA foreign_key_check")
        ]

    def sample_count(self) -> int:
        """Stored samples, of every kind."""
        return int(self.conn.execute("SELECT count(*) FROM samples").fetchone()[0])

    def sample_keys(self) -> list[tuple[int, str, str, int, int, int]]:
        """(sample_id, cell_id, kind, anchor, budget, branch) of every sample, by sample_id, as
        stored (unchecked: `bt verify` reports damaged rows itself)."""
        return [
            (int(sid), str(cid), str(kind), int(a), int(b), int(br))
            for sid, cid, kind, a, b, br in self.conn.execute(
                "SELECT sample_id, cell_id, kind, anchor, budget, branch FROM samples "
                "ORDER BY sample_id"
            )
        ]

    def stored_base_segments(self) -> dict[str, bytes | None]:
        """cell_id -> its base trace's segment codes as stored (None where the row has none;
        unchecked, unlike `RunStore.base_segments`)."""
        return {
            str(cid): seg
            for cid, seg in self.conn.execute(
                "SELECT cell_id, segments FROM samples WHERE kind='base' ORDER BY sample_id"
            )
        }

    def has_probes(self) -> bool:
        """Whether the run holds a probe sample (it was continued)."""
        return (
            self.conn.execute("SELECT 1 FROM samples WHERE kind='probe' LIMIT 1").fetchone()
            is not None
        )

    def longest_base_reasoning(self) -> int | None:
        """The most reasoning tokens of a cell with a stored base trace (None before one)."""
        (longest,) = self.conn.execute(
            "SELECT max(c.reasoning_tokens) FROM cells c JOIN samples s USING(cell_id) "
            "WHERE s.kind='base'"
        ).fetchone()
        return None if longest is None else int(longest)

    def accepts_attempts(self) -> bool:
        """Whether the samples table takes kind 'attempt' (`bt sample`): its CHECK constraint
        names it in stores made since attempts exist."""
        row = self.conn.execute("SELECT sql FROM sqlite_master WHERE name='samples'").fetchone()
        return not row or "'attempt'" in row[0]
