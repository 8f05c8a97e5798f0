"""Cohort files: loading, validation, digests and listing (docs/architecture.md, "Cohort rows").

A cohort is a JSONL file, one row (JSON object) per problem, named by its file stem
(`math89` -> `math89.jsonl`). A name is looked up, in order, in
1. the working cohorts directory: `$BT_COHORTS_DIR` if set, else `./cohorts` of the working
   directory (a user's own cohorts; `bt cohorts build` and `bt cohorts screen` write here);
2. the built-in cohorts: package data of an installed bt (`breakthrough/builtin_cohorts`, the
   repository's top-level `cohorts/` copied in by setup.py), or that `cohorts/` folder itself
   when bt runs from a source checkout (an editable install).
`$BT_COHORTS_DIR` replaces the whole search path (an isolated directory for tests and scripts).
`load_cohort` also takes a path to a `.jsonl` file. Every row is validated against the common fields
and the fields of its family; any fault is a `BtError` whose message starts with `FILE:LINE:` and
names the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.outputs import write_text
from breakthrough.tasks.canonical import canonical_json, render_cohort
from breakthrough.tasks.optimum.instance import instance_problems

ENV_DIR = "BT_COHORTS_DIR"
ENV_FIX = f"point {ENV_DIR} at a folder of cohort .jsonl files, or unset it"
FAMILIES = ("math", "optimum", "arith")  # arith: the demonstration family (not the study)

_NUMBER = (int, float)
# field -> (accepted types, human type name)
COMMON_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "id": ((str,), "a string"),
    "family": ((str,), "a string"),
    "stage": ((str,), "a string"),
    "selection": ((str,), "a string"),
    "standin": ((bool,), "a boolean"),
}
FAMILY_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "math": {
        "problem": ((str,), "a string"),
        "answer": ((str,), "a string"),
        "level": ((int,), "an integer"),
        "subject": ((str,), "a string"),
        "source_row": ((int,), "an integer"),
    },
    "optimum": {
        "kind": ((str,), "a string"),
        "bin": ((str,), "a string"),
        "instance": ((dict,), "an object"),
        "optimum": (_NUMBER, "a number"),
        "n_optima": ((int,), "an integer"),
    },
    "arith": {
        "problem": ((str,), "a string"),
        "answer": ((int,), "an integer"),
        "level": ((int,), "an integer"),
        "subject": ((str,), "a string"),
        "operands": ((list,), "a list"),
    },
}
# A user's own cohort needs only these common fields (the others document provenance) ...
REQUIRED_COMMON = ("id",)
DEFAULT_FAMILY = "math"  # ... and rows without `family` are math problems.
# Task fields a family checks only when present (provenance of the shipped MATH cohorts).
FAMILY_OPTIONAL: dict[str, tuple[str, ...]] = {"math": ("level", "subject", "source_row")}
# Optional fields: checked only when present.
OPTIONAL_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "problem": ((str,), "a string"),
    "split": ((str,), "a string"),
}
SPLITS = ("train", "validation", "test")
NO_STAGE = "-"  # what summaries show for rows without provenance
NO_SELECTION = "(not recorded)"


BUILTIN_PACKAGE_DIR = "builtin_cohorts"  # inside the installed `breakthrough` package (setup.py)


def cohorts_dir() -> Path:
    """The working cohorts directory: `$BT_COHORTS_DIR` if set, else `./cohorts` of the working
    directory. User cohorts are found here first, and `bt cohorts build` / `screen` write here."""
    env = os.environ.get(ENV_DIR)
    if env:
        if Path(env).exists() and not Path(env).is_dir():
            raise BtError(f"{ENV_DIR}={env}: a file, not a folder; {ENV_FIX}")
        return Path(env)
    return Path.cwd() / "cohorts"


def _env_search_dir(env: str) -> Path:
    """$BT_COHORTS_DIR as the one folder names are looked up in: a folder that is not there (a
    typo, an unmounted disk) is the user's mistake to fix, never "no cohort files" and exit 0."""
    path = cohorts_dir()
    if not path.is_dir():
        raise BtError(f"{ENV_DIR}={env}: no such folder; {ENV_FIX}")
    why = _unreadable(path)
    if why:  # `bt cohorts list` and `bt base` say the same, not "no cohort files" and exit 0
        raise BtError(f"{ENV_DIR}={env}: cannot read the folder ({why}); {ENV_FIX}")
    return path


