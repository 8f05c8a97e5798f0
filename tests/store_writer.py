"""Child process for the kill test: writes batches of samples forever until killed."""

from __future__ import annotations

import sys

import numpy as np

from breakthrough.store import RunStore, SampleRecord


def main(run_dir: str, start: int) -> None:
    store = RunStore(run_dir, create=True)
    store.add_cells(
        [{"cell_id": "m:p", "model": "m", "item": {"id": "p", "stage": "t"}, "prompt_ids": [1, 2]}]
    )
    rng = np.random.default_rng(start)
    branch = start
    while True:
        batch = []
        for _ in range(int(rng.integers(1, 8))):
            n = int(rng.integers(1, 4000))
            toks = rng.integers(0, 50000, size=n).astype(np.int32)
            batch.append(
                SampleRecord(
                    cell_id="m:p", kind="probe", anchor=64, budget=1024, branch=branch, seed=branch,
                    prefix_len=0, token_ids=toks, text="x" * n, finish_reason="eos",
                    logprobs=rng.standard_normal(n).astype(np.float32),
                    entropies=rng.random(n).astype(np.float32),
                )
            )
            branch += 1
        store.add_samples(batch)
        print(branch, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
