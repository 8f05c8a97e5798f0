"""`--memory-gb auto|GB` (issue 28; issue 29 item 7: `inf` reached a traceback): one line naming
the option, exit 2, nothing written, whatever the value."""

from __future__ import annotations

import pytest
from bt_cli import run_bt


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-3", "lots", "1e9"])
def test_a_bad_memory_budget_is_one_line_and_writes_nothing(tmp_path, value) -> None:
    runs = tmp_path / "runs"
    res = run_bt("continue", "--runs-dir", runs, "--memory-gb", value)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--memory-gb" in lines[0] and "auto" in lines[0], res.stderr
    assert "Traceback" not in res.stderr and not runs.exists()


def test_help_says_what_auto_chooses() -> None:
    res = run_bt("continue", "--help")
    text = " ".join(res.stdout.split())
    assert res.returncode == 0 and "'auto'" in text and "recommended working set" in text


@pytest.mark.parametrize("value", ["3", "16", "0"])
def test_kv_bits_other_than_4_or_8_is_one_line(tmp_path, value) -> None:
    runs = tmp_path / "runs"
    res = run_bt("continue", "--runs-dir", runs, "--kv-bits", value)
    assert (
        res.returncode == 2
        and res.stderr.strip() == f"bt: error: --kv-bits: expected 4 or 8, got {value}"
    )
    assert not runs.exists()
