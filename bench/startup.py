"""How fast does `bt` answer? Wall time of the installed console script, in a fresh process
each time, for the commands a user types to look (not to generate): the median of N runs each,
beside its target (`--version` and `--help` <= 0.2 s, read-only commands <= 0.5 s on
an idle machine).

Why a subprocess: what a user waits for is interpreter start-up plus every module the command
imports before it prints; an in-process timer would hide both. `status` and `verify` read a small
finished run this script writes first (tests/store_writer.py's one-cell run, written through the
store without a model) in a temporary folder.

    .venv/bin/python bench/startup.py [--runs 7] [--bt PATH]

PYTHONPATH picks whose code the console script runs (e.g. PYTHONPATH=/path/to/checkout to time
another checkout with the same venv). Prints one line per command: median wall time, min, max,
the median CPU time (user + system, which load changes little), the target, and whether the
median meets it; the machine's load average is printed first (a busy machine is slower, so
compare numbers taken at similar load).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST_S = 0.2  # --version, --help
READ_ONLY_S = 0.5  # status, verify, cohorts list, models list


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds from start to exit, CPU seconds user + system) of `cmd`, output discarded;
    a failure stops the bench. The CPU time is what the command costs whatever else runs: on a
    busy machine it stays near the wall time an idle machine would show."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="Runs per command (median reported).")
    ap.add_argument(
        "--bt",
        type=Path,
        default=Path(sys.executable).parent / "bt",
        help="The console script to time (default: this interpreter's bt).",
    )
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    from store_writer import write_run  # noqa: E402  (the tests' small finished run)

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="bt-startup-") as tmp:
        work = Path(tmp)
        run = write_run(work / "runs" / "small")
        bt = str(args.bt)
        commands = [
            (["--version"], FAST_S),
            (["--help"], FAST_S),
            (["cohorts", "list"], READ_ONLY_S),
            (["models", "list"], READ_ONLY_S),
            (["status", str(run)], READ_ONLY_S),
            (["verify", str(run)], READ_ONLY_S),
        ]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"bt: {bt}  PYTHONPATH={os.environ.get('PYTHONPATH', '')}  runs={args.runs}  "
            f"load(1 min)={load:.2f}  cpus={os.cpu_count()}"
        )
        _time([bt, "--version"], work, env)  # warm the file cache once
        for argv, target in commands:
            runs = [_time([bt, *argv], work, env) for _ in range(args.runs)]
            times = [wall for wall, _ in runs]
            med = statistics.median(times)
            cpu = statistics.median(c for _, c in runs)
            label = "bt " + " ".join("RUN" if a == str(run) else a for a in argv)
            print(
                f"{label:<16} median {med:6.3f} s  (min {min(times):.3f}, max {max(times):.3f}; "
                f"cpu {cpu:.3f} s)  target <= {target:.1f} s  {'ok' if med <= target else 'OVER'}"
            )


if __name__ == "__main__":
    main()
