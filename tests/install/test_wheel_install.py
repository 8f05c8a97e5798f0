"""A researcher's first day, rehearsed: `bt` built as a wheel and an sdist, installed (not
editable) into a fresh virtual environment, and run from an empty working directory, as the
README's install paths do. Nothing here may lean on the checkout: the built-in cohorts and the
MATH source must come from the package data, runs must go to `./runs` of the working directory,
and user cohorts in `./cohorts` must be found beside the built-in ones.

The fresh environment takes its third-party packages from this test environment through a
`.pth` line (the locked versions, no network); `breakthrough` itself is only the wheel's copy,
checked by where it imports from."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import breakthrough

REPO = Path(__file__).resolve().parents[2]
BUILTIN = sorted(p.stem for p in (REPO / "cohorts").glob("*.jsonl"))
MATH_SOURCE = "source/math_test.jsonl"


def _user_env(tmp: Path) -> dict[str, str]:
    """A user's shell: no checkout on PYTHONPATH, no cohorts override, offline hub."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BT_COHORTS_DIR")}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp.parent / "hf"), "COLUMNS": "200"}


def _bt(
    bindir: Path, cwd: Path, *args: object, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bindir / "bt"), *map(str, args)],
        cwd=cwd,
        env=_user_env(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_wheel_and_sdist_carry_the_builtin_cohorts_and_math_source(dists):
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
    for stem in BUILTIN:
        assert f"breakthrough/builtin_cohorts/{stem}.jsonl" in names
    assert f"breakthrough/builtin_cohorts/{MATH_SOURCE}" in names
    templates = sorted(
        p.relative_to(REPO).as_posix()
        for p in (REPO / "breakthrough" / "report" / "templates").glob("*.j2")
    )
    assert templates and set(templates) <= names  # bt report study's page
    with tarfile.open(dists["sdist"]) as sd:
        members = {m.split("/", 1)[1] for m in sd.getnames() if "/" in m}
    assert {
        "setup.py",
        "pyproject.toml",
        f"cohorts/{MATH_SOURCE}",
        *(f"cohorts/{s}.jsonl" for s in BUILTIN),
    } <= members


def test_installed_wheel_runs_the_first_day_commands_from_an_empty_directory(installed, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    where = subprocess.run(
        [str(installed / "python"), "-c", "import breakthrough; print(breakthrough.__file__)"],
        cwd=work,
        env=_user_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.stdout.startswith(str(installed.parent)), (
        where
    )  # the wheel's copy, not the checkout

    version = _bt(installed, work, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"bt {breakthrough.__version__}")

    listed = _bt(installed, work, "cohorts", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if "│" in line}
    assert set(BUILTIN) <= set(rows) and all("built-in" in rows[s] for s in BUILTIN)
    assert "math89" in rows and " 89 " in rows["math89"]

    prepared = _bt(installed, work, "models", "prepare", "smollm2-135m")
    assert prepared.returncode == 0, prepared.stderr

    base = _bt(installed, work, "base", "--cohort", "math89", "--limit", "1", "--max-tokens", "8")
    assert base.returncode == 0, base.stdout[-2000:] + base.stderr[-2000:]
    assert "Traceback" not in base.stderr
    assert (work / "runs" / "math89-smollm2-135m" / "store.sqlite").is_file()  # ./runs of the cwd
    status = _bt(installed, work, "status", work / "runs" / "math89-smollm2-135m")
    assert status.returncode == 0 and "1" in status.stdout, status.stderr
    # the README's worked example is the wheel's module, not a script of the clone
    example = subprocess.run(
        [
            str(installed / "python"),
            "-m",
            "breakthrough.analyses.auroc_worked_example",
            "runs/math89-smollm2-135m/",
            "--bootstrap",
            "0",
        ],
        cwd=work,
        env=_user_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert example.returncode == 0, example.stderr
    assert (
        "pooled  = 12/16" in example.stdout and "Runs: runs/math89-smollm2-135m" in example.stdout
    )
    assert [p.name for p in work.iterdir()] == ["runs"]  # nothing else written in the cwd


def test_user_cohorts_in_the_working_directory_beside_the_builtin_ones(installed, tmp_path):
    work = tmp_path / "mine"
    (work / "cohorts").mkdir(parents=True)
    (work / "cohorts" / "mine.jsonl").write_text(
        json.dumps({"id": "p1", "problem": "What is 2 + 3?", "answer": "5"}) + "\n"
    )
    listed = _bt(installed, work, "cohorts", "list")
    assert listed.returncode == 0, listed.stderr
    mine = next(line for line in listed.stdout.splitlines() if "│ mine " in line)
    assert str(work / "cohorts") in mine or "cohorts" in mine
    assert "math89" in listed.stdout  # the built-in ones stay reachable
    shown = _bt(installed, work, "cohorts", "show", "mine")
    assert shown.returncode == 0 and "rows" in shown.stdout, shown.stderr
    unknown = _bt(installed, work, "base", "--cohort", "nope", "--dry-run")
    assert unknown.returncode == 2 and "unknown cohort 'nope'" in unknown.stderr
    assert "math89" in unknown.stderr and "mine" in unknown.stderr  # names where it looked
    assert not (work / "runs").exists()
