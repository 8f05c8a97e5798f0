"""What a run store holds, below its SQL: the file names and schema versions of a store, the
record a finished generation is stored from (`SampleRecord`), and how per-token arrays are
packed into its rows.

NumPy is imported where an array is packed or unpacked, not with the store: `bt status` and
`bt verify` read a store without it (read-only commands answer at once)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

STORE_FILE = "store.sqlite"
# The layout and checksum coverage this bt writes into a new store (the package docstring); it reads
# OLDEST_SCHEMA..SCHEMA_VERSION. A bt that reads only 2 refuses a 3 ("made by a newer bt")
# rather than calling every row of it damaged.
SCHEMA_VERSION = "3"
OLDEST_SCHEMA = 2
COVERAGE = {
    2: "token ids, text, finish reason, seed and prefix length only",
    3: "every field a label or signal is computed from",
}
HIDDEN_DIR = "hidden"  # RUN/hidden/<sample_id>.npz: the hidden-vector files


@dataclass
class SampleRecord:
    """One finished generation, as the scheduler hands it to the store."""

    cell_id: str
    kind: str  # base | probe | restart | attempt (bt sample: an independent whole solution)
    anchor: int  # t for probes, -1 otherwise
    budget: int  # B for probes, C for restarts, 0 for base
    branch: int
    seed: int
    prefix_len: int  # generated tokens taken from the base trace (0 for base and restarts)
    token_ids: np.ndarray  # every generated token (prefix included for probes)
    text: str
    finish_reason: str
    segments: np.ndarray | None = None  # uint8 codes (breakthrough.models.segments)
    logprobs: np.ndarray | None = None  # float32 per newly generated token
    entropies: np.ndarray | None = None  # float32 per newly generated token (full distribution)
    sampling_entropies: np.ndarray | None = None  # float32: entropy of what it was drawn from
    # per-token instrumentation (GenResult.signals: name -> float32 per newly generated token);
    # stored beside the sample in table `signals` (float32 [fields, tokens], names in order)
    signals: dict[str, np.ndarray] | None = None
    # GenResult.hidden: (token indices int32 [m], float16 vectors [m, d]) of every
    # `hidden_stride`-th token; stored in RUN/hidden/<sample_id>.npz, indexed in hidden_vectors
    hidden: tuple[np.ndarray, np.ndarray] | None = None
    hidden_stride: int = 0
    elapsed_s: float | None = None
    peak_mem_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.cell_id, self.kind, self.anchor, self.budget, self.branch)


def _pack(arr: np.ndarray | None, dtype: str) -> bytes | None:
    import numpy as np

    return None if arr is None else np.ascontiguousarray(arr, dtype=dtype).tobytes()


def _unpack(blob: bytes | None, dtype: str) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob or b"", dtype=dtype)


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
