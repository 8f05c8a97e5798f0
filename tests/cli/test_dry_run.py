"""`--dry-run` on `bt base` and `bt continue`: the samples and tokens each phase would
generate and an ETA from the tokens/s that finished runs stored for this machine and model
(a model's first `bt continue` from the rate `bt base` measured, said so); no model is loaded
and nothing is written."""

from __future__ import annotations

import re

from bt_cli import bt_in_process, run_bt, stored_manifest


def test_dry_runs_count_the_work_and_use_the_measured_rate(tmp_path, tiny_model_dir):
    runs = tmp_path / "runs"
    base = (
        "base",
        "--cohort",
        "demo",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        runs,
        "--run",
        "r",
        "--max-tokens",
        "24",
    )
    first = run_bt(*base, "--dry-run", "--limit", "2")
    assert first.returncode == 0, first.stderr
    assert "2 samples, at most 48 tokens" in first.stdout and "ETA unknown" in first.stdout
    assert not runs.exists()  # nothing written

    assert run_bt(*base, "--limit", "2").returncode == 0
    run = runs / "r"
    rate = stored_manifest(run)["throughput"]["base"]
    assert rate["generated_tokens"] == 48 and rate["tokens_per_s"] > 0
    rerun = run_bt(*base, "--limit", "2")  # nothing left: said before any model is loaded
    assert rerun.returncode == 0 and "nothing to do" in " ".join(
        (rerun.stdout + rerun.stderr).split()
    )

    before = (run / "store.sqlite").read_bytes()
    again = run_bt(*base, "--dry-run", "--limit", "3")
    assert again.returncode == 0, again.stderr
    assert "1 sample, at most 24 tokens" in again.stdout and "2 cells already done" in again.stdout
    assert "tokens/s (measured by `bt base` at batch 8 in r" in again.stdout
    # the measurement had 2 rows in flight, this plan 1: its rate is scaled down, said so
    assert "scaled to the 1 row this plan keeps in flight" in again.stdout, again.stdout

    cont = (
        "continue",
        run,
        "--anchors",
        "2,4",
        "--samples",
        "2",
        "--budget",
        "4",
        "--answer-budget",
        "4",
        "--restarts",
        "4,8",
    )
    plan = run_bt(*cont, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    lines = {line.split()[0]: line for line in plan.stdout.splitlines()[1:] if line.strip()}
    assert {"probes", "refinement", "restarts", "topups", "ETA"} <= set(lines)
    # issue 30: the first continue of a model estimates from the rate bt base measured, said so
    assert "ETA at most" in lines["ETA"] and "measured by `bt base` in r" in lines["ETA"]
    assert "no `bt continue` of tiny-llama at batch size 32 has measured its own" in lines["ETA"]
    # restarts: 2 cells x 2 budgets x 2 samples; tokens (4+4)*2 + (8+4)*2 per cell
    assert "8 samples, at most 80 tokens" in lines["restarts"]
    # issue 28: what --memory-gb (auto by default) admits at the deepest anchor, model unloaded
    assert "memory (auto:" in lines["memory"] and "rows at the deepest anchor" in lines["memory"]
    fixed = run_bt(*cont, "--memory-gb", "0.5", "--batch-size", "4", "--dry-run")
    assert "memory (--memory-gb 0.5) admits 4 rows at the deepest anchor" in fixed.stdout
    assert "limited by --batch-size" in fixed.stdout
    assert (run / "store.sqlite").read_bytes() == before  # the protocol was not rewritten
    assert stored_manifest(run)["protocol"]["budget"] != 4

    # bt continue stores its rate with its batch size and occupancy (also in its closing line)
    ran = run_bt(*cont, "--batch-size", "4", "--topup", "none")
    assert ran.returncode == 0, ran.stderr
    said = " ".join(ran.stderr.split())
    # the display counts samples and tokens against the run's bound, with tok/s and an ETA
    assert re.search(r"all .*\d+ samples \d+/<=\d+ tokens .*tok/s .*ETA <= ", said), said
    assert "-:--:--" not in said
    occ = re.search(r"batch occupancy (\d+)% of 4", said)
    assert occ and 0 < int(occ.group(1)) <= 100, said
    assert "rows at the deepest anchor" in said and "peak memory" in said
    # which attention path served how many rows (on the CPU: never group buffers)
    paths = dict(
        (m.group(1), int(m.group(2)))
        for m in re.finditer(r"(group|shared|copies|row by row|padded) (\d+) rows", said)
    )
    assert paths and "group" not in paths and sum(paths.values()) >= 8, said
    rec = stored_manifest(run)["throughput"]["continue@4"]
    assert rec["batch_size"] == 4 and 0 < rec["occupancy"] <= 1 and rec["tokens_per_s"] > 0
    # a third cell, so continue has work left to time (a run's settings cannot change); setup,
    # made in this process: the dry runs after it are the subject
    bt_in_process(*base, "--limit", "3")
    more = cont
    at4 = run_bt(*more, "--batch-size", "4", "--dry-run")
    assert "measured by `bt continue` at batch 4 in r" in at4.stdout, at4.stdout
    eta = [line for line in at4.stdout.splitlines() if "ETA" in line]
    assert len(eta) == 1 and "ETA at most" in eta[0]  # the one estimate, at the measured rate
    full = [line for line in at4.stdout.splitlines() if "batch" in line and "full" in line]
    # a full-batch figure is only ever a labelled optimistic bound, never the estimate
    assert all(line.strip().startswith("optimistic bound, not the estimate") for line in full)
    at8 = run_bt(*more, "--batch-size", "8", "--dry-run")
    assert "no `bt continue` of tiny-llama at batch size 8 has measured its own" in at8.stdout
    # the third cell's rows forced into group buffers (the GPU path) on this CPU: the closing
    # line counts them, and the run verifies
    grouped = run_bt(*more, "--batch-size", "4", "--topup", "none", "--attention", "group")
    assert grouped.returncode == 0, grouped.stderr
    said = " ".join(grouped.stderr.split())
    assert re.search(r"attention group \d+ rows", said), said
    assert run_bt("verify", run).returncode == 0

    # --add-budget takes --dry-run: the arm's probes and their token bound; nothing written
    before = (run / "store.sqlite").read_bytes()
    arm = run_bt("continue", run, "--add-budget", "16", "--dry-run")
    assert arm.returncode == 0, arm.stderr
    assert re.search(r"arm B=16 +\d+ samples?, at most \d+ tokens", arm.stdout), arm.stdout
    assert (run / "store.sqlite").read_bytes() == before
