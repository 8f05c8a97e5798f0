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
  * every hidden-vector file against its recorded size and sha256, and files no row names;
  * rows that are gone: a checksum covers the rows that exist, not their absence, so what the
    order of a cell's work proves was written is checked too (`_check_gone`): a cell whose
    later steps are stored holds every probe its base trace's grid asks for."""

from __future__ import annotations

import json
from collections.abc import Collection
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
        for line in store.integrity_problems():
            report.problems.append(f"{store.path}: SQLite integrity: {line}")
        for table, row, parent in store.foreign_key_problems():
            report.problems.append(
                f"{store.path}: table {table} row {row} names a missing {parent} row"
            )
        _check_manifest(store, report)
        report.schema = store.schema
        report.samples = store.sample_count()
        damaged = _check_rows(store, report)
        _check_gone(store, report, skip=damaged)
        hidden = store.verify_hidden()
        report.hidden_files = hidden.checked
        report.problems += hidden.problems
        report.problems += [
            f"{p}: no sample names this file (an orphan; `bt base` or `bt sample` removes it)"
            for p in hidden.orphans
        ]
    return report


def _check_rows(store: RunStore, report: VerifyReport) -> set[str]:
    """One line per damaged sample naming its fields, and one per cell whose own row (gold
    answer, cohort row, prompt) no longer matches its samples' checksums. Returns the cells
    with a damaged row."""
    cells: dict[str, tuple[list[str], int]] = {}
    damaged: set[str] = set()
    for damage in store.verify_integrity():
        damaged.add(damage.cell_id)
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
    return damaged


def _check_gone(store: RunStore, report: VerifyReport, skip: Collection[str] = ()) -> None:
    """One line per cell missing rows its stored work proves were written. A checksum covers
    the rows that exist, not their absence (a row alone has no checksum to fail), so two facts
    of how a store grows are checked:

      * the order of a cell's work: the scheduler runs its grid probes, then bisection,
        restarts, top-ups, so a cell holding a restart, a bisection probe or a top-up branch at
        the run's B held every probe of the grid its base trace asks for
        (`completeness.owed_grid`), all canonical branches;
      * the order of the store's rows: sample ids are SQLite rowids, each one more than the
        largest before it, and bt never deletes a sample (a batch that fails is rolled back
        whole, using no id), so an id missing below the largest is a row deleted. A cell that
        then lacks probes or restarts its protocol owes it (the rule `bt status` and `bt
        classify` use) is named with what it lacks. The last row written leaves no gap: its
        loss is the one this cannot tell from a run stopped before it.

    A cell without a stored base trace has no grid to check; one whose stored work proves its
    base trace was written (`RunStore.base_trace_gone`, the rule `bt status` and `bt classify`
    use) is named for that. Skipped when the manifest holds no
    whole protocol (reported above), and for cells in `skip`, whose damaged rows (a changed
    anchor, a changed kind) are reported already: one line per damage. Rows deleted and then
    made again by `bt continue` (same keys, same seeds) leave their ids missing but no cell
    short: nothing is reported."""
    from breakthrough.errors import BtError

    try:
        protocol = store.protocol()
    except BtError:
        return
    by_cell: dict[str, list[tuple[str, int, int, int]]] = {}
    ids: list[int] = []
    for sid, cid, kind, a, b, br in store.sample_keys():
        ids.append(sid)
        by_cell.setdefault(cid, []).append((kind, a, b, br))
    gone = _gone_ids(ids)
    segments = store.stored_base_segments()
    for cell, rows in sorted(by_cell.items()):
        if cell in skip:
            continue
        seg = segments.get(cell)
        if seg is None:  # no base trace, or one without segments: no grid to hold probes against
            continue
        line = _probes_gone(cell, rows, bytes(seg), protocol)
        if line is None and gone:
            line = _owed_rows_gone(store, cell, rows, bytes(seg), protocol, gone)
        if line is not None:
            report.problems.append(f"{store.path}: cell {cell}: {line}")
    try:
        base_gone = store.base_trace_gone()
    except BtError:
        return  # a damaged row: reported by `_check_rows`
    for cell in sorted(base_gone - set(skip)):
        report.problems.append(
            f"{store.path}: cell {cell}: its base trace is gone: the cell holds continuations "
            f"(probes or restarts), which bt continue makes only from a stored base trace; "
            f"the row was deleted from the store (`bt base`, the run's own command, makes it "
            f"again)"
        )


