"""A run store read as pandas data frames (`cells_frame`, `samples_frame`; columns in
docs/architecture.md). pandas is imported when a frame is read, not with the store."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

from breakthrough.store.records import _unpack

if TYPE_CHECKING:
    import numpy as np


class Frames:
    """The pandas readers of `RunStore` (which this class is a part of): the cells and the
    samples of a run as data frames, every sample row checked against its checksum first."""

    conn: sqlite3.Connection

    if TYPE_CHECKING:

        def _tables(self) -> set[str]: ...
        def check_where(self, where: str = "", params: tuple = ()) -> None: ...
        @staticmethod
        def _where(**filters: str | None) -> tuple[str, tuple]: ...

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
        import numpy as np
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
        import numpy as np

        out: dict[int, dict[str, np.ndarray]] = {}
        sql = "SELECT g.sample_id, g.names, g.data FROM signals g JOIN samples s USING(sample_id)"
        for sid, names_json, blob in self.conn.execute(sql + where, params):
            names = json.loads(names_json)
            data = np.frombuffer(blob, dtype="<f4").reshape(len(names), -1)
            out[int(sid)] = {k: data[j] for j, k in enumerate(names)}
        return out
