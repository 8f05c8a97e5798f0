"""The cohort file format's two canonical renderings, below every task family: recipes render
their rows with them, and `tasks.cohorts` (which reads and validates rows, the optimum
instances through `tasks.optimum`) re-exports them, so a family's package never imports the
loader that imports it."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(obj: Any) -> str:
    """Sorted keys, compact, UTF-8 kept: equal values give equal text (digests, dedupe keys)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def render_cohort(rows: list[dict]) -> str:
    """The byte-exact file text of a cohort: sorted keys, UTF-8 kept, `\\n` after every row."""
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
