"""Keep freed memory in the process (Linux, glibc), so MLX's CPU buffers are reused, not
faulted in afresh every decode step.

MLX's CPU backend allocates each op's output with `malloc`. glibc hands big blocks back to
the kernel when they are freed (mmap'd blocks, and a heap top above the trim threshold), so a
decode step that joins and frees per-row keys and values in every layer (`row_attention`) pays
a page fault for every 4 KiB it writes: on the Qwen3-4B-geometry bench the process spent more
system time than user time, most of it in minor faults, until these settings (numbers in
bench/RESULTS.md).

`keep_freed_memory()` sets them once per process through `mallopt`: blocks up to 32 MiB come
from the heap, and freed memory is trimmed only above 2 GiB. The cost is that RSS stays near
its peak instead of shrinking between steps. A user who set any `MALLOC_*_` variable keeps
theirs; elsewhere (macOS, musl) it does nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# glibc's mallopt parameters (malloc.h) and the values bt sets.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = (
    (M_MMAP_THRESHOLD, 32 * 2**20),  # glibc's largest: blocks up to 32 MiB from the heap
    (M_TRIM_THRESHOLD, 2**31 - 1),  # mallopt takes an int: trim only above 2 GiB free
    (M_TOP_PAD, 256 * 2**20),  # grow the heap in steps of 256 MiB (address space, not RSS)
)
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply `SETTINGS` once; True when glibc took all of them. Never raises."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or any(v in os.environ for v in USER_VARIABLES):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _applied = all(mallopt(param, value) == 1 for param, value in SETTINGS)
    return _applied
