"""mlx-lm's internals are reached through one module, which refuses an mlx-lm version bt was
not tested with in one line, before anything is written."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt

from breakthrough.engine import mlx_version
from breakthrough.errors import BtError


def test_the_supported_range_is_the_pinned_one() -> None:
    import tomllib

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    assert f"mlx-lm{mlx_version.supported_range()}" in [d.replace(" ", "") for d in deps]
    assert mlx_version.check_mlx_lm() == metadata.version("mlx-lm")  # the installed one


@pytest.mark.parametrize("version", ["0.33.0", "0.33.0rc1", "1.0", "0.32.1", "0.31.9"])
def test_an_untested_version_is_refused_in_one_line(version: str) -> None:
    with pytest.raises(BtError) as err:
        mlx_version.check_mlx_lm(version)
    message = str(err.value)
    assert "\n" not in message
    assert f"mlx-lm {version} is installed" in message and ">=0.32.2,<0.33" in message


@pytest.mark.parametrize("version", ["0.32.2", "0.32.9", "0.32.2.post1"])
def test_a_supported_version_passes(version: str) -> None:
    assert mlx_version.check_mlx_lm(version) == version


def _newer_mlx_lm(root: Path) -> Path:
    """A folder that, first on sys.path, makes `importlib.metadata` report mlx-lm 0.40.0 (the
    distribution's metadata as pip writes it; the package itself stays the installed one)."""
    info = root / "fake-site" / "mlx_lm-0.40.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mlx-lm\nVersion: 0.40.0\n")
    return info.parent


def test_importing_the_engine_with_a_newer_mlx_lm_says_so_in_one_line(tmp_path: Path) -> None:
    site = _newer_mlx_lm(tmp_path)
    code = (
        "from breakthrough.errors import BtError\n"
        "try:\n"
        "    import breakthrough.engine.mlx_backend\n"
        "except BtError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    print('imported')\n"
    )
    env = {"PYTHONPATH": f"{site}:{Path(__file__).parents[2]}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "mlx-lm 0.40.0 is installed" in lines[0], out.stdout
    assert "mlx-lm>=0.32.2,<0.33" in lines[0]


@pytest.mark.model
def test_bt_base_with_a_newer_mlx_lm_refuses_before_writing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    site = _newer_mlx_lm(tmp_path)
    runs = tmp_path / "runs"
    proc = run_bt(
        *("base", "--cohort", "demo", "--run", "r", "--limit", "1", "--max-tokens", "4"),
        *("--model", tiny_model_dir, "--runs-dir", runs),
        cwd=tmp_path,
        PYTHONPATH=f"{site}:{Path(__file__).parents[2]}",
    )
    assert_one_line_error(proc, 2, "mlx-lm 0.40.0 is installed", ">=0.32.2,<0.33")
    assert not runs.exists() or not any(runs.iterdir())
