"""`bt probe`: hidden-state and stream-summary probes at anchor points, pooled vs within-problem
AUROC (protocol 9.8).

Parses the options, calls `breakthrough.signals.probe_run.run_probe` and prints its table.
"""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import MAX_DRAWS
from breakthrough.errors import BtError

DEFAULT_ANCHORS = "4,8,16,32,64,128,192,256,384,512"  # = signals.probe.DEFAULT_ANCHORS


def parse_anchors(text: str, max_tokens: int) -> tuple[int, ...]:
    """--anchors: comma-separated t with 4 <= t <= --max-tokens (a vector is the mean of the
    states of generated tokens t-4 .. t-1, all forced)."""
    parts = [x.strip() for x in text.split(",")]
    if any(parts) and not all(parts):
        raise BtError(
            f"--anchors: element {parts.index('') + 1} of {text!r} is empty; expected "
            "comma-separated integers"
        )
    try:
        vals = tuple(sorted({int(x) for x in parts if x}))
    except ValueError:
        raise BtError(f"--anchors: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise BtError(f"--anchors: expected at least one anchor, got {text!r}")
    if vals[0] < 4:
        raise BtError(
            f"--anchors: each anchor must be at least 4 (mean of tokens t-4..t-1), got {vals[0]}"
        )
    if vals[-1] > max_tokens:
        raise BtError(f"--anchors: anchor {vals[-1]} lies beyond --max-tokens {max_tokens}")
    return vals


def probe(
    source: Path = typer.Argument(
        ...,
        help="A run directory, a JSONL dump (problem_id, prompt, "
        "completion, correct) or a math128 folder of YAML files.",
    ),
    anchors: str = typer.Option(DEFAULT_ANCHORS, help="Anchor points t (generated tokens)."),
    model: str | None = typer.Option(
        None,
        help="Model for a dump (alias, folder or hub id; "
        "default: the offline default). A run uses its own.",
    ),
    max_tokens: int = typer.Option(512, help="Generated tokens forced per trajectory."),
    bootstrap: int = typer.Option(
        2000, min=0, max=MAX_DRAWS, help="Problem-clustered bootstrap draws (0: no CIs)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder (default: RUN/probe, or DUMP.probe beside the dump).",
    ),
) -> None:
    """Probe dissection: pooled vs within-problem AUROC at each anchor t, two arms.

    Each trajectory is teacher-forced (prompt + its first --max-tokens generated tokens, one
    forward). Hidden arm: the anchor vector at t is the mean final-normalised hidden state of
    tokens t-4..t-1. Stream arm: 8 summaries (entropy mean/std/OLS slope, surprisal mean and max
    one-step rise, top-1 probability mean/std/OLS slope) of the first t tokens' streams.
    Each arm, on the same rows and folds: StandardScaler -> PCA -> logistic regression,
    out-of-fold by problem (StratifiedGroupKFold), scored as pooled AUROC on a pooled set and
    within-problem AUROC (failure- and pair-weighted) on mid-band problems, with
    problem-clustered bootstrap CIs and the LOO pass-rate reference.
    """
    if max_tokens < 4:
        raise BtError(f"--max-tokens: expected at least 4, got {max_tokens}")
    grid = parse_anchors(anchors, max_tokens)
    from breakthrough.signals.probe_run import run_probe  # sklearn, mlx: not at `bt` start-up

    run = run_probe(
        source,
        model=model,
        anchors=grid,
        max_tokens=max_tokens,
        bootstrap=bootstrap,
        out=out,
        progress=lambda m: typer.echo(m, err=True),
    )
    for note in run.notes:
        typer.echo(f"bt: note: {note}", err=True)
    for line in run.lines():
        typer.echo(line)
    typer.echo(f"wrote {run.out}")


def register(app: typer.Typer) -> None:
    app.command("probe", short_help="Hidden-state probes: pooled vs within-problem AUROC.")(probe)