def _gone_ids(ids: list[int]) -> str:
    """The sample ids missing below the largest stored (ranges, at most 10 shown), or ''."""
    have = set(ids)
    missing = [i for i in range(1, max(ids, default=0)) if i not in have]
    spans: list[str] = []
    for i in missing:
        if spans and spans[-1].split("-")[-1] == str(i - 1):
            spans[-1] = f"{spans[-1].split('-')[0]}-{i}"
        else:
            spans.append(str(i))
    if not spans:
        return ""
    shown = ", ".join(spans[:10]) + (f" and {len(spans) - 10} more" if len(spans) > 10 else "")
    return f"sample id{'s' if len(missing) > 1 else ''} {shown}"


def _probes_gone(
    cell: str, rows: list[tuple[str, int, int, int]], segments: bytes, protocol: Protocol
) -> str | None:
    """Grid probes missing beside the later steps that run after them (`_check_gone`)."""
    from breakthrough.classify.completeness import owed_grid

    probes = {(a, br) for k, a, b, br in rows if k == "probe" and b == protocol.budget}
    later = any(
        k == "restart"
        or (
            k == "probe"
            and b == protocol.budget
            and (a not in protocol.anchors or br >= protocol.samples)
        )
        for k, a, b, br in rows
    )
    if not later:
        return None
    short = [
        f"{a} ({n} of {protocol.samples} branches stored)"
        for a in owed_grid(segments, protocol)
        if (n := sum((a, br) in probes for br in range(protocol.samples))) < protocol.samples
    ]
    if not short:
        return None
    return (
        f"probe rows at B={protocol.budget} are gone at "
        f"anchor{'s' if len(short) > 1 else ''} {', '.join(short)}: "
        f"its later steps (restarts, bisection or top-ups), which run after every "
        f"probe of its grid, are stored; rows were deleted from the store"
    )


def _owed_rows_gone(
    store: RunStore,
    cell: str,
    rows: list[tuple[str, int, int, int]],
    segments: bytes,
    protocol: Protocol,
    gone: str,
) -> str | None:
    """In a store missing sample ids: what a continued cell lacks of the probes and restarts
    its protocol owes it (`completeness`, as `bt status` and `bt classify` count it)."""
    from breakthrough.classify.completeness import owed_budgets, owed_grid
    from breakthrough.classify.panels import Outcome, probe_rows
    from breakthrough.errors import BtError

    if not any(k in ("probe", "restart") for k, *_ in rows):
        return None  # never continued: nothing it owes was written
    try:
        outcomes = [
            Outcome(c, k, a, b, br, ok, sid)
            for sid, c, k, a, b, br, ok, _ in store.outcomes(cell_id=cell)
        ]
    except BtError:
        return None  # a damaged row: reported by `_check_rows`
    short = []
    for a in owed_grid(segments, protocol):
        n = sum(
            k == "probe" and b == protocol.budget and x == a and br < protocol.samples
            for k, x, b, br in rows
        )
        if n < protocol.samples:
            short.append(
                f"probe rows at B={protocol.budget}, anchor {a} ({n} of {protocol.samples} stored)"
            )
    for c in owed_budgets(probe_rows(outcomes, protocol).get(cell, []), protocol):
        n = sum(k == "restart" and b == c and br < protocol.restart_samples for k, _, b, br in rows)
        if n < protocol.restart_samples:
            short.append(f"restart rows at C={c} ({n} of {protocol.restart_samples} stored)")
    if not short:
        return None
    return (
        f"lacks {'; '.join(short)}, which its protocol owes; {gone} "
        f"{'are' if gone.startswith('sample ids') else 'is'} missing from the store, whose ids "
        f"only grow (bt never deletes a row): rows were deleted from the store"
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
