"""Frames and run stores for the `bt classify` tests: five cells whose labels are known (see
`cell_spec`), as hand-built frames or written into a run store with its protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from breakthrough.protocol import DEFAULT, Protocol
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.grade import Grade

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
ALL = (1024, 2048, 4096, 8192)
# A small-budget protocol (a demo run): B = 64, restarts at 64 ... 512, so 4B = 256.
SMALL = DEFAULT.with_overrides(budget=64, restart_budgets=(64, 128, 256, 512))


def cell_spec() -> dict:
    """Per cell: probes {anchor: successes list}, restarts {C: successes list}; the comments
    give each cell's regime under the default protocol."""
    y, n = True, False
    return {
        # prefix-limited: T_F = T_V = 128 (p = 1, R = 0 everywhere); bisection done (96, 112)
        "g:p1": {
            "probes": {a: [y] * 4 for a in (128, 256, 512)}
            | {64: [n] * 4, 96: [n] * 4, 112: [n, n, y, n]},
            "restarts": {c: [n] * 4 for c in ALL},
            "level": 4,
            "stage": "dev",
        },
        # budget-limited
        "m:p1": {
            "probes": {a: [n] * 4 for a in GRID[:6]},
            "restarts": {1024: [n] * 4, 2048: [n, y, n, n], 4096: [y, y, y, n], 8192: [y] * 4},
            "level": 4,
            "stage": "dev",
        },
        # instant scratch-solvable: (0, 16] after two bisection rounds
        "g:p2": {
            "probes": {a: [y] * 4 for a in (16, 32, 64, 128, 256)},
            "restarts": {1024: [y, y, y, n]},
            "level": 1,
            "stage": "wave3",
        },
        # terminal A1 at 6/8, otherwise unsolved
        "m:p2": {
            "probes": {a: [n] * 4 for a in GRID[:7]} | {8192: [y, y, y, n, y, y, y, n]},
            "restarts": {c: [n] * 4 for c in ALL},
            "level": 5,
            "stage": "wave3",
        },
        # unsolved hard with ambiguous probe cells still to top up (1/4, 2/4)
        "g:p3": {
            "probes": {a: [n] * 4 for a in GRID[:4]} | {1024: [y, n, n, n], 2048: [y, y, n, n]},
            "restarts": {c: [n] * 4 for c in ALL},
            "level": 3,
            "stage": "wave3",
        },
    }


def small_spec() -> dict:
    """`cell_spec` with every restart budget divided by 16 (1,024 → 64 = B of `SMALL`)."""
    return {
        cell: s | {"restarts": {c // 16: oks for c, oks in s["restarts"].items()}}
        for cell, s in cell_spec().items()
    }


def _samples(spec: dict, budget: int):
    """(cell, kind, anchor, budget, branch, correct) of every sample in spec; probes at B."""
    for cell, s in spec.items():
        for kind in ("probe", "restart"):
            for point, oks in s[kind + "s"].items():
                for b, ok in enumerate(oks):
                    yield (
                        cell,
                        kind,
                        point if kind == "probe" else -1,
                        budget if kind == "probe" else point,
                        b,
                        ok,
                    )


def frames(spec: dict | None = None, budget: int = 1024) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(samples frame, cells frame) as `RunStore.samples_frame` / `cells_frame` give them."""
    spec = spec or cell_spec()
    cells = [
        {
            "cell_id": cell,
            "problem_id": cell.split(":")[1],
            "model": cell.split(":")[0],
            "stage": s["stage"],
            "level": s["level"],
            "subject": "Algebra",
            "answer": "1",
            "reasoning_tokens": 9000,
        }
        for cell, s in spec.items()
    ]
    meta = {c["cell_id"]: c for c in cells}
    rows = [
        {
            "sample_id": sid,
            "cell_id": cell,
            "problem_id": meta[cell]["problem_id"],
            "model": meta[cell]["model"],
            "stage": meta[cell]["stage"],
            "level": meta[cell]["level"],
            "kind": kind,
            "anchor": anchor,
            "budget": b,
            "branch": branch,
            "correct": ok,
        }
        for sid, (cell, kind, anchor, b, branch, ok) in enumerate(_samples(spec, budget), 1)
    ]
    return pd.DataFrame(rows), pd.DataFrame(cells)


def write_store(
    run_dir: Path, spec: dict, protocol: Protocol | None = DEFAULT, *, subject: str | None = None
) -> Path:
    """A run store holding spec's cells and graded samples (probes at the protocol's B) and, in
    its manifest, what every run's holds: a model, a cohort digest and the protocol
    (`protocol=None`: a manifest without one, refused as damaged). `subject`: every cohort
    row's subject (none by default, as a family without subjects)."""
    budget = (protocol or DEFAULT).budget
    with RunStore(run_dir, create=True) as store:
        store.update_manifest(
            {
                "model_id": "fixture",
                "cohort_digest": "fixture",
                **({"protocol": protocol.to_dict()} if protocol else {}),
            }
        )
        store.add_cells(
            [
                {
                    "cell_id": cell,
                    "model": cell.split(":")[0],
                    "item": {
                        "id": cell.split(":")[1],
                        "stage": s["stage"],
                        "level": s["level"],
                        "answer": "1",
                        **({"subject": subject} if subject else {}),
                    },
                    "prompt_ids": [1, 2, 3],
                }
                for cell, s in spec.items()
            ]
        )
        recs, grades = [], []
        for cell, kind, anchor, b, branch, ok in _samples(spec, budget):
            recs.append(
                SampleRecord(
                    cell_id=cell,
                    kind=kind,
                    anchor=anchor,
                    budget=b,
                    branch=branch,
                    seed=branch,
                    prefix_len=0,
                    token_ids=np.array([1, 2], np.int32),
                    text="x",
                    finish_reason="eos",
                )
            )
            grades.append(
                Grade(
                    correct=ok,
                    status="correct" if ok else "wrong",
                    method="numeric",
                    grader="math",
                    version="t",
                )
            )
        store.add_samples(recs, grades, reasoning_tokens={c: 9000 for c in spec})
    return run_dir
