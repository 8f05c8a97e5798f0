"""docs/outputs.md and `bt schema`'s text, rendered from the declarations: what a researcher
reads about a table is what its writer is checked against (tests/test_output_schemas.py fails
when the committed docs/outputs.md and this rendering differ)."""

from __future__ import annotations

import json
from typing import Any

from breakthrough.errors import BtError
from breakthrough.schemas.columns import Column, Document, Family, Table
from breakthrough.schemas.registry import DOCUMENTS, OUTPUTS, TABLES, lookup

REGENERATE = "bt schema --markdown > docs/outputs.md"

INTRO = f"""# The tables `bt` writes

Every table `bt` writes for you is declared once, in `breakthrough/schemas/`: each column's
name, type, when it is empty, its unit, one sentence of meaning and the protocol section
(docs of the reference protocol, `protocol.md`; `uniqueness.md` for the UoO benchmark) it
comes from. Writers check each table against its declaration before they write it, and this
page is generated from the same declarations (`{REGENERATE}`; a test fails when they differ).
`bt schema` lists the tables, `bt schema NAME` prints one.

Types are those of the parquet file (pyarrow): `int64`, `float64`, `bool`, `str`, and lists.
An integer column that can be empty reads in pandas as `Int64` (missing: `<NA>`); an empty
float is NaN; CSV files hold the same columns in the same order (an empty cell for a missing
value, a JSON array for a list). A column family such as `R_{{C}}` stands for one column per
value of the run (R_1024, R_2048, …), in that place. Paths are relative to the output folder
of the command (`RUN/` for one run, the runs' common folder for several; `-o` elsewhere).
"""


def _cell(text: Any) -> str:
    """A value as a markdown table cell (pipes escaped, one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _section(section: str) -> str:
    if not section:
        return ""
    return section if ".md" in section else f"protocol {section}"


def _example(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def column_rows(table: Table) -> list[str]:
    """The markdown rows of a table's columns."""
    rows = [
        "| column | type | empty when | unit | meaning | source |",
        "|---|---|---|---|---|---|",
    ]
    for c in table.columns:
        name = f"`{c.name}`" + (" (family)" if isinstance(c, Family) else "")
        empty = c.null_when or "never"
        if isinstance(c, Column) and c.absent_when:
            empty += f"; left out with {c.absent_when}"
        rows.append(
            f"| {name} | {c.type} | {_cell(empty)} | {_cell(c.unit)} | {_cell(c.meaning)} "
            f"| {_cell(_section(c.section))} |"
        )
    return rows


def table_markdown(table: Table) -> str:
    """One table's section of docs/outputs.md."""
    head = [
        f"## {table.name}",
        "",
        f"`{table.files}`, written by `{table.writer}`: {table.rows}."
        + (f" From {_section(table.section)}." if table.section else ""),
    ]
    if table.notes:
        head += ["", table.notes]
    example = ",\n".join(f"  {_example(k)}: {_example(v)}" for k, v in table.example_row().items())
    return "\n".join(
        [
            *head,
            "",
            *column_rows(table),
            "",
            "Example row:",
            "",
            "```json",
            "{",
            example,
            "}",
            "```",
        ]
    )


def document_markdown(doc: Document) -> str:
    """One JSON document's section of docs/outputs.md."""
    rows = [
        f"## {doc.name}",
        "",
        f"`{doc.files}`, written by `{doc.writer}`: {doc.what}."
        + (f" From {_section(doc.section)}." if doc.section else ""),
        "",
        "| key | type | null when | meaning | example |",
        "|---|---|---|---|---|",
    ]
    for path, f in doc.walk():
        example = "" if f.example is None else f"`{_cell(_example(f.example))}`"
        rows.append(
            f"| `{path}` | {f.type} | {_cell(f.null_when or 'never')} | {_cell(f.meaning)} "
            f"| {example} |"
        )
    return "\n".join(rows)


def markdown(out: Table | Document) -> str:
    return table_markdown(out) if isinstance(out, Table) else document_markdown(out)


def index_lines() -> list[str]:
    """One line per declared output: name, files, what one row is."""
    lines = [f"- `{t.name}`: `{t.files}` ({t.writer}): {t.rows}" for t in TABLES]
    lines += [f"- `{d.name}`: `{d.files}` ({d.writer}): {d.what}" for d in DOCUMENTS]
    return lines


def outputs_markdown() -> str:
    """The whole of docs/outputs.md."""
    parts = [INTRO, "## Contents", "", *index_lines(), ""]
    for out in OUTPUTS:
        parts += [markdown(out), ""]
    return "\n".join(parts)


def describe(name: str | None = None, *, everything: bool = False) -> str:
    """`bt schema [NAME] [--markdown]`: every declared output, the one named (a BtError line
    naming the declared ones when no output has that name), or with `everything` the whole of
    docs/outputs.md."""
    if everything:
        if name is not None:
            raise BtError(f"--markdown prints every table: drop {name!r} or --markdown")
        return outputs_markdown()
    if name is None:
        return "\n".join(
            ["Tables bt writes (bt schema NAME for one; docs/outputs.md for all):", *index_lines()]
        )
    return markdown(lookup(name))
