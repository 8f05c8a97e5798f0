"""Stores written through the store without a model: the kill test's child process (`main`:
writes batches of samples forever until killed) and a small finished run (`write_run`), as a
bt before issue 29 wrote it too (`as_schema_2`)."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

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
                    cell_id="m:p",
                    kind="probe",
                    anchor=64,
                    budget=1024,
                    branch=branch,
                    seed=branch,
                    prefix_len=0,
                    token_ids=toks,
                    text="x" * n,
                    finish_reason="eos",
                    logprobs=rng.standard_normal(n).astype(np.float32),
                    entropies=rng.random(n).astype(np.float32),
                )
            )
            branch += 1
        store.add_samples(batch)
        print(branch, flush=True)


# ---- a finished run without a model (tests/cli/test_store_damage.py) -----------------------

CELL = "fake:arith/L5/r0"
ITEM = {
    "id": "arith/L5/r0",
    "family": "arith",
    "problem": "Compute 40 * 2.",
    "answer": 80,
    "expression": "40 * 2",
    "op": "*",
    "operands": [40, 2],
    "level": 5,
    "stage": "demo",
    "subject": "multiplication",
}


def write_run(run_dir: str | Path) -> Path:
    """A small finished run as `bt base` + `bt continue --budget 4 --anchors 4,8 --restarts 4
    --samples 2` leave it, written through the store without a model (in well under a second):
    a whole manifest, one cell, a base trace with per-token signals and hidden vectors, probes
    and restarts with log-probs and entropies, every sample graded."""
    from breakthrough.protocol import DEFAULT
    from breakthrough.tasks.grade import Grade

    protocol = DEFAULT.with_overrides(
        budget=4,
        answer_budget=4,
        anchors=(4, 8),
        restart_budgets=(4,),
        samples=2,
        base_max_tokens=24,
    )
    rng = np.random.default_rng(0)

    def rec(kind: str, anchor: int, budget: int, branch: int, n: int, **more) -> SampleRecord:
        return SampleRecord(
            cell_id=CELL,
            kind=kind,
            anchor=anchor,
            budget=budget,
            branch=branch,
            seed=1000 + 10 * anchor + branch,
            prefix_len=max(anchor, 0),
            token_ids=rng.integers(0, 49152, n).astype(np.int32),
            text=f"{kind} {branch}: 80",
            finish_reason="length",
            segments=np.full(n, 2, np.uint8),
            logprobs=-rng.random(n).astype(np.float32),
            entropies=rng.random(n).astype(np.float32),
            sampling_entropies=rng.random(n).astype(np.float32),
            extra={"answer_tokens": 4},
            **more,
        )

    def grade(correct: bool) -> Grade:
        return Grade(
            correct=correct,
            status="correct" if correct else "wrong",
            method="numeric",
            grader="arith",
            version="arith-grader-1",
            extracted="80" if correct else "8",
        )

    with RunStore(run_dir, create=True) as store:
        store.ensure_manifest(
            {
                "run_kind": "base",
                "model_id": "local:fake",
                "model_revision": "local:fake",
                "model_digest": "sha256:fake",
                "model_alias": "fake",
                "family": "plain",
                "task_family": "arith",
                "protocol_digest": protocol.identity_digest(),
                "protocol": protocol.to_dict(),
                "cohort": "arith",
                "cohort_digest": "c" * 64,
                "prompt_version": "v1/plain",
                "hidden_stride": 8,
                "continue_answer_budget": 4,
                "continuation": {"plain_eos": "ends-branch", "signals": "logprobs+entropy"},
                "engine": {"backend": "mlx", "sampler": "gumbel-fmix32-v2"},
            }
        )
        store.add_cells([{"cell_id": CELL, "model": "fake", "item": ITEM, "prompt_ids": [1, 2, 3]}])
        base = rec(
            "base",
            -1,
            0,
            0,
            24,
            hidden_stride=8,
            signals={"surprisal": rng.random(24).astype(np.float32)},
            hidden=(
                np.arange(0, 24, 8, dtype=np.int32),
                rng.standard_normal((3, 16)).astype(np.float16),
            ),
        )
        store.add_samples([base], [grade(True)], reasoning_tokens={CELL: 24})
        branches = [rec("probe", a, 4, b, a + 8) for a in (4, 8) for b in range(2)]
        branches += [rec("restart", -1, 4, b, 8) for b in range(2)]
        store.add_samples(branches, [grade(b.branch == 0) for b in branches])
    return Path(run_dir)


def legacy_checksum(
    token_ids: bytes, text: str, finish_reason: str, seed: int, prefix_len: int
) -> str:
    """The row checksum every store held before issue 29 (schema 2), as that bt computed it."""
    h = hashlib.sha256(token_ids or b"")
    h.update(str(text).encode())
    h.update(f"|{finish_reason}|{seed}|{prefix_len}".encode())
    return h.hexdigest()[:32]


def as_schema_2(run_dir: str | Path) -> Path:
    """`run_dir` as a bt before issue 29 wrote it: schema_version "2" and every row's checksum
    of token ids, text, finish reason, seed and prefix length only."""
    conn = sqlite3.connect(Path(run_dir) / "store.sqlite")
    with conn:
        conn.execute("UPDATE manifest SET value='\"2\"' WHERE key='schema_version'")
        rows = conn.execute(
            "SELECT sample_id, token_ids, text, finish_reason, seed, prefix_len FROM samples"
        ).fetchall()
        conn.executemany(
            "UPDATE samples SET checksum=? WHERE sample_id=?",
            [(legacy_checksum(*r[1:]), r[0]) for r in rows],
        )
    conn.close()  # the last connection: the WAL is checkpointed into the file and removed
    return Path(run_dir)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
