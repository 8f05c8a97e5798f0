"""Grade cache keyed by (grader version, extracted prediction, reference).

Many samples of one problem end in the same answer string, and math-verify costs milliseconds to
seconds per call, so verdicts are memoised: always in memory, optionally in a SQLite file (e.g.
in a run directory) so `bt grade --again` with the same grader version is cheap. A new grader
version never sees old verdicts. Timeouts and worker errors are kept in memory only: they depend
on machine load, not on the answer."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from breakthrough.tasks.grade import Grade

CacheKey = tuple[str, str, str]  # (version, prediction, reference)
_TRANSIENT = frozenset({"timeout", "error"})


class GradeCache:
    """In-memory dict in front of an optional SQLite table `grades`."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._memory: dict[CacheKey, Grade] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS grades (version TEXT, prediction TEXT, reference TEXT,"
                " grade TEXT NOT NULL, PRIMARY KEY (version, prediction, reference))"
            )
            self._db.commit()

    def get(self, key: CacheKey) -> Grade | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
            if self._db is None:
                return None
            row = self._db.execute(
                "SELECT grade FROM grades WHERE version=? AND prediction=? AND reference=?", key
            ).fetchone()
            if row is None:
                return None
            grade = Grade(**json.loads(row[0]))
            self._memory[key] = grade
            return grade

    def put_many(self, items: list[tuple[CacheKey, Grade]]) -> None:
        """Store verdicts; one SQLite transaction for the batch."""
        with self._lock:
            for key, grade in items:
                self._memory[key] = grade
            if self._db is None:
                return
            rows = [
                (*key, json.dumps(grade.to_dict(), sort_keys=True))
                for key, grade in items
                if grade.status not in _TRANSIENT
            ]
            if rows:
                with self._db:
                    self._db.executemany("INSERT OR REPLACE INTO grades VALUES (?, ?, ?, ?)", rows)

    def put(self, key: CacheKey, grade: Grade) -> None:
        self.put_many([(key, grade)])

    def __len__(self) -> int:
        return len(self._memory)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
