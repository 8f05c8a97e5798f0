"""`--dry-run` on `bt base` and `bt continue`: the samples and tokens each phase would
generate and an ETA from the tokens/s that finished runs stored for this machine and model;
no model is loaded and nothing is written."""

from __future__ import annotations

import json
import sqlite3

from bt_cli import run_bt


def _manifest(run) -> dict:
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        return {k: json.loads(v) for k, v in c.execute("SELECT key, value FROM manifest")}


def test_dry_runs_count_the_work_and_use_the_measured_rate(tmp_path, tiny_model_dir):
    runs = tmp_path / "runs"
    base = ("base", "--cohort", "demo", "--model", tiny_model_dir, "--runs-dir", runs,
            "--run", "r", "--max-tokens", "24")
    first = run_bt(*base, "--dry-run", "--limit", "2")
    assert first.returncode == 0, first.stderr
    assert "2 samples, at most 48 tokens" in first.stdout and "ETA unknown" in first.stdout
    assert not runs.exists()  # nothing written

    assert run_bt(*base, "--limit", "2").returncode == 0
    run = runs / "r"
    rate = _manifest(run)["throughput"]["base"]
    assert rate["generated_tokens"] == 48 and rate["tokens_per_s"] > 0

    before = (run / "store.sqlite").read_bytes()
    again = run_bt(*base, "--dry-run", "--limit", "3")
    assert again.returncode == 0, again.stderr
    assert "1 sample, at most 24 tokens" in again.stdout and "2 cells already done" in again.stdout
    assert "tokens/s (measured by `bt base` in r)" in again.stdout

    cont = ("continue", run, "--anchors", "2,4", "--samples", "2", "--budget", "4",
            "--answer-budget", "4", "--restarts", "4,8")
    plan = run_bt(*cont, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    lines = {line.split()[0]: line for line in plan.stdout.splitlines()[1:] if line.strip()}
    assert {"probes", "refinement", "restarts", "topups", "ETA"} <= set(lines)
    assert "at most" in lines["ETA"]
    # restarts: 2 cells x 2 budgets x 2 samples; tokens (4+4)*2 + (8+4)*2 per cell
    assert "8 samples, at most 80 tokens" in lines["restarts"]
    assert (run / "store.sqlite").read_bytes() == before  # the protocol was not rewritten
    assert _manifest(run)["protocol"]["budget"] != 4
