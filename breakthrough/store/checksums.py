"""Row checksums: what a sample row's checksum covers under each store schema
(`CHECKED_FIELDS` for schema 3, five fields for schema 2), the one query every check reads rows
with, and what is wrong with a row that does not match (`RowDamage`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from breakthrough.store.records import SCHEMA_VERSION

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
    field): 3, the field digests in order; 2, what stores made before per-field digests hold
    (a sha256 of token ids, text, finish reason, seed and prefix length; the same bytes as
    then)."""
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
