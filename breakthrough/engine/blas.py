"""An optimised BLAS for MLX's CPU backend on Linux, loaded before MLX is.

Why: the `mlx[cpu]` wheel bundles the netlib *reference* BLAS (`mlx_cpu.libs/libblas-*.so`),
single-threaded and unblocked, so a batched decode step costs nearly as much per row as a
single one, and the float matmuls (the output layer above all) dominate a CPU step. libmlx
resolves `cblas_sgemm` through the process's global symbol scope first, so a BLAS opened with
RTLD_GLOBAL *before* the first `import mlx.core` takes over every float matmul. Quantized
(4-bit) matmuls are MLX's own kernels and do not go through BLAS.

`load_optimised_blas()` runs from `breakthrough/__init__.py` (stdlib and ctypes only, so every
entry point of the package, `bt`, the tests and the bench scripts, gets it before any module
imports mlx). It tries `$BT_BLAS` (a library path; `reference` keeps the bundled BLAS), else
Debian/Ubuntu/Fedora's OpenBLAS (`apt-get install libopenblas0-pthread`), keeps the first that
exports `cblas_sgemm`, and remembers what it loaded: `blas_name()` is recorded in the engine
identity of every run. When none is found, `notice()` gives the one line the engine prints."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_ARCH_DIRS = ("x86_64-linux-gnu", "aarch64-linux-gnu")
CANDIDATES: tuple[str, ...] = (
    tuple(
        f"/usr/lib/{arch}/{flavour}/libopenblas.so.0"
        for arch in _ARCH_DIRS
        for flavour in ("openblas-pthread", "openblas-openmp", "openblas-serial")
    )
    + tuple(f"/usr/lib/{arch}/libopenblas.so.0" for arch in _ARCH_DIRS)
    + (
        "/usr/lib64/libopenblasp.so.0",  # Fedora / RHEL (pthreads build)
        "/usr/lib64/libopenblas.so.0",
    )
)
REFERENCE = "reference (bundled with mlx)"
INSTALL_HINT = "apt-get install libopenblas0-pthread"

_state: dict[str, str] | None = None
_handle: ctypes.CDLL | None = None


def _version(lib: ctypes.CDLL) -> str:
    """'openblas 0.3.21' from `openblas_get_config()` ('OpenBLAS 0.3.21 DYNAMIC_ARCH ...')."""
    try:
        fn = lib.openblas_get_config
        fn.restype = ctypes.c_char_p
        words = (fn() or b"").decode(errors="replace").split()
        return f"openblas {words[1]}" if len(words) > 1 else "openblas"
    except AttributeError:
        return "cblas"


def _try(path: str) -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    return lib if hasattr(lib, "cblas_sgemm") else None


def load_optimised_blas() -> dict[str, str]:
    """Load an optimised BLAS once per process (Linux only); returns {"blas": name, "path": ..}
    or, when none is used, {"blas": REFERENCE, "why": ...}. Never raises."""
    global _state, _handle
    if _state is not None:
        return _state
    if sys.platform != "linux":
        _state = {
            "blas": "platform (Accelerate on macOS)" if sys.platform == "darwin" else "platform"
        }
        return _state
    choice = os.environ.get("BT_BLAS", "").strip()
    if choice.lower() in ("reference", "bundled", "none", "off"):
        _state = {"blas": REFERENCE, "why": f"BT_BLAS={choice}"}
        return _state
    if "mlx.core" in sys.modules:
        _state = {"blas": REFERENCE, "why": "mlx was imported before breakthrough"}
        return _state
    if choice:
        paths: tuple[str, ...] = (choice,)
    else:
        found = ctypes.util.find_library("openblas")
        paths = CANDIDATES + ((found,) if found else ())
    for path in paths:
        if choice or os.path.exists(path) or not path.startswith("/"):
            lib = _try(path)
            if lib is not None:
                _handle = lib
                _state = {"blas": _version(lib), "path": path}
                return _state
    why = (
        f"BT_BLAS={choice} cannot be loaded or lacks cblas_sgemm" if choice else "no OpenBLAS found"
    )
    _state = {"blas": REFERENCE, "why": why}
    return _state


def blas_name() -> str:
    """What MLX's CPU matmuls use in this process (engine identity)."""
    return load_optimised_blas()["blas"]


def notice() -> str | None:
    """One line for the user when MLX runs on the reference BLAS on Linux without being asked
    to (BT_BLAS=reference), else None."""
    state = load_optimised_blas()
    why = state.get("why", "")
    if state["blas"] != REFERENCE or (why.startswith("BT_BLAS=") and "cannot" not in why):
        return None
    hint = "" if why.startswith("BT_BLAS=") else f" ({INSTALL_HINT})"
    return f"bt: {why}{hint}; MLX uses its bundled reference BLAS, several times slower on CPU"
