"""The vocabulary of the output declarations: a `Table` of `Column`s and `Family`s (columns
whose names hold a value of the run, such as R_{C} per restart budget C), and a `Document` of
`Field`s for the JSON files. Plain records, no pandas or pyarrow, so a command that only prints
a declaration (`bt schema`) imports nothing heavy.

Types are named in one closed vocabulary (`TypeName`); `check.ARROW` maps each to the pyarrow
type a parquet file holds, so "int64" in a declaration is int64 in the file (nullable integer
columns read back in pandas as `Int64`, since the file records it). "str" is pyarrow's string
(pandas 3 writes large_string; both read back as text). CSV files hold the same columns in the
same order; a list column is there a JSON array.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

TypeName = Literal["int64", "float64", "bool", "str", "list<int64>", "list<float64>"]
TYPE_NAMES: tuple[TypeName, ...] = (
    "int64",
    "float64",
    "bool",
    "str",
    "list<int64>",
    "list<float64>",
)


@dataclass(frozen=True)
class Column:
    """One column: its name and type, the unit of its values ("" where it has none: a name, a
    label), whether it may be empty and when, one sentence of meaning, the protocol section it
    comes from (reference protocol numbering, "" when it is bt's own) and an example value
    (one row of the table, across its columns). `absent_when`, where set, says when the column
    is left out of the file altogether (an option of the command)."""

    name: str
    type: TypeName
    meaning: str
    example: Any
    unit: str = ""
    null_when: str = ""  # when the column is empty (NaN / null); "" = never
    section: str = ""
    absent_when: str = ""

    def __post_init__(self) -> None:
        if self.type not in TYPE_NAMES:
            raise ValueError(f"column {self.name}: unknown type {self.type!r}")

    @property
    def nullable(self) -> bool:
        return bool(self.null_when)


@dataclass(frozen=True)
class Family:
    """Columns generated from a value of the run, declared once: `template` names them for a
    reader ("R_{C}"), `pattern` matches each member's name in full (a regular expression), and
    `examples` gives members a run holds with their example values. Every member shares the
    type, unit, nullability and meaning; `meaning` may name the template's placeholder."""

    template: str
    pattern: str
    type: TypeName
    meaning: str
    examples: tuple[tuple[str, Any], ...]
    unit: str = ""
    null_when: str = ""
    section: str = ""

    def __post_init__(self) -> None:
        if self.type not in TYPE_NAMES:
            raise ValueError(f"family {self.template}: unknown type {self.type!r}")
        for name, _ in self.examples:
            if not self.matches(name):
                raise ValueError(f"family {self.template}: example {name!r} does not match")

    @property
    def name(self) -> str:
        return self.template

    @property
    def nullable(self) -> bool:
        return bool(self.null_when)

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, str(name)) is not None


Entry = Column | Family


@dataclass(frozen=True)
class Table:
    """One table bt writes: a name (`bt schema NAME`), the files it is written to, the command
    that writes it, what one row is, its columns in file order, and the protocol section the
    table as a whole comes from."""

    name: str
    files: str
    writer: str
    rows: str
    columns: tuple[Entry, ...]
    section: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: a column is declared twice")

    def column(self, name: str) -> Entry:
        """The entry that declares column `name` (a column, or the family it belongs to)."""
        for c in self.columns:
            if (c.name == name) if isinstance(c, Column) else c.matches(name):
                return c
        raise KeyError(f"{self.name}: no column {name!r}")

    def example_row(self) -> dict[str, Any]:
        """One row of the table as the declaration's examples give it (families: their
        example members)."""
        row: dict[str, Any] = {}
        for c in self.columns:
            if isinstance(c, Column):
                row[c.name] = c.example
            else:
                row.update(dict(c.examples))
        return row


JsonType = Literal["str", "int", "float", "number", "bool", "list", "object"]


@dataclass(frozen=True)
class Field:
    """One key of a JSON document: its type, meaning, whether it may be null, and the fields
    of each object it holds (`fields`: of the object itself, or of each item of a list of
    objects; empty where the object's keys are free, e.g. a protocol)."""

    name: str
    type: JsonType
    meaning: str
    example: Any = None
    null_when: str = ""
    section: str = ""
    fields: tuple[Field, ...] = field(default_factory=tuple)

    @property
    def nullable(self) -> bool:
        return bool(self.null_when)


@dataclass(frozen=True)
class Document:
    """A JSON file bt writes for users, declared as its top-level fields."""

    name: str
    files: str
    writer: str
    what: str
    fields: tuple[Field, ...]
    section: str = ""

    def walk(self) -> Iterator[tuple[str, Field]]:
        """(dotted path, field) of every field, depth first ("headlines[].key")."""

        def go(prefix: str, fields: tuple[Field, ...]) -> Iterator[tuple[str, Field]]:
            for f in fields:
                path = f"{prefix}{f.name}"
                yield path, f
                yield from go(path + ("[]." if f.type == "list" else "."), f.fields)

        yield from go("", self.fields)
