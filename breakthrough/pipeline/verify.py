"""`bt verify RUN`: check everything a run holds, read-only, and list what is damaged.

Every other command checks only the rows it reads (checksums of the samples it uses, the
hidden-vector file it opens) and refuses a damaged manifest when it opens the store; this one
checks all of it at once and lists every problem, so a reviewer (or a copy made from another
machine) can ask "is this run intact?" before trusting it:
  * the SQLite file itself (header, size, `PRAGMA integrity_check`, foreign keys);
  * the manifest against its schema (store.MANIFEST_SCHEMA: every entry readable JSON of the
    right type, the required keys, a schema this bt reads, a whole protocol);
  * every sample row against its checksum, naming the fields that changed (what a checksum
    covers is the store's schema: `store.COVERAGE`, said in the summary line); a changed cell
    (gold answer, cohort row) is one line for the cell, not one per sample;
  * every hidden-vector file against its recorded size and sha256, and files no row names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from breakthrough.protocol import Protocol
from breakthrough.store import RunStore


@dataclass
class VerifyReport:
    """What `verify_run` checked (counts), the store's schema (what its checksums cover; None
    when its manifest cannot say) and one line per problem found."""

    run_dir: Path
    samples: int = 0
    hidden_files: int = 0
    manifest_keys: int = 0
    schema: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_run(run_dir: Path) -> VerifyReport:
    """Check `run_dir` whole, writing nothing. A store that cannot be opened at all is refused
    by `RunStore` in one line (BtError); everything else found is listed in the report."""
    report = VerifyReport(run_dir=Path(run_dir))
    with RunStore(run_dir, readonly=True, check_manifest=False) as store:
        conn = store.conn
        for (line,) in conn.execute("PRAGMA integrity_check"):
            if line != "ok":
                report.problems.append(f"{store.path}: SQLite integrity: {line}")
        for row in conn.execute("PRAGMA foreign_key_check"):
            report.problems.append(
                f"{store.path}: table {row[0]} row {row[1]} names a missing {row[2]} row"
            )
        _check_manifest(store, report)
        report.schema = store.schema
        report.samples = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        _check_rows(store, report)
        hidden = store.verify_hidden()
        report.hidden_files = hidden.checked
        report.problems += hidden.problems
        report.problems += [
            f"{p}: no sample names this file (an orphan; `bt base` or `bt sample` removes it)"
            for p in hidden.orphans
        ]
    return report


def _check_rows(store: RunStore, report: VerifyReport) -> None:
    """One line per damaged sample naming its fields, and one per cell whose own row (gold
    answer, cohort row, prompt) no longer matches its samples' checksums."""
    cells: dict[str, tuple[list[str], int]] = {}
    for damage in store.verify_integrity():
        own = replace(
            damage,
            changed=[f for f in damage.changed if not f.startswith("cell.")],
            wrong=[w for w in damage.wrong if not w.startswith("cell.")],
        )
        of_cell = [
            *(f for f in damage.changed if f not in own.changed),
            *(w for w in damage.wrong if w not in own.wrong),
        ]
        if of_cell:
            lines, n = cells.get(damage.cell_id, ([], 0))
            cells[damage.cell_id] = (lines + [x for x in of_cell if x not in lines], n + 1)
        if own.changed or own.wrong or not of_cell:
            report.problems.append(f"{store.path}: {own.describe()}")
    for cell_id, (lines, n) in cells.items():
        report.problems.append(
            f"{store.path}: cell {cell_id}: {', '.join(lines)}: does not match "
            f"the checksum{'s' if n != 1 else ''} of its {n} sample"
            f"{'s' if n != 1 else ''} (its gold answer or cohort row changed "
            f"since they were written)"
        )


def _check_manifest(store: RunStore, report: VerifyReport) -> None:
    raw = store.raw_manifest()
    report.manifest_keys = len(raw)
    if not raw:
        report.problems.append(f"{store.path}: the manifest is empty (the run was never started)")
    problems = store.manifest_problems()
    for key, problem in problems:
        report.problems.append(f"{store.path}: manifest key {key!r}: {problem}")
    if "protocol" in raw and not any(key == "protocol" for key, _ in problems):
        try:
            Protocol.from_dict(json.loads(raw["protocol"]))
        except (TypeError, ValueError) as exc:
            report.problems.append(
                f"{store.path}: manifest key 'protocol' is not a whole protocol ({exc})"
            )
