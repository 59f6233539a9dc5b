"""bakery's command line: the root command and its options (see CONTRACT.md).

Each command is a module of :mod:`bakery.cli.commands`, loaded when it runs (the registry
is ``bakery.cli.commands.COMMANDS``). Only the CLI layer prints. The core raises
BakeryError subclasses; the one handler (bakery.cli.console.exit_code, reached from the
root command, :class:`bakery.cli.parsing.BakeryGroup`) turns them into one line on stderr
and the contract's exit code.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bakery import __version__
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import fit_consoles as _fit_consoles
from bakery.cli.console import log_to_console, out_console
from bakery.cli.parsing import (
    BakeryGroup,
)

app = typer.Typer(
    name="bakery",
    cls=BakeryGroup,
    help="Bake patched vLLM trees from ordered series of plain diffs.\n\n"
    "Series live in launcher/ of the project: $BAKERY_HOME when set, else the nearest "
    "folder above the working directory that holds launcher/.",
    no_args_is_help=True,
    # typer's --install-completion/--show-completion; the completion code loads only when
    # a shell asks (see BENCHMARKS.md, "Process start")
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        out_console.print(f"bakery {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="Show the version."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Only the verdict, problems and errors: no progress, no tables."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="More detail: the source's hash, each diff's commit."),
    ] = False,
) -> None:
    """The options of every command (the help is the Typer's)."""
    _Invocation.quiet, _Invocation.verbose = quiet and not verbose, verbose
    _Invocation.human = out_console
    _fit_consoles()
    ctx.call_on_close(log_to_console(quiet=_Invocation.quiet, verbose=verbose))
