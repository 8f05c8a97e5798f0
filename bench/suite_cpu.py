"""Where the test suite's CPU goes, per test file: a pytest plugin and its summary.

The suite is CPU-bound on two cores, and wall time on this shared machine drifts by tens of
percent within hours, so a change to the suite is judged by CPU seconds: each test's own
(the pytest worker's) and those of the subprocesses it waited for (`bt`, servers, pip).

    PYTHONPATH=bench SUITE_CPU_OUT=/tmp/cpu.jsonl .venv/bin/pytest -p suite_cpu [pytest args]
    python bench/suite_cpu.py /tmp/cpu.jsonl [more.jsonl]      # per file: tests, self, kids

Under xdist every worker appends to the same file (one JSON line per test)."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict

_started: dict[str, tuple[float, float, float]] = {}
_controller = False  # an xdist controller only reports its workers' tests


def pytest_configure(config) -> None:
    global _controller
    workers = getattr(config.option, "numprocesses", None)
    _controller = bool(workers) and not hasattr(config, "workerinput")


def _now() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, time.time()


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if not _controller:
        _started[nodeid] = _now()


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    start = _started.pop(nodeid, None)
    if start is None:
        return
    end = _now()
    line = {"id": nodeid, "self": end[0] - start[0], "kids": end[1] - start[1]}
    line["wall"] = end[2] - start[2]
    with open(os.environ.get("SUITE_CPU_OUT", "suite_cpu.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")


def summarise(paths: list[str]) -> None:
    """Per test file, most CPU first: tests, own CPU, subprocess CPU, total (seconds)."""
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for path in paths:
        with open(path) as lines:
            for raw in lines:
                rec = json.loads(raw)
                row = by[rec["id"].split("::")[0]]
                row[0] += 1
                row[1] += rec["self"]
                row[2] += rec["kids"]
    print("tests    self    kids   total  file")
    total = [0.0, 0.0, 0.0]
    for name, (n, own, kids) in sorted(by.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"{n:5.0f} {own:7.1f} {kids:7.1f} {own + kids:7.1f}  {name}")
        total = [total[0] + n, total[1] + own, total[2] + kids]
    print(f"{total[0]:5.0f} {total[1]:7.1f} {total[2]:7.1f} {total[1] + total[2]:7.1f}  TOTAL")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python bench/suite_cpu.py FILE.jsonl [FILE.jsonl ...]")
    summarise(sys.argv[1:])
