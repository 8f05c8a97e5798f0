"""The `bt` command line: a thin typer app. Each area registers its commands from
`breakthrough/commands/<area>.py` (a `register(app)` function); no logic lives here."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from typing import NoReturn

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.utils import PacifyFlushWrapper

from breakthrough.errors import BtError

# transformers (imported by mlx-lm) announces at import that PyTorch is absent; bt never needs it.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

app = typer.Typer(
    name="bt",
    help="breakthrough: prefix-value vs budget-fit experiments on reasoning traces.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    # Plain click help: paragraphs of the docstrings are reflowed (rich mode keeps their
    # source line breaks mid-sentence) and flags show no `<bool>` metavar.
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    """`bt --version`: the package version (the one a run's engine identity records)."""
    if value:
        from breakthrough import __version__

        typer.echo(f"bt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print bt's version and exit.",
    ),
) -> None:
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
    "breakthrough.commands.sample",
    "breakthrough.commands.continue_",
    "breakthrough.commands.status",
    "breakthrough.commands.verify",
    "breakthrough.commands.classify",
    "breakthrough.commands.grade",
    "breakthrough.commands.export",
    "breakthrough.commands.schema",
    "breakthrough.commands.auroc",
    "breakthrough.commands.signals",
    "breakthrough.commands.probe",
    "breakthrough.commands.confirm",
    "breakthrough.commands.report",
    "breakthrough.commands.serve",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `bt` console script: run the app and turn every way it can end into
    an exit status and at most one line on stderr (never a traceback for a user's mistake).

    typer >= 0.29 bundles its own click (`typer._click`), and in non-standalone mode it *returns*
    the code of a `typer.Exit` (and 130 for Ctrl-C) instead of raising, so both are handled here:
    BtError and usage errors -> 2, `typer.Exit(n)` -> n, Ctrl-C -> 130 with "interrupted, rerun
    to resume", an OS error naming a file (e.g. a read-only output folder) -> one line, 2.

    A reader that stops early (`bt status runs/ | head -1`) ends the command quietly with 0:
    the output it wanted was printed. SIGTERM (`kill`, a batch system's time limit) unwinds
    like Ctrl-C and ends with 143 and "terminated, rerun to resume"."""
    _unwind_on_sigterm()
    try:
        _main(argv)
    except BrokenPipeError:
        _closed_stdout()
    except SystemExit as exc:
        if exc.code == 1 and _broken_pipe_exit(exc):
            _closed_stdout()
        raise


def _broken_pipe_exit(exc: SystemExit) -> bool:
    """Whether `exc` is a library's exit 1 for a reader that stopped reading (not a failure):
    rich's `Console.on_broken_pipe` raises it when a table meets a closed pipe, and typer exits
    1 for a broken pipe inside a command after wrapping stdout so its flush stays quiet."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code if tb is not None else None
    if code is not None and code.co_name == "on_broken_pipe" and "rich" in code.co_filename:
        return True
    return isinstance(sys.stdout, PacifyFlushWrapper)


def _closed_stdout() -> NoReturn:
    """Exit 0 after the reader of stdout went away; stdout now points at /dev/null so that the
    interpreter's last flush at exit cannot fail again (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    if sys.__stdout__ is not None:  # None only when Python started without a stdout
        os.dup2(devnull, sys.__stdout__.fileno())
    raise SystemExit(0)


COMPLETION_OPTIONS = ("--show-completion", "--install-completion")
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")  # what typer writes completion for


def _named_shell(argv: list[str] | None) -> None:
    """`bt --show-completion SHELL` / `--install-completion SHELL`: typer's switches detect the
    parent shell and ignore a word after them, so `nosuchshell` printed bash's script and exit
    0, and `zsh` in a bash gave bash's. A shell named is checked here (one line, exit 2) and
    then honoured: typer's own switch for a named shell (the variant whose option takes it)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] not in COMPLETION_OPTIONS or args[1].startswith("-"):
        return
    if args[1] not in SHELLS:
        raise BtError(
            f"{args[0]} {args[1]}: not a shell bt writes completion for (choose from "
            f"{', '.join(SHELLS)}; leave it out to use the shell this runs in)"
        )
    os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"


def _main(argv: list[str] | None) -> None:
    """`main` less the broken-pipe handling: every other way a command ends."""
    try:
        _named_shell(argv)
        code = app(args=argv, prog_name="bt", standalone_mode=False)
    except BtError as exc:
        _fail(str(exc), 2)
    except NoArgsIsHelpError as exc:  # plain `bt` or `bt cohorts`: the help is what was asked for
        typer.echo(exc.format_message())
        raise SystemExit(0) from None
    except UsageError as exc:
        # "bt base: No such option ..."; at the top level the "bt: error:" prefix says it already
        where = (
            f"{exc.ctx.command_path}: "
            if exc.ctx is not None and exc.ctx.command_path != "bt"
            else ""
        )
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        _fail(f"{where}{exc.format_message()}{hint}", exc.exit_code)
    except ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _fail_interrupted()
    except OSError as exc:
        if exc.filename is None:
            raise
        _fail(f"{exc.filename}: {exc.strerror or exc}", 2)
    if code == 130:  # typer turned a KeyboardInterrupt inside a command into Exit(130)
        _fail_interrupted()
    if isinstance(code, int) and code:
        raise SystemExit(code)


INTERRUPTED = "interrupted, rerun to resume"
TERMINATED = "terminated, rerun to resume"
_SIGTERM_SEEN: list[int] = []  # set by the SIGTERM handler: an interruption that was a SIGTERM


class _Terminated(KeyboardInterrupt):
    """SIGTERM raised as a KeyboardInterrupt, so a `kill` unwinds exactly like Ctrl-C: every
    `finally` runs (stores close, the run lock is released; each finished sample was committed
    when its row ended) and the user gets one line instead of a silent exit 143."""


def _on_sigterm(signum: int, frame: object) -> None:
    _SIGTERM_SEEN.append(signum)
    raise _Terminated()


def _unwind_on_sigterm() -> None:
    """Route SIGTERM to `_on_sigterm`, from the main thread and only where nobody (a parent
    that ignores it, an embedding program) set another handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _fail_interrupted() -> NoReturn:
    """Ctrl-C: 130 and "interrupted"; SIGTERM: 143 (128 + 15, what a killed process reports)."""
    if _SIGTERM_SEEN:
        _fail(TERMINATED, 128 + signal.SIGTERM)
    _fail(INTERRUPTED, 130)


def _fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with `code`."""
    interrupted = code in (130, 128 + signal.SIGTERM)
    print(f"bt: {message}" if interrupted else f"bt: error: {message}", file=sys.stderr)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
