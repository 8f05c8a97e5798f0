"""`bt probe` end to end through the installed console script: a JSONL dump and a bt run, forced
through the tiny random-weight model, write the table, summary and figure; user mistakes are one
line, exit 2, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bt_cli import assert_one_line_error, run_bt
from schema_files import assert_file_matches

from breakthrough.schemas.signals import PROBE_TABLE

PROBLEMS, ATTEMPTS = 6, 6


def _completion(p: int, k: int, ok: bool) -> str:
    return f" Let me compute {p} times {k}. " + (
        f"The answer is \\boxed{{{p * k}}}." if ok else "I am not sure, maybe 7."
    )


def _outcome(p: int, k: int) -> bool:
    return k < (p % 5) + 1  # problem p: (p % 5) + 1 successes of 6


@pytest.fixture
def dump(tmp_path):
    path = tmp_path / "dump.jsonl"
    with open(path, "w") as fh:
        for p in range(PROBLEMS):
            for k in range(ATTEMPTS):
                fh.write(
                    json.dumps(
                        {
                            "problem_id": f"q{p}",
                            "prompt": f"Compute {p} * {k}.",
                            "completion": _completion(p, k, _outcome(p, k)),
                            "correct": _outcome(p, k),
                        }
                    )
                    + "\n"
                )
    return path


def test_probe_on_a_jsonl_dump_writes_the_table(dump, tiny_model_dir, tmp_path):
    proc = run_bt(
        "probe",
        dump,
        "--model",
        tiny_model_dir,
        "--anchors",
        "4,8",
        "--max-tokens",
        "16",
        "--bootstrap",
        "50",
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "dump.probe"
    assert sorted(p.name for p in out.iterdir()) == [
        "probe_figure.png",
        "probe_summary.json",
        "probe_table.csv",
        "probe_table.parquet",
    ]
    for name in ("probe_table.parquet", "probe_table.csv"):  # as declared (docs/outputs.md)
        assert_file_matches(PROBE_TABLE, out / name)
    table = pd.read_parquet(out / "probe_table.parquet")
    assert list(table.arm) == ["hidden", "hidden", "stream", "stream", "loo"]
    assert list(table.score) == ["probe"] * 4 + ["loo"]
    assert list(table.t[:4]) == [4, 8, 4, 8]
    assert (table.rows == PROBLEMS * ATTEMPTS).all()
    loo = table.iloc[-1]
    assert loo.within_pair_weighted == 0.0 and loo.within_failure_weighted == 0.0
    for _, r in table.iterrows():
        assert 0.0 <= r.pooled <= 1.0 and r.pooled_lo <= r.pooled <= r.pooled_hi
    csv = pd.read_csv(out / "probe_table.csv")
    assert np.allclose(csv.pooled, table.pooled) and list(csv.arm) == list(table.arm)
    stream = table[table.arm == "stream"]
    assert (stream.within_problems == table.within_problems.iloc[0]).all()
    assert stream.within_failure_weighted.between(0, 1).all()
    summary = json.loads((out / "probe_summary.json").read_text())
    assert (
        summary["trajectories"] == PROBLEMS * ATTEMPTS
        and summary["seeds"]["folds_pca_pooled"] == 20260831
    )
    assert 0.0 <= summary["top1_agreement_mean"] <= 1.0
    assert [r["arm"] for r in summary["table"]] == list(table.arm)
    assert (
        summary["stream_features"][0] == "stream_entropy_mean"
        and len(summary["stream_features"]) == 8
    )
    assert (out / "probe_figure.png").read_bytes()[:4] == b"\x89PNG"
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{PROBLEMS * ATTEMPTS} trajectories, model {tiny_model_dir}"
    assert lines[1].startswith("teacher-forcing fidelity: top-1 agreement ")
    assert lines[2].split()[:2] == ["t", "arm"]
    assert [ln.split()[:2] for ln in lines[3:8]] == [
        ["4", "hidden"],
        ["8", "hidden"],
        ["4", "stream"],
        ["8", "stream"],
        ["LOO", "loo"],
    ]
    for ln, (_, r) in zip(
        lines[3:8], table.iterrows(), strict=False
    ):  # printed values are the table's
        assert ln.split()[2] == f"{r.pooled:.3f}"


def test_probe_on_a_run_reads_its_attempts(tiny_model, tiny_model_dir, tmp_path):
    """A run store holding graded attempts (token ids and prompt ids as bt stores them)."""
    from breakthrough.models.hidden_states import tokenize_dump
    from breakthrough.protocol import DEFAULT
    from breakthrough.store import RunStore, SampleRecord
    from breakthrough.tasks.grade import Grade

    run = tmp_path / "run"
    store = RunStore(run, create=True)
    store.update_manifest(
        {"model_id": str(tiny_model_dir), "cohort_digest": "fixture", "protocol": DEFAULT.to_dict()}
    )
    cells, records, grades = [], [], []
    for p in range(PROBLEMS):
        prompt, _ = tokenize_dump(tiny_model.tokenizer, f"Compute {p} * 3.", "")
        cells.append(
            {
                "cell_id": f"tiny:q{p}",
                "model": "tiny",
                "item": {"id": f"q{p}", "stage": "t"},
                "prompt_ids": prompt,
            }
        )
        for k in range(ATTEMPTS):
            ok = _outcome(p, k)
            text = _completion(p, k, ok)
            ids = np.array(tiny_model.encode(text), dtype=np.int32)
            records.append(
                SampleRecord(
                    cell_id=f"tiny:q{p}",
                    kind="attempt",
                    anchor=-1,
                    budget=64,
                    branch=k,
                    seed=k,
                    prefix_len=0,
                    token_ids=ids,
                    text=text,
                    finish_reason="eos",
                )
            )
            grades.append(Grade(ok, "correct" if ok else "wrong", "fixture", "fixture", "1"))
    store.add_cells(cells)
    store.add_samples(records, grades)
    store.close()
    proc = run_bt("probe", run, "--anchors", "4", "--max-tokens", "8", "--bootstrap", "20")
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(run / "probe" / "probe_table.csv")
    assert list(table.arm) == ["hidden", "stream", "loo"] and list(table.score) == [
        "probe",
        "probe",
        "loo",
    ]
    assert (table.rows == PROBLEMS * ATTEMPTS).all()
    assert table.within_problems.iloc[0] == PROBLEMS  # 1 to 5 successes of 6: all mid-band
    again = run_bt("probe", run, "--model", tiny_model_dir, "--out", tmp_path / "other")
    assert_one_line_error(again, 2, "--model", "drop --model")
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize(
    "args, needles",
    [
        (("--anchors", "2,8"), ("--anchors", "at least 4")),
        (("--anchors", "4,x"), ("--anchors", "comma-separated")),
        (("--anchors", "4,1024"), ("--anchors", "--max-tokens 512")),
    ],
)
def test_option_mistakes_are_one_line(dump, args, needles):
    proc = run_bt("probe", dump, *args)
    assert_one_line_error(proc, 2, *needles)
    assert not (dump.parent / "dump.probe").exists()


def test_a_bad_dump_row_names_file_line_and_field(dump, tiny_model_dir):
    lines = dump.read_text().splitlines()
    bad = json.loads(lines[3])
    del bad["completion"]
    lines[3] = json.dumps(bad)
    dump.write_text("\n".join(lines) + "\n")
    proc = run_bt("probe", dump, "--model", tiny_model_dir)
    assert_one_line_error(proc, 2, f"{dump}:4", "'completion'")
    assert not (dump.parent / "dump.probe").exists()


def test_a_missing_source_and_model_on_a_run_are_refused(tmp_path):
    assert_one_line_error(run_bt("probe", tmp_path / "nope.jsonl"), 2, "nope.jsonl")
    assert_one_line_error(run_bt("probe", tmp_path), 2, "neither a run")


def test_probe_on_a_math128_folder_grades_with_math_verify(tmp_path, tiny_model_dir):
    """One YAML per problem (prompt, samples, gt_answer): samples graded against the last box."""
    import yaml

    folder = tmp_path / "math128"
    folder.mkdir()
    for p in range(3):
        answer = p + 2
        samples = [
            f" So the result is \\boxed{{{answer}}}."
            if k < p + 1
            else f" So the result is \\boxed{{{answer + 10}}}."
            for k in range(4)
        ]
        doc = {
            "prompt": f"What is {p} + 2?",
            "samples": samples,
            "gt_answer": f"We add: $\\boxed{{{answer}}}$",
        }
        (folder / f"{p}.yaml").write_text(yaml.safe_dump(doc))
    proc = run_bt(
        "probe",
        folder,
        "--model",
        tiny_model_dir,
        "--anchors",
        "4",
        "--max-tokens",
        "8",
        "--bootstrap",
        "0",
    )
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "math128.probe" / "probe_table.csv")
    summary = json.loads((tmp_path / "math128.probe" / "probe_summary.json").read_text())
    assert summary["source"] == "math128" and summary["trajectories"] == 12
    # successes 1, 2, 3 of 4: every problem mid-band, so all 12 rows are analysed
    assert table.rows.iloc[0] == 12 and table.within_problems.iloc[0] == 3
    assert table.within_pair_weighted.iloc[-1] == 0.0  # LOO, from the math-verify grades


def test_a_rare_class_is_one_note_not_sklearn_warnings(tiny_model_dir, tmp_path):
    """One success in 12 attempts: folds by problem cannot all hold both classes; bt probe says
    so once and keeps sklearn's per-split warnings out of the user's terminal."""
    path = tmp_path / "rare.jsonl"
    with open(path, "w") as fh:
        for p in range(3):
            for k in range(4):
                ok = p == 0 and k == 0
                fh.write(
                    json.dumps(
                        {
                            "problem_id": f"q{p}",
                            "prompt": f"Compute {p} * {k}.",
                            "completion": _completion(p, k, ok),
                            "correct": ok,
                        }
                    )
                    + "\n"
                )
    proc = run_bt(
        "probe",
        path,
        "--model",
        tiny_model_dir,
        "--anchors",
        "4",
        "--max-tokens",
        "8",
        "--bootstrap",
        "20",
    )
    assert proc.returncode == 0, proc.stderr
    assert "bt: note: only 1 success among 12 trajectories" in proc.stderr
    assert "Warning" not in proc.stderr
