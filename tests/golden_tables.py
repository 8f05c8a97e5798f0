"""The classify tables of the fixture runs as a reference: `write_golden` wrote
tests/classify/golden/ with the code before the output schemas existed
(`.venv/bin/python tests/golden_tables.py` rewrites them; only do that for a deliberate change
of labels, and say so in the commit). `test_labels_unchanged` classifies the same runs now and
compares every table with these files."""

from __future__ import annotations

from pathlib import Path

GOLDEN = Path(__file__).parent / "classify" / "golden"
TABLES = (
    "labels",
    "curves",
    "probe_cells",
    "restart_cells",
    "label_hardening",
    "topup_resolution",
)
DRAWS = 50  # posterior redraws of `regime_survival` (seeded: the same every time)


def fixture_runs(root: Path) -> dict[str, Path]:
    """The two fixture runs (the default protocol, and the small-budget one), as stores under
    `root`: name → run folder."""
    from classify_fixture import SMALL, cell_spec, small_spec, write_store

    return {
        "default": write_store(root / "default" / "fixture", cell_spec(), subject="Algebra"),
        "small": write_store(root / "small" / "fixture", small_spec(), SMALL, subject="Algebra"),
    }


def classify(run: Path) -> Path:
    """`bt classify RUN --draws DRAWS` without cell pages (in process); its output folder."""
    from breakthrough.analyses.classify_run import classify_runs
    from breakthrough.classify.settings import ClassifySettings

    classify_runs([run], run / "classify", settings=ClassifySettings(draws=DRAWS), cell_pages=False)
    return run / "classify"


def write_golden() -> None:
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, run in fixture_runs(Path(tmp)).items():
            out = classify(run)
            (GOLDEN / name).mkdir(parents=True, exist_ok=True)
            for t in TABLES:
                shutil.copyfile(out / f"{t}.parquet", GOLDEN / name / f"{t}.parquet")
            shutil.copyfile(out / "plan.csv", GOLDEN / name / "plan.csv")


if __name__ == "__main__":
    write_golden()
