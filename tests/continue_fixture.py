"""A run whose base traces carry a boxed answer at a known reasoning position.

The tiny random model never writes `\\boxed{7}` itself, so a continuation (graded on prefix +
continuation, protocol 7) is right exactly when its prefix already holds the box: p(t) is 0
before the box and 1 after it. That gives crossings, bisection, terminal replication and
restart panels at known places, with the real engine, grader and store.

`two_cell_copy` gives a test its own copy of the two-cell run, built once per test session
across xdist workers (tests/build_once.py) instead of once per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from build_once import build_once

from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model
from breakthrough.models.segments import reasoning_length, segment_ids
from breakthrough.models.tokens import decode
from breakthrough.pipeline.manifest import cell_id, run_manifest
from breakthrough.protocol import DEFAULT, Protocol
from breakthrough.store import RunStore, SampleRecord

FILLER = " the cat sat on the mat and then"

# A: box after ~100 reasoning tokens (crossing at 128, bisection to 96/112);
# B: box after ~200 of ~260 (crossing only at the final anchor 256: censored -> A1 top-up).
TWO_CELLS = {"pA": (100, 200), "pB": (200, 50)}


def trace_with_box(loaded, before: int, after: int) -> list[int]:
    """<think> + ~before filler tokens + \\boxed{7} + ~after filler tokens + </think> + text."""

    def filler(n: int) -> list[int]:
        ids: list[int] = []
        while len(ids) < n:
            ids += loaded.encode(FILLER)
        return ids[:n]

    return (
        loaded.encode("<think>\n")
        + filler(before)
        + loaded.encode(" so \\boxed{7} ok")
        + filler(after)
        + loaded.encode("</think>\n\nDone.")
    )


def make_run(
    run_dir: Path, model_dir: Path, layout: dict[str, tuple[int, int]], protocol: Protocol = DEFAULT
) -> RunStore:
    """A run store with one base trace per problem id in `layout` (id -> (before, after)),
    made under `protocol` (the default one unless a test needs, say, a short answer reserve)."""
    loaded = load_model(str(model_dir), family="qwen")
    rows = [
        {
            "id": pid,
            "family": "math",
            "stage": "test",
            "selection": "fixture",
            "standin": False,
            "problem": "What is 3+4?",
            "answer": "7",
            "level": 1,
            "subject": "Prealgebra",
            "source_row": i,
        }
        for i, pid in enumerate(layout)
    ]
    store = RunStore(run_dir, create=True)
    store.ensure_manifest(run_manifest(loaded, rows, protocol, "fixture", "digest", "plain"))
    store.add_cells(
        [
            {
                "cell_id": cell_id(loaded.alias, r["id"]),
                "model": loaded.alias,
                "item": r,
                "prompt_ids": build_prompt_ids(loaded.tokenizer, loaded.family, r["problem"]),
            }
            for r in rows
        ]
    )
    for r in rows:
        toks = trace_with_box(loaded, *layout[r["id"]])
        seg = segment_ids(loaded.tokenizer, toks, loaded.family)
        cid = cell_id(loaded.alias, r["id"])
        rec = SampleRecord(
            cell_id=cid,
            kind="base",
            anchor=-1,
            budget=0,
            branch=0,
            seed=11,
            prefix_len=0,
            token_ids=np.asarray(toks, np.int32),
            text=decode(loaded.tokenizer, toks),
            finish_reason="eos",
            segments=seg,
        )
        store.add_samples([rec], reasoning_tokens={cid: reasoning_length(seg)})
    return store


def two_cell_run(root: Path, model_dir: Path, protocol: Protocol = DEFAULT) -> Path:
    """ROOT/runs/fx: the `TWO_CELLS` run (store closed), the pipeline tests' common fixture."""
    run_dir = root / "runs" / "fx"
    make_run(run_dir, model_dir, TWO_CELLS, protocol).close()
    return run_dir


def store_probes(run_dir: Path, outcomes: dict[int, bool], budget: int = 1024) -> Path:
    """Every cell of a run probed at `budget` without a model: at each anchor of `outcomes`
    4 graded branches, all right or all wrong (e.g. {64: False, 128: True, 256: True}: a T_F
    event at 128, not instant, so each trajectory is an A2 target re-probed at 64 ... 256)."""
    from breakthrough.tasks.grade import Grade

    with RunStore(run_dir) as store:
        cells = [c for (c,) in store.conn.execute("SELECT cell_id FROM cells ORDER BY cell_id")]
        recs, grades = [], []
        for cell in cells:
            for anchor, ok in outcomes.items():
                for branch in range(4):
                    recs.append(
                        SampleRecord(
                            cell_id=cell,
                            kind="probe",
                            anchor=anchor,
                            budget=budget,
                            branch=branch,
                            seed=branch,
                            prefix_len=anchor,
                            token_ids=np.arange(anchor + 3, dtype=np.int32),
                            text="x",
                            finish_reason="eos",
                        )
                    )
                    grades.append(Grade(ok, "correct" if ok else "wrong", "numeric", "math", "t"))
        store.add_samples(recs, grades)
    return run_dir


def two_cell_copy(factory: pytest.TempPathFactory, model_dir: Path, root: Path) -> Path:
    """ROOT/runs/fx: a copy of the session's two-cell run (what `two_cell_run(ROOT, model_dir)`
    makes; it generates nothing, so every build is the same)."""
    built = build_once(factory, "two-cell-run", lambda f: two_cell_run(f, model_dir))
    dest = root / "runs" / "fx"
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(built / "runs" / "fx", dest))
