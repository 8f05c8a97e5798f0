"""`bt verify RUN`: check everything a run holds, read-only, and list what is damaged.

Every other command checks only the rows it reads (checksums of the samples it uses, the
hidden-vector file it opens); this one checks all of it at once, so a reviewer (or a copy made
from another machine) can ask "is this run intact?" before trusting it:
  * the SQLite file itself (header, size, `PRAGMA integrity_check`, foreign keys);
  * the manifest: every entry readable JSON, the schema version this bt reads, the identity
    fields a run needs, a whole protocol;
  * every sample row against its checksum (token ids, text, finish reason, seed, prefix);
  * every hidden-vector file against its recorded size and sha256, and files no row names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from breakthrough.protocol import Protocol
from breakthrough.store import SCHEMA_VERSION, RunStore

REQUIRED_KEYS = ("schema_version", "model_id", "protocol", "cohort_digest")


@dataclass
class VerifyReport:
    """What `verify_run` checked (counts) and one line per problem found."""

    run_dir: Path
    samples: int = 0
    hidden_files: int = 0
    manifest_keys: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_run(run_dir: Path) -> VerifyReport:
    """Check `run_dir` whole, writing nothing. A store that cannot be opened at all is refused
    by `RunStore` in one line (BtError); everything else found is listed in the report."""
    report = VerifyReport(run_dir=Path(run_dir))
    with RunStore(run_dir, readonly=True) as store:
        conn = store.conn
        for (line,) in conn.execute("PRAGMA integrity_check"):
            if line != "ok":
                report.problems.append(f"{store.path}: SQLite integrity: {line}")
        for row in conn.execute("PRAGMA foreign_key_check"):
            report.problems.append(f"{store.path}: table {row[0]} row {row[1]} names a missing "
                                   f"{row[2]} row")
        _check_manifest(store, report)
        report.samples = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        for sid in store.verify_integrity():
            cell, kind, branch = conn.execute("SELECT cell_id, kind, branch FROM samples WHERE "
                                              "sample_id=?", (sid,)).fetchone()
            report.problems.append(f"{store.path}: sample {sid} ({cell} {kind} branch {branch}) "
                                   "does not match its checksum")
        hidden = store.verify_hidden()
        report.hidden_files = hidden.checked
        report.problems += hidden.problems
        report.problems += [f"{p}: no sample names this file (an orphan; `bt base` or `bt sample` "
                            "removes it)" for p in hidden.orphans]
    return report


def _check_manifest(store: RunStore, report: VerifyReport) -> None:
    values = {}
    for key, raw in store.conn.execute("SELECT key, value FROM manifest"):
        try:
            values[key] = json.loads(raw)
        except (TypeError, ValueError):
            report.problems.append(f"{store.path}: manifest key {key!r} is not valid JSON")
    report.manifest_keys = len(values)
    missing = [k for k in REQUIRED_KEYS if k not in values]
    if missing:
        report.problems.append(f"{store.path}: manifest lacks {', '.join(missing)}")
    version = values.get("schema_version")
    if version is not None and str(version) != SCHEMA_VERSION:
        report.problems.append(f"{store.path}: manifest schema_version {version!r}, this bt "
                               f"writes {SCHEMA_VERSION}")
    if "protocol" in values:
        try:
            Protocol.from_dict(values["protocol"])
        except (TypeError, ValueError) as exc:
            report.problems.append(f"{store.path}: manifest key 'protocol' is not a whole "
                                   f"protocol ({exc})")
