"""A real classified run shared by the report tests: base traces with a boxed answer at known
places (`continue_fixture`), continued by `bt continue` on the tiny model, then labelled by the
installed `bt classify` console script. Built once per session, shared by the xdist workers
(tests/build_once.py): every test reads it, none writes into it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from build_once import build_once
from continue_fixture import make_run
from typer.testing import CliRunner

BT = Path(sys.executable).parent / "bt"
# pA: box after ~100 reasoning tokens (crossing at 112 after bisection); pB: box after ~200 of
# ~260 (only the last anchor 256 holds it: censored, A1 top-up). B = 8, restarts at 8 and 16.
LAYOUT = {"pA": (100, 200), "pB": (200, 50)}
CONTINUE = [
    "--budget",
    "8",
    "--answer-budget",
    "4",
    "--restarts",
    "8,16",
    "--anchors",
    "64,128,256",
]


@pytest.fixture(scope="session")
def classified(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """(run dir, classify output dir) of the real run; built once per session, read-only."""

    def build(root: Path) -> None:
        run = root / "runs" / "fx"
        make_run(run, tiny_model_dir, LAYOUT).close()
        from breakthrough.cli import app

        res = CliRunner().invoke(app, ["continue", str(run), *CONTINUE])
        assert res.exit_code == 0, res.output
        done = subprocess.run(
            [str(BT), "classify", str(run), "--draws", "5"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr

    run = build_once(tmp_path_factory, "report", build) / "runs" / "fx"
    return run, run / "classify"


@pytest.fixture(scope="session")
def studied(classified, tmp_path_factory) -> tuple[Path, Path]:
    """(run dir, study dir): a copy of the real classified run with a second probe arm
    (`bt continue --add-budget 32`), then `bt report study` on it; built once per session,
    read-only."""
    import shutil

    from breakthrough.analyses.study import study_report
    from breakthrough.cli import app

    def build(root: Path) -> None:
        run = root / "runs" / "fx"
        shutil.copytree(classified[0], run, ignore=shutil.ignore_patterns("classify"))
        res = CliRunner().invoke(app, ["continue", str(run), "--add-budget", "32"])
        assert res.exit_code == 0, res.output
        rep = study_report([run], draws=2, cell_pages=False)
        (root / "out").write_text(str(rep.out_dir))

    root = build_once(tmp_path_factory, "study", build)
    return root / "runs" / "fx", Path((root / "out").read_text())


@pytest.fixture(scope="session")
def unfit_study(classified, tmp_path_factory) -> tuple[Path, Path]:
    """(run dir, study dir): a copy of the real classified run after `bt signals` and
    `bt confirm --forecast-token 256,512` (the sweep, and the test at the pre-registered
    t = 512), whose confirmatory test cannot be fit (both base runs are shorter than 512
    tokens), then `bt report study`: the page a new user gets from the README's pipeline on a
    small run (issue 40 section 5)."""
    import shutil

    from breakthrough.analyses.study import study_report
    from breakthrough.cli import app

    def build(root: Path) -> None:
        run = root / "runs" / "fx"
        shutil.copytree(classified[0], run, ignore=shutil.ignore_patterns("classify"))
        shutil.copytree(classified[1], run / "classify")
        for args in (
            ["signals", str(run)],
            ["confirm", str(run), "--split-seed", "1", "--draws", "20"]
            + ["--forecast-token", "256,512"],
        ):
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, res.output
        rep = study_report([run], draws=2, cell_pages=False)
        (root / "out").write_text(str(rep.out_dir))

    root = build_once(tmp_path_factory, "unfit-study", build)
    return root / "runs" / "fx", Path((root / "out").read_text())
