"""The `bt` command line: a thin typer app. Each area registers its commands from
`breakthrough/commands/<area>.py` (a `register(app)` function); no logic lives here."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from breakthrough.errors import BtError

# transformers (imported by mlx-lm) announces at import that PyTorch is absent; bt never needs it.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

app = typer.Typer(
    name="bt",
    help="breakthrough: prefix-value vs budget-fit experiments on reasoning traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """breakthrough: prefix-value vs budget-fit experiments on reasoning traces.

    Pipeline: bt base (one long solution per problem x model) -> bt continue (budgeted
    continuations from prefixes, and restarts) -> bt classify (T_F, adv(t), T_V, regimes).
    """


# One line per area; each module exposes register(app). Keep module imports light
# (heavy libraries are imported inside the command functions).
COMMAND_MODULES = [
    "breakthrough.commands.cohorts",
    "breakthrough.commands.models",
    "breakthrough.commands.base",
    "breakthrough.commands.continue_",
    "breakthrough.commands.status",
    "breakthrough.commands.classify",
    "breakthrough.commands.grade",
    "breakthrough.commands.export",
    "breakthrough.commands.auroc",
    "breakthrough.commands.report",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point: run the app; a BtError becomes one line on stderr and exit code 2."""
    try:
        app(standalone_mode=False)
    except BtError as exc:
        print(f"bt: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        print("bt: aborted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        raise


if __name__ == "__main__":
    main()
