"""`bt auroc` on one group warns that its intervals are degenerate; `bt classify` refuses τ, δ
and posterior bands outside their ranges before reading a run."""

from __future__ import annotations

import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store


def test_auroc_with_one_group_warns_that_its_ci_is_degenerate(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"1,{i},{int(i > 4)}\n" for i in range(10)))
    proc = run_bt("auroc", table, "-g", "g", "-s", "s", "-l", "y", "-b", "20")
    assert proc.returncode == 0, proc.stderr
    assert "bt: warning:" in proc.stderr and "degenerate" in proc.stderr


def test_auroc_with_several_groups_does_not_warn(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("g,s,y\n" + "".join(f"{i % 3},{i},{int(i > 4)}\n" for i in range(12)))
    proc = run_bt("auroc", table, "-g", "g", "-s", "s", "-l", "y", "-b", "20")
    assert proc.returncode == 0, proc.stderr
    assert "degenerate" not in proc.stderr


@pytest.mark.parametrize(
    "args, option",
    [
        (["--delta", "1.5"], "--delta"),
        (["--delta", "0"], "--delta"),
        (["--delta", "1"], "--delta"),
        (["--tau", "1.2"], "--tau"),
        (["--prior", "flat"], "--prior"),
        (["--band-lo", "0.9", "--band-hi", "0.1"], "--band-lo"),
    ],
)
def test_classify_refuses_out_of_range_settings(tmp_path, args, option):
    run = write_store(tmp_path / "r", cell_spec())
    assert_one_line_error(run_bt("classify", run, "--draws", "1", *args), 2, option)
    assert not (run / "classify").exists()
