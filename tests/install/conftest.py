"""The built distributions and the fresh environment holding the wheel, made once per test
session for both files here (test_wheel_install, test_readme_pipeline) and shared across xdist
workers (tests/build_once.py): building the sdist and the wheel and installing it cost ~10 s of
CPU, and as module fixtures imported into the second file they were made twice. Both are
read-only for the tests (a test works in its own empty folder)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from build_once import build_once

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path]:
    """`python -m build` of the checkout: the sdist, then the wheel built from that sdist (so a
    file missing from the sdist is missing from the wheel too). No build isolation: the build
    backend comes from this environment (requirements/), not from the network."""

    def build(out: Path) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    out = build_once(tmp_path_factory, "dists", build)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="session")
def installed(tmp_path_factory, dists) -> Path:
    """A fresh venv holding the wheel (non-editable); returns its bin/ folder."""

    def build(folder: Path) -> None:
        venv = folder / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
        )
        purelib = Path(
            subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout.strip()
        )
        (purelib / "_bt_locked_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "-q",
                "--no-deps",
                "--no-index",
                str(dists["wheel"]),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    return build_once(tmp_path_factory, "fresh-venv", build) / "venv" / "bin"
