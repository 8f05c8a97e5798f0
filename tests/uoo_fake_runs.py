"""Run stores of UoO answers written as text, for the report tests that need no model: one
base sample per item whose text is the JSON answer a model would give, claiming the count a
test chooses (`claims`), under a manifest that records the prompt variant and the thinking
switch as `bt base` does. `bt report uoo` regrades them with the real grader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore, SampleRecord

COHORTS = Path(__file__).resolve().parents[1] / "cohorts"


def cohort_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (COHORTS / f"{name}.jsonl").read_text().splitlines()]


def answer(item: dict, claimed: int | None) -> str:
    """The item's optimal solution with `claimed` optima (None: no JSON at all)."""
    if claimed is None:
        return "I could not finish."
    body = {
        "solution": item["example_optimum"],
        "objective": item["optimum"],
        "unique": claimed == 1,
        "num_optima": claimed,
    }
    return "Reasoning done.\n" + json.dumps(body)


def write_uoo_run(
    run_dir: Path,
    items: list[dict],
    claims: Callable[[dict], int | None],
    *,
    model: str = "fake",
    variant: str = "plain",
    thinking: str = "",
) -> Path:
    """A run store with one base sample per item answering `claims(item)` optima."""
    protocol = DEFAULT.with_overrides(thinking=thinking or None).to_dict()
    store = RunStore(run_dir, create=True)
    try:
        store.ensure_manifest(
            {
                "prompt_version": f"v1/{variant}",
                "model_id": model,
                "cohort_digest": "fake",
                "protocol": protocol,
            }
        )
        store.add_cells(
            [
                {"cell_id": f"{model}:{it['id']}", "model": model, "item": it, "prompt_ids": [1]}
                for it in items
            ]
        )
        store.add_samples(
            [
                SampleRecord(
                    cell_id=f"{model}:{it['id']}",
                    kind="base",
                    anchor=-1,
                    budget=0,
                    branch=0,
                    seed=11,
                    prefix_len=0,
                    token_ids=np.array([1, 2], np.int32),
                    text=answer(it, claims(it)),
                    finish_reason="stop",
                )
                for it in items
            ]
        )
    finally:
        store.close()
    return run_dir
