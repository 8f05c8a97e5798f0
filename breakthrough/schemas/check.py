"""Hold a frame (or a JSON document) to its declaration.

`conform` builds the frame a writer writes from the declaration: its columns in declared order,
a declared column the frame lacks added empty where the declaration allows it to be empty (a
cohort without `subject`, a table with no rows). `arrow_table` converts it once to the pyarrow
table a parquet file holds and checks every column's type and emptiness on the way; `check` is
the same check for a frame written only as CSV. A mismatch (an undeclared column, a missing
one, another type, a value where the declaration says never empty) is a `SchemaError` naming
every problem: a bug in bt, which the tests that write each table from a real run catch, never
a silent extra column in a researcher's file.

Why check the converted arrow table rather than pandas dtypes: the file's types are arrow's,
and one pandas dtype maps to several (an object column of Python ints is int64, of floats
double), so the arrow type is what a researcher gets. A column whose every value is missing
has arrow's null type; it is written with its declared type instead, so a small run's file has
the same types as a large one's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from breakthrough.schemas.columns import Column, Document, Entry, Family, Field, Table, TypeName

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class SchemaError(RuntimeError):
    """A frame or document that does not match its declaration (a bug in bt, not a mistake a
    user can make: it is raised loudly, with every problem listed)."""


def arrow_type(name: TypeName) -> pa.DataType:
    """The pyarrow type of a declared type name."""
    import pyarrow as pa

    return {
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "str": pa.large_string(),
        "list<int64>": pa.list_(pa.int64()),
        "list<float64>": pa.list_(pa.float64()),
    }[name]


def same_type(declared: TypeName, got: pa.DataType) -> bool:
    """Whether a column of arrow type `got` holds the declared type (a null-typed column, all
    missing, holds any)."""
    import pyarrow as pa

    if pa.types.is_null(got):
        return True
    if declared == "str":
        return bool(pa.types.is_string(got) or pa.types.is_large_string(got))
    if declared.startswith("list<"):
        if not (pa.types.is_list(got) or pa.types.is_large_list(got)):
            return False
        inner: TypeName = "int64" if declared == "list<int64>" else "float64"
        return same_type(inner, got.value_type)
    return bool(got.equals(arrow_type(declared)))


def layout(table: Table, names: Sequence[str]) -> tuple[dict[str, Entry], list[str]]:
    """Which entry declares each column of `names` (in order), and the problems: a declared
    column missing, a column no entry declares, a column out of its declared place. A family
    takes the consecutive columns that match it and are not declared by name."""
    by_name = {c.name for c in table.columns if isinstance(c, Column)}
    cols = [str(n) for n in names]
    matched: dict[str, Entry] = {}
    problems: list[str] = []
    i = 0
    for entry in table.columns:
        if isinstance(entry, Column):
            if i < len(cols) and cols[i] == entry.name:
                matched[cols[i]] = entry
                i += 1
            elif entry.name in cols[i:]:
                problems.append(f"column {entry.name!r} is out of its declared place")
            elif not entry.absent_when:
                problems.append(f"column {entry.name!r} is declared but missing")
        else:
            while i < len(cols) and cols[i] not in by_name and entry.matches(cols[i]):
                matched[cols[i]] = entry
                i += 1
    for name in cols[i:]:
        if name not in matched and name not in by_name:
            problems.append(f"column {name!r} is not declared")
    return matched, problems


def _empty_column(entry: Column, length: int, index: Any) -> pd.Series:
    """A column of `length` missing values, in the pandas dtype its declared type reads as."""
    import pandas as pd

    dtype = {"int64": "Int64", "float64": "float64"}.get(entry.type, "object")
    return pd.Series([None] * length, index=index, dtype=dtype)


def _as_declared(entry: Column, col: pd.Series) -> pd.Series:
    """A column whose every value is missing as an empty column of its declared type (an
    all-NaN float column is pandas' way of holding an ungraded `correct`); an integer column
    that pandas holds as floats because some values are missing (what SQLite's NULLs read as)
    back as nullable integers; any other column as it is."""
    import pandas as pd

    if len(col) and entry.nullable and col.isna().all():
        return _empty_column(entry, len(col), col.index)
    if entry.type == "int64" and pd.api.types.is_float_dtype(col.dtype):
        values = col.dropna()
        if (values == values.round()).all():
            return col.astype("Int64")
    return col


def conform(table: Table, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its columns in declared order, each declared column it lacks that may be
    empty added empty (a frame without rows gets every declared column: a run with nothing to
    put in a table writes the declared empty table). Columns the declaration does not know are
    kept, last, for `check` to name."""
    import pandas as pd

    if frame.shape[1] == 0:
        frame = pd.DataFrame(index=frame.index)
    have = [str(c) for c in frame.columns]
    by_name = {c.name for c in table.columns if isinstance(c, Column)}
    out: dict[str, Any] = {}
    for entry in table.columns:
        if isinstance(entry, Family):
            for c in have:
                if c not in by_name and c not in out and entry.matches(c):
                    out[c] = frame[c]
        elif entry.name in have:
            out[entry.name] = _as_declared(entry, frame[entry.name])
        elif (entry.nullable or not len(frame)) and not entry.absent_when:
            out[entry.name] = _empty_column(entry, len(frame), frame.index)
    for c in have:
        if c not in out:
            out[c] = frame[c]
    return pd.DataFrame(out, index=frame.index)


def _arrow(table: Table, frame: pd.DataFrame) -> tuple[pa.Table, list[str]]:
    """The frame as a pyarrow table (as `DataFrame.to_parquet` converts it) and every problem
    with it: layout, types, a missing value where none may be."""
    import pyarrow as pa

    matched, problems = layout(table, list(frame.columns))
    try:
        data = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        return pa.table({}), [*problems, f"cannot be converted to arrow ({exc})"]
    for name, col in zip(data.column_names, data.columns, strict=True):
        entry = matched.get(name)
        if entry is None:
            continue
        if not same_type(entry.type, col.type):
            problems.append(f"column {name!r}: {entry.type} declared, {col.type} found")
        if not entry.nullable and col.null_count:
            problems.append(
                f"column {name!r}: declared never empty, {col.null_count} empty value(s)"
            )
    return data, problems


def _raise(table: Table, problems: list[str]) -> None:
    if problems:
        raise SchemaError(
            f"{table.name} ({table.files}) does not match its declaration "
            f"(breakthrough/schemas): " + "; ".join(problems)
        )


def check(table: Table, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` unchanged when it matches the declaration, else a `SchemaError` naming every
    problem."""
    _raise(table, _arrow(table, frame)[1])
    return frame


def arrow_table(table: Table, frame: pd.DataFrame) -> pa.Table:
    """The checked frame as the pyarrow table its parquet file holds: every column as pandas
    converts it, a column that is all missing (arrow's null type) given its declared type."""
    import pyarrow as pa

    data, problems = _arrow(table, frame)
    _raise(table, problems)
    matched, _ = layout(table, data.column_names)
    for i, (name, col) in enumerate(zip(data.column_names, data.columns, strict=True)):
        if pa.types.is_null(col.type):
            typ = arrow_type(matched[name].type)
            data = data.set_column(i, pa.field(name, typ), pa.nulls(len(data), typ))
    return data


# ------------------------------------------------------------------------------ documents


def _json_type_ok(f: Field, value: Any) -> bool:
    if f.type == "str":
        return isinstance(value, str)
    if f.type == "bool":
        return isinstance(value, bool)
    if f.type == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if f.type in ("float", "number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if f.type == "list":
        return isinstance(value, list)
    return isinstance(value, Mapping)


def _fields_problems(path: str, fields: Sequence[Field], obj: Any) -> list[str]:
    if not isinstance(obj, Mapping):
        return [f"{path or 'the document'}: an object expected, {type(obj).__name__} found"]
    problems = [f"{path}{k}: not declared" for k in obj if k not in {f.name for f in fields}]
    for f in fields:
        where = f"{path}{f.name}"
        if f.name not in obj:
            problems.append(f"{where}: declared but missing")
            continue
        value = obj[f.name]
        if value is None:
            if not f.nullable:
                problems.append(f"{where}: declared never null, null found")
            continue
        if not _json_type_ok(f, value):
            problems.append(f"{where}: {f.type} declared, {type(value).__name__} found")
            continue
        if f.fields and f.type == "object":
            problems += _fields_problems(where + ".", f.fields, value)
        elif f.fields and f.type == "list":
            for j, item in enumerate(value):
                problems += _fields_problems(f"{where}[{j}].", f.fields, item)
    return problems


def check_document(doc: Document, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`obj` (as it will be written, `outputs.json_ready`) unchanged when it matches the
    declared fields, else a `SchemaError` naming every problem."""
    problems = _fields_problems("", doc.fields, obj)
    if problems:
        raise SchemaError(
            f"{doc.name} ({doc.files}) does not match its declaration (breakthrough/schemas): "
            + "; ".join(problems)
        )
    return obj
