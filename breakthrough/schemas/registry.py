"""Every declared output by name, in the order docs/outputs.md lists them (the order of the
README's pipeline: classify, export, signals, probe, confirm, the study page, the UoO report)."""

from __future__ import annotations

from breakthrough.errors import BtError
from breakthrough.schemas import classify, export, signals, study, uoo
from breakthrough.schemas.columns import Document, Table

TABLES: tuple[Table, ...] = (
    *classify.TABLES,
    *export.TABLES,
    *signals.TABLES,
    *study.TABLES,
    *uoo.TABLES,
)
DOCUMENTS: tuple[Document, ...] = (study.HEADLINES,)
OUTPUTS: tuple[Table | Document, ...] = (*TABLES, *DOCUMENTS)


def lookup(name: str) -> Table | Document:
    """The declaration named `name` (`bt schema NAME`), or one line listing the names."""
    for out in OUTPUTS:
        if out.name == name:
            return out
    raise BtError(
        f"no output table named {name!r}; the declared ones: " + ", ".join(o.name for o in OUTPUTS)
    )
