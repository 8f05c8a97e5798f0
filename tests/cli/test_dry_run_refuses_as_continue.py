"""`bt continue --dry-run` refuses what `bt continue` refuses (issue 52, trust round four),
through the installed `bt`: it printed a plan and exited 0 for runs the real command refuses
before it generates. Per case the dry run and the real run give the same one line and exit
code, the dry run prints no plan, and the run is left as it was.

The checks both share are `cell_loop.check_continue_runs` (`manifest.preflight_continue`,
then `--kv-bits` and `--instrument` against the run's continuations). Not covered by the dry
run: a `--memory-gb` that cannot hold one row (found by the loaded engine; the dry run's memory
line says "bt continue will refuse it", tests/cli/test_crashes_and_refusals_keep_runs_whole.py)
and another bt holding the run (the dry run takes no lock)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt, snapshot
from shared_runs import SMALL_CONTINUE, continued_arith_base, copy_of_arith_base
from store_writer import write_run

from breakthrough.store import RunStore


def _same_refusal(run: Path, *args: str, needles: tuple[str, ...]) -> None:
    """`bt continue RUN ARGS` and the same with --dry-run: exit 2, the same one line naming
    every needle, no plan printed, the run unchanged."""
    before = snapshot(run)
    real = run_bt("continue", run, *args)
    line = assert_one_line_error(real, 2, *needles)
    dry = run_bt("continue", run, *args, "--dry-run")
    assert assert_one_line_error(dry, 2, *needles) == line
    assert dry.stdout == "", dry.stdout  # no plan of work the command would never run
    assert snapshot(run) == before


def test_default_anchors_beyond_every_base_trace(arith_base_run, tmp_path):
    """`bt base --max-tokens 24` and no --anchors: the run's grid starts at 64."""
    run = copy_of_arith_base(arith_base_run, tmp_path)
    _same_refusal(run, needles=("--anchors 64,", "beyond every base trace", str(run)))


def test_a_store_with_an_empty_manifest(tmp_path):
    """Its first `bt base` killed right after making store.sqlite."""
    run = tmp_path / "runs" / "r"
    RunStore(run, create=True).close()
    _same_refusal(run, needles=("the manifest is empty", str(run)))


def test_a_run_whose_model_is_not_on_this_machine(tmp_path):
    run = write_run(tmp_path / "runs" / "r")  # model local:fake: no folder holds it here
    _same_refusal(run, needles=("model local:fake", "no folder with these weights"))


def test_another_backend_than_the_runs(arith_base_run, tmp_path):
    run = copy_of_arith_base(arith_base_run, tmp_path)
    _same_refusal(
        run, *SMALL_CONTINUE, "--backend", "mlx-fresh", needles=("--backend", "never mixes")
    )


@pytest.mark.parametrize(
    "extra, needles",
    [
        (("--kv-bits", "8"), ("--kv-bits 8", "never mixes")),
        (("--instrument",), ("continuation.signals", "logprobs+entropy")),
    ],
    ids=["kv-bits", "instrument"],
)
def test_continuation_settings_other_than_the_runs(
    arith_base_run, tmp_path_factory, tmp_path, extra, needles
):
    """A run continued without --kv-bits and without --instrument, asked for either."""
    shared = continued_arith_base(arith_base_run, tmp_path_factory)
    run = Path(shutil.copytree(shared, tmp_path / "cont"))
    _same_refusal(run, *SMALL_CONTINUE, *extra, needles=needles)
