"""An optimised BLAS for MLX on Linux (engine/blas.py): loaded before mlx, really bound by
libmlx, recorded in the engine identity, and a one-line notice when it cannot be used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from breakthrough.engine import blas

PY = sys.executable
BT = str(Path(sys.executable).with_name("bt"))


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"}
    env.pop("BT_BLAS", None)
    env.update(extra)
    return env


def _state_in_subprocess(**extra: str) -> str:
    code = "from breakthrough.engine import blas; print(blas.blas_name()); print(blas.notice())"
    out = subprocess.run(
        [PY, "-c", code], env=_env(**extra), capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout


def test_state_is_loaded_once_and_named():
    state = blas.load_optimised_blas()
    assert blas.load_optimised_blas() is state
    assert state["blas"] == blas.blas_name()
    if sys.platform == "linux":
        assert state["blas"] == blas.REFERENCE or state["blas"].startswith(("openblas", "cblas"))
        assert ("path" in state) != (state["blas"] == blas.REFERENCE)


def test_engine_identity_records_blas_and_sampler(tiny_model):
    from breakthrough.engine.mlx_backend import MlxEngine
    from breakthrough.engine.sampling import SAMPLER_ID

    ident = MlxEngine.from_loaded(tiny_model).identity()
    assert ident["blas"] == blas.blas_name() and ident["sampler"] == SAMPLER_ID


def test_opt_out_keeps_the_bundled_blas_quietly():
    name, note = _state_in_subprocess(BT_BLAS="reference").splitlines()
    assert name == blas.REFERENCE and note == "None"


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_unloadable_choice_falls_back_with_one_line(tmp_path, tiny_model_dir):
    """Through the installed `bt`: a bad BT_BLAS still runs (reference BLAS) and says so once."""
    bad = str(tmp_path / "no-such-blas.so")
    res = subprocess.run(
        [
            BT,
            "base",
            "--cohort",
            "demo",
            "--model",
            str(tiny_model_dir),
            "--limit",
            "1",
            "--max-tokens",
            "4",
            "--runs-dir",
            str(tmp_path),
            "--run",
            "b",
        ],
        env=_env(BT_BLAS=bad),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "BLAS" in ln]
    assert len(lines) == 1 and bad in lines[0] and "Traceback" not in res.stderr
    from breakthrough.store import RunStore

    with RunStore(tmp_path / "b") as store:
        assert store.manifest()["engine"]["blas"] == blas.REFERENCE


@pytest.mark.skipif(
    blas.load_optimised_blas()["blas"] == blas.REFERENCE,
    reason="no optimised BLAS on this machine (apt-get install libopenblas0-pthread)",
)
def test_libmlx_binds_sgemm_to_the_loaded_blas(tmp_path):
    """The dynamic linker's own record (LD_DEBUG=bindings): libmlx's cblas_sgemm resolves to the
    library bt loaded, not to the reference BLAS the mlx wheel bundles."""
    code = "import breakthrough, mlx.core as mx; a = mx.ones((64, 64)); mx.eval(a @ a)"
    log = tmp_path / "ld"
    subprocess.run(
        [PY, "-c", code],
        env=_env(LD_DEBUG="bindings", LD_DEBUG_OUTPUT=str(log)),
        capture_output=True,
        timeout=120,
        check=True,
    )
    text = "".join(p.read_text(errors="replace") for p in tmp_path.glob("ld*"))
    bound = [ln for ln in text.splitlines() if "libmlx" in ln and "`cblas_sgemm'" in ln]
    assert bound, "libmlx never bound cblas_sgemm"
    target = os.path.realpath(blas.load_optimised_blas()["path"])
    assert all(os.path.realpath(ln.split(" to ")[1].split(" [")[0]) == target for ln in bound)
