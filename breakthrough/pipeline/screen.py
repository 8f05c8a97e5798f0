"""`bt cohorts screen` (protocol 6.2, the wave-3 screen): every problem of a source cohort is
attempted once per seed by every model at a screening budget (the study: seeds 21, 22, 23 x
Gemma and Ministral x 3,072 tokens), and the problems whose total verified successes fall in a
band (the study: [1, 5] of 6) become a new cohort file, each row's `selection` saying how.

The attempts are `bt sample` attempts (pipeline.sample) with an explicit seed list, in their own
runs `RUNS/screens/SOURCE-MODEL`: resumable and kill-safe like every sample, and the cohort file
is written once, at the end, only when every attempt is stored."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.models.loading import model_identity
from breakthrough.pipeline.sample import (
    SampleReport,
    SampleRequest,
    check_request,
    run_dir_for,
    sample_runs,
    success_counts,
)
from breakthrough.tasks.cohorts import cohort_digest, cohorts_dir, load_cohort, write_cohort

SCREEN_SEEDS = (21, 22, 23)  # protocol 6.2, wave-3 screen
SCREEN_BAND = (1, 5)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ScreenRequest:
    """A screen: the attempts (a SampleRequest with explicit seeds), the band of total verified
    successes kept (inclusive), and the new cohort's name, folder and stage."""

    sample: SampleRequest
    band: tuple[int, int]
    name: str
    out_dir: Path | None = None
    stage: str | None = None  # default: keep each row's stage


@dataclass
class ScreenResult:
    path: Path
    kept: list[str]
    counts: dict[str, tuple[int, int]]
    reports: list[SampleReport]


def parse_band(text: str) -> tuple[int, int]:
    """ "LO,HI" -> (LO, HI), inclusive, 0 <= LO <= HI."""
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise BtError(f"--band: expected LO,HI (two integers), got {text!r}") from None
    if not 0 <= lo <= hi:
        raise BtError(f"--band: expected 0 <= LO <= HI, got {lo},{hi}")
    return lo, hi


def parse_seeds(text: str) -> tuple[int, ...]:
    """ "21,22,23" -> (21, 22, 23): distinct non-negative integers."""
    from breakthrough.protocol import MAX_SEED

    parts = [x.strip() for x in text.split(",")]
    try:
        seeds = tuple(int(x) for x in parts)
    except ValueError:
        raise BtError(
            f"--seeds: expected comma-separated integers (no empty element), got {text!r}"
        ) from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) > MAX_SEED:
        raise BtError(f"--seeds: expected distinct integers in 0..{MAX_SEED}, got {text!r}")
    return seeds


def output_path(req: ScreenRequest) -> Path:
    """Where the new cohort goes; refused when the name is not a plain file stem or the file
    exists (a screen never overwrites a cohort)."""
    if not _NAME.match(req.name):
        raise BtError(f"--name: {req.name!r} is not a plain cohort name (letters, digits, _ . -)")
    path = (req.out_dir or cohorts_dir()) / f"{req.name}.jsonl"
    if path.exists():
        raise BtError(f"--name: {path} already exists; choose another name")
    return path


def selection_text(
    row: dict, k: int, n: int, req: ScreenRequest, models: list[str], source: str, digest: str
) -> str:
    s = req.sample
    lo, hi = req.band
    return (
        f"bt cohorts screen (protocol 6.2): {k}/{n} verified successes, in the band [{lo}, {hi}]; "
        f"seeds {','.join(map(str, s.seeds or ()))} x models {','.join(models)} x "
        f"{s.protocol.base_max_tokens}-token attempts (protocol sampling); source cohort "
        f"{source} (digest {digest[:12]}); "
        f"source selection: {row.get('selection', '(not recorded)')}"
    )


def select_in_band(
    rows: list[dict],
    counts: dict[str, tuple[int, int]],
    req: ScreenRequest,
    models: list[str],
    source: str,
    digest: str,
) -> list[dict]:
    """The rows (in source order) whose verified successes k lie in the band, each with its
    `selection` rewritten to say how, `screen_successes` = k and `screen_attempts` = n."""
    lo, hi = req.band
    kept = []
    for row in rows:
        k, n = counts[row["id"]]
        if lo <= k <= hi:
            new = {
                **row,
                "selection": selection_text(row, k, n, req, models, source, digest),
                "screen_successes": k,
                "screen_attempts": n,
            }
            if req.stage:
                new["stage"] = req.stage
            kept.append(new)
    return kept


def screen(
    req: ScreenRequest,
    *,
    announce: Callable[[str], None] | None = None,
    drive: Callable[[Callable], SampleReport] | None = None,
) -> ScreenResult:
    """Run (or resume) the screen's attempts, count verified successes per problem over seeds x
    models, and write the cohort of the problems in the band (`announce`, `drive`: as
    `sample_runs`'s)."""
    s = req.sample
    check_screen(req)
    path = output_path(req)
    lo, hi = req.band
    all_rows = load_cohort(s.cohort)
    from breakthrough.pipeline.base import select_rows

    rows = select_rows(all_rows, s.problems, s.limit, s.cohort)
    source = Path(s.cohort).stem
    reports = sample_runs(s, announce=announce, drive=drive)
    if any(r.failed for r in reports):
        raise BtError(
            "some screen attempts failed on request errors; rerun to retry them (no cohort written)"
        )
    aliases = [model_identity(m).alias for m in s.models]
    counts = success_counts([run_dir_for(s, source, a) for a in aliases], s.attempts)
    expected = s.attempts * len(s.models)
    short = [r["id"] for r in rows if counts.get(r["id"], (0, 0))[1] != expected]
    if short:
        raise BtError(
            f"problem {short[0]}: {counts.get(short[0], (0, 0))[1]} of {expected} "
            "screen attempts stored; rerun to complete (no cohort written)"
        )
    kept_rows = select_in_band(rows, counts, req, aliases, source, cohort_digest(all_rows))
    if not kept_rows:
        dist = sorted({k for k, _ in counts.values()})
        raise BtError(
            f"no problem has verified successes in [{lo}, {hi}] (successes seen: "
            f"{', '.join(map(str, dist))}); no cohort written"
        )
    write_cohort(path, kept_rows)
    return ScreenResult(
        path=path, kept=[r["id"] for r in kept_rows], counts=counts, reports=reports
    )


def check_screen(req: ScreenRequest) -> None:
    """What `screen` refuses before any attempt runs: the request, the output name, the band."""
    s = req.sample
    check_request(s)
    output_path(req)
    if req.band[1] > s.attempts * len(s.models):
        raise BtError(
            f"--band: HI={req.band[1]} exceeds the {s.attempts * len(s.models)} attempts "
            f"per problem ({s.attempts} seeds x {len(s.models)} models)"
        )


def screen_request(
    sample: SampleRequest,
    seeds: tuple[int, ...],
    band: tuple[int, int],
    name: str,
    out_dir: Path | None,
    stage: str | None,
) -> ScreenRequest:
    """The screen's attempts are one per seed, in RUNS/screens."""
    return ScreenRequest(
        sample=replace(sample, attempts=len(seeds), seeds=seeds, subdir="screens"),
        band=band,
        name=name,
        out_dir=out_dir,
        stage=stage,
    )
