"""breakthrough (`bt`): did the prefix hold value, or did the rest of the solution just fit the
budget?"""

__version__ = "0.1.0"

# Before anything can import mlx: on Linux, load an optimised BLAS (OpenBLAS) so MLX's CPU
# matmuls bind to it instead of the reference BLAS its wheel bundles (engine/blas.py; ctypes
# only, a no-op elsewhere; BT_BLAS=reference opts out). The engine records which one ran.
from breakthrough.engine.blas import load_optimised_blas as _load_optimised_blas

_load_optimised_blas()