def _unreadable(folder: Path) -> str | None:
    """Why `folder`'s entries cannot be listed (its OS error), or None when they can."""
    try:
        with os.scandir(folder):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def builtin_cohorts_dir() -> Path:
    """The cohorts bt ships: package data of an installed wheel, else (a source checkout, where
    setup.py's mapping is not applied) the repository's top-level `cohorts/`."""
    installed = Path(str(resources.files("breakthrough"))) / BUILTIN_PACKAGE_DIR
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "cohorts"


def cohort_search_dirs() -> list[Path]:
    """Where a cohort name is looked up, first match wins (module docstring): the working
    directory's cohorts, then the built-in ones; only `$BT_COHORTS_DIR` when that is set."""
    env = os.environ.get(ENV_DIR)
    if env:
        return [_env_search_dir(env)]
    dirs: list[Path] = []
    for d in (cohorts_dir(), builtin_cohorts_dir()):
        if d.is_dir() and all(not d.samefile(x) for x in dirs):
            dirs.append(d)
    return dirs


def find_cohort_file(relative: str | Path) -> Path | None:
    """The first `DIR/relative` over `cohort_search_dirs()` that is a file (None: none is)."""
    for d in cohort_search_dirs():
        if (d / relative).is_file():
            return d / relative
    return None


def checked_file(relative: str | Path, out: Path | None = None) -> Path:
    """The file `bt cohorts build --check` compares with its recipe: `out/relative` under
    `--out`, else the one the name reaches (`find_cohort_file`: the working cohorts folder
    first, then the built-in ones), which is what `bt base` reads and where a build writes
    by default, never the built-in copy behind an edited `./cohorts` file."""
    if out is not None:
        return Path(out) / relative
    return find_cohort_file(relative) or cohorts_dir() / relative


def _searched() -> str:
    """`DIR: a, b; DIR2: c` for an error that says where a name was looked for."""
    return (
        "; ".join(
            f"{d}: {', '.join(x.stem for x in _cohort_files(d)) or 'none'}"
            for d in cohort_search_dirs()
        )
        or f"{cohorts_dir()}: none"
    )


def cohort_path(name_or_path: str | Path) -> Path:
    """Resolve a cohort name (a file stem in `cohort_search_dirs()`) or a path to a `.jsonl`
    file."""
    p = Path(name_or_path)
    if p.suffix == ".jsonl" or p.is_file() or os.sep in str(name_or_path):
        if p.is_file():
            return p
        shipped = find_cohort_file(p.name)
        if p.name == str(name_or_path) and shipped is not None:  # bare "NAME.jsonl"
            return shipped
        raise BtError(f"{p}: cohort file not found")
    candidate = find_cohort_file(f"{name_or_path}.jsonl")
    if candidate is None:
        raise BtError(f"unknown cohort '{name_or_path}' (in {_searched()})")
    return candidate


