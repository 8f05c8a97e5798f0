"""The one Jinja2 environment every report page is rendered through (`bt classify`'s report
and cell pages, `bt report study`'s page): templates in report/templates, shipped as package
data (setup.py), autoescape on for every .html/.j2 template so each value is escaped exactly
once, and StrictUndefined so a misspelt name fails the render instead of leaving a blank.

Why templates rather than f-strings: escaping is the template engine's default, not a call
each writer must remember; the pages share one layout (templates/base.html.j2), one style sheet
(templates/style.css.j2) and one set of macros (templates/macros.html.j2: tables, the
glossary, a figure or the line that stands for it).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from breakthrough.outputs import write_text
from breakthrough.report.display import fmt, plural
from breakthrough.report.names import (
    GLOSSARY,
    GLOSSARY_COLUMNS,
    column_anchor,
    glossary_columns,
)

TEMPLATES = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The shared environment (built once per process)."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(("html", "j2")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["count"] = plural  # "1 cell", "2 cells"
    env.filters["fmt"] = fmt  # a value as the pages show it
    env.globals["GLOSSARY"] = GLOSSARY
    env.globals["GLOSSARY_LINKS"] = {
        term: [(column_anchor(t, c), f"{t}.{c}") for t, c in refs]
        for term, refs in GLOSSARY_COLUMNS.items()
    }
    env.globals["GLOSSARY_COLUMNS"] = glossary_columns()
    return env


def render(template: str, **context: Any) -> str:
    """The text of `template` rendered with `context` (autoescaped)."""
    return environment().get_template(template).render(**context)


def write_page(path: str | Path, template: str, **context: Any) -> Path:
    """`template` rendered to `path` (written atomically, as every output is)."""
    return write_text(Path(path), render(template, **context))