def _type_ok(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true/false is not a number
    return isinstance(value, types)


def validate_row(row: object, where: str) -> dict:
    """Check one row; `where` is `FILE:LINE`. Every fault of the row is reported at once, in one
    BtError (`FILE:LINE: field 'answer' is missing; field 'level' must be ...`). Only `id` and the
    family's task fields are required: `family` defaults to math and the provenance fields
    (stage, selection, standin, and for math level, subject, source_row) are checked only when
    present, so a user's own `{id, problem, answer}` file is a cohort. Returns the row."""
    if not isinstance(row, dict):
        raise BtError(f"{where}: expected a JSON object, got {type(row).__name__}")
    faults: list[str] = []

    def check(field: str, types: tuple[type, ...], tname: str, required: str | None) -> bool:
        """True when the field is present and well typed; records a fault otherwise."""
        if field not in row:
            if required is not None:
                faults.append(f"field '{field}' is missing{required}")
            return False
        if not _type_ok(row[field], types):
            faults.append(f"field '{field}' must be {tname}, got {row[field]!r}")
            return False
        return True

    for field, (types, tname) in COMMON_FIELDS.items():
        check(field, types, tname, "" if field in REQUIRED_COMMON else None)
    if "id" in row and isinstance(row["id"], str) and not row["id"].strip():
        faults.append("field 'id' is empty")
    family = row.get("family", DEFAULT_FAMILY)
    if family not in FAMILY_FIELDS:
        if isinstance(family, str):
            faults.append(f"field 'family' must be one of {', '.join(FAMILIES)}, got {family!r}")
        raise BtError(f"{where}: " + "; ".join(faults))
    ok = {
        field: check(
            field,
            types,
            tname,
            None
            if field in FAMILY_OPTIONAL.get(family, ())
            else f" (required for family '{family}')",
        )
        for field, (types, tname) in FAMILY_FIELDS[family].items()
    }
    for field, (types, tname) in OPTIONAL_FIELDS.items():
        check(field, types, tname, None)
    if family == "math":
        if ok["level"] and not 1 <= row["level"] <= 5:
            faults.append(f"field 'level' must be 1-5, got {row['level']}")
        if ok["source_row"] and row["source_row"] < 0:
            faults.append(f"field 'source_row' must be >= 0, got {row['source_row']}")
        if ok["problem"] and not row["problem"].strip():
            faults.append("field 'problem' is empty")
        if ok["answer"] and not row["answer"].strip():
            faults.append("field 'answer' is empty (no answer to grade against)")
    elif family == "arith":
        if ok["operands"] and not (
            len(row["operands"]) == 2 and all(_type_ok(x, (int,)) for x in row["operands"])
        ):
            faults.append(f"field 'operands' must be two integers, got {row['operands']!r}")
    else:
        if ok["optimum"] and not math.isfinite(row["optimum"]):
            faults.append(f"field 'optimum' must be finite, got {row['optimum']!r}")
        if ok["n_optima"] and row["n_optima"] < 1:
            faults.append(f"field 'n_optima' must be >= 1, got {row['n_optima']}")
        if ok["kind"]:
            named = f"row {row['id']!r}: " if isinstance(row.get("id"), str) else ""
            faults += [named + p for p in instance_problems(row)]
    if isinstance(row.get("split"), str) and row["split"] not in SPLITS:
        faults.append(f"field 'split' must be one of {', '.join(SPLITS)}, got {row['split']!r}")
    if faults:
        raise BtError(f"{where}: " + "; ".join(faults))
    return row


def jsonl_records(lines: Iterable[str], source: str | Path) -> Iterator[tuple[int, str, object]]:
    """(line number, "FILE:LINE", parsed value) for every non-blank line of a JSONL file; a line
    that is not JSON is refused in one line naming the file and line. The one JSONL reader of
    cohorts, the MATH source and `bt probe` dumps."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            yield n, where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise BtError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None


def parse_cohort_text(text: str, source: str) -> list[dict]:
    """Parse and validate JSONL text; `source` names the file in error messages."""
    rows: list[dict] = []
    seen: dict[str, int] = {}
    for n, where, value in jsonl_records(text.split("\n"), source):
        row = validate_row(value, where)
        if row["id"] in seen:
            raise BtError(f"{where}: field 'id' duplicates line {seen[row['id']]}: {row['id']!r}")
        seen[row["id"]] = n
        rows.append(row)
    if not rows:
        raise BtError(f"{source}: cohort has no rows")
    return rows


def load_cohort(name_or_path: str | Path) -> list[dict]:
    """The validated rows of a cohort (by name in `cohorts_dir()` or by `.jsonl` path)."""
    path = cohort_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BtError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return parse_cohort_text(text, str(path))


def cohort_digest(rows: list[dict]) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys, compact, UTF-8) of the row list."""
    return hashlib.sha256(canonical_json(rows).encode("utf-8")).hexdigest()


def write_cohort(path: Path, rows: list[dict]) -> Path:
    """Validate and write rows atomically in the canonical format."""
    text = render_cohort(rows)
    parse_cohort_text(text, str(path))  # never write a file the loader would refuse
    return write_text(path, text)


@dataclass(frozen=True)
class CohortInfo:
    name: str
    path: Path
    rows: int
    families: tuple[str, ...]
    standins: int
    stages: tuple[str, ...]  # in order of first appearance
    digest: str
    error: str | None = (
        None  # set (and the counts empty) when list_cohorts(strict=False) hit a bad file
    )


def _ordered_unique(values) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def cohort_info(name_or_path: str | Path) -> CohortInfo:
    path = cohort_path(name_or_path)
    rows = load_cohort(path)
    return CohortInfo(
        name=path.stem,
        path=path,
        rows=len(rows),
        families=_ordered_unique(r.get("family", DEFAULT_FAMILY) for r in rows),
        standins=sum(bool(r.get("standin")) for r in rows),
        stages=_ordered_unique(r.get("stage", NO_STAGE) for r in rows),
        digest=cohort_digest(rows),
    )


def _reachable_files(directory: Path | None) -> list[Path]:
    """The cohort files of `directory`, or of the search path with first-found names winning."""
    if directory is not None:
        return _cohort_files(directory)
    found: dict[str, Path] = {}
    for d in cohort_search_dirs():
        for p in _cohort_files(d):
            found.setdefault(p.stem, p)
    return sorted(found.values(), key=lambda p: p.stem)


def _cohort_files(directory: Path) -> list[Path]:
    """The `*.jsonl` files of `directory` (none when it is no folder); a folder whose entries
    cannot be read is one line naming it (glob would answer "none" and hide why)."""
    if not directory.is_dir():
        return []
    why = _unreadable(directory)
    if why:
        raise BtError(f"{directory}: cannot read the cohorts folder ({why})")
    return sorted(p for p in directory.glob("*.jsonl") if p.is_file())


def list_cohorts(directory: Path | None = None, strict: bool = True) -> list[CohortInfo]:
    """Every `*.jsonl` cohort directly in `directory` (validated), sorted by name; without one,
    every cohort a name can reach (`cohort_search_dirs()`, a name shadowed by an earlier folder
    left out). strict=False reports an invalid file as a CohortInfo with `error` set instead of
    raising."""
    out = []
    for p in _reachable_files(directory):
        try:
            out.append(cohort_info(p))
        except BtError as exc:
            if strict:
                raise
            out.append(CohortInfo(p.stem, p, 0, (), 0, (), "", error=str(exc)))
    return out


def summarize(rows: list[dict]) -> dict:
    """Counts used by `bt cohorts show`: by stage, family, level, subject, kind, split,
    selection."""

    def count(key: str) -> dict:
        c = Counter(r[key] for r in rows if key in r)
        return dict(sorted(c.items(), key=lambda kv: str(kv[0])))

    return {
        "rows": len(rows),
        "standins": sum(bool(r.get("standin")) for r in rows),
        "by_stage": dict(Counter(r.get("stage", NO_STAGE) for r in rows)),
        "by_family": dict(Counter(r.get("family", DEFAULT_FAMILY) for r in rows)),
        "by_level": count("level"),
        "by_subject": count("subject"),
        "by_kind": count("kind"),
        "by_bin": count("bin"),
        "by_split": count("split"),
        "selections": dict(sorted(Counter(r.get("selection", NO_SELECTION) for r in rows).items())),
        "stage_standins": dict(Counter(r.get("stage", NO_STAGE) for r in rows if r.get("standin"))),
    }
