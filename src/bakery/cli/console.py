"""The consoles bakery prints on, and the one place where an error becomes an exit code.

Every command's human output and every error line go through ``out_console`` and
``err_console``; :func:`exit_code` is the one handler (pip's ``_run_wrapper``, pre-commit's
``error_handler``): the root command (:class:`bakery.cli.parsing.BakeryGroup`) hands it
whatever a command raised, and it prints one line and returns the contract's exit code
(CONTRACT.md): a ``BakeryError`` its ``exit_code``, a usage error 2, Ctrl-C (or SIGTERM,
which bakery turns into one) 130. Before this module is imported, a Ctrl-C while Python
starts is bakery's ``__main__``'s to report, the same way.

A module of its own so that cli.app and cli.cache, which both print, import it, not each
other.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

import click
import typer
from rich.console import Console
from rich.markup import escape

from bakery.context import Context
from bakery.errors import BakeryError
from bakery.logs import Unmuted, event
from bakery.safety.text import CILineGuard, clean
from bakery.safety.urls import redact_text

#: The exit code of an interrupted command (128 + SIGINT), as shells report it.
INTERRUPTED = 130

# Piped output is never wrapped: soft_wrap keeps each line whole, and a console that is
# not a terminal gets no width of 80 unless COLUMNS says so (see fit_consoles).
# Every line either console prints goes through CILineGuard: no input can start a line
# with "::" (a GitHub Actions workflow command), however rich lays it out. emoji=False: a
# name like "x:warning:y" is printed as written, never as an emoji.
out_console = Console(
    file=CILineGuard(lambda: sys.stdout),  # type: ignore[arg-type]
    highlight=False,
    soft_wrap=True,
    emoji=False,
)
err_console = Console(
    file=CILineGuard(lambda: sys.stderr),  # type: ignore[arg-type]
    highlight=False,
    soft_wrap=True,
    emoji=False,
)


def safe(text: object) -> str:
    """Text from input (errors quote it) made safe to print: one line, no control
    characters, no rich markup, no credentials (see bakery.safety)."""
    return escape(clean(redact_text(str(text))))


class Invocation:
    """What this run of bakery was asked for; the root callback resets it each time (tests
    run many commands in one process)."""

    quiet = False
    verbose = False
    #: Where human output goes: stdout, or stderr when --json - takes stdout.
    human: Console = out_console


#: The width of a console that is not a terminal (a pipe, a CI log) when COLUMNS does not
#: say: wide enough that no line is wrapped; tables take only the width they need.
PIPE_WIDTH = 4096


def human() -> Console:
    return Invocation.human


def context() -> Context:
    """The context of this command (bakery.context), from what the root options asked:
    made where each command starts, so that a command that needs no cache pays nothing."""
    from bakery.cli import render  # here: `--version` and `--help` need no renderer

    progress = None if Invocation.quiet else render.download_progress(err_console)
    return Context.here(progress=progress)


def fit_consoles() -> None:
    for console in (out_console, err_console):
        console.width = None  # type: ignore[assignment]  # rich: measure again
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = PIPE_WIDTH


class ConsoleHandler(logging.Handler):
    """The core's progress and notes (the ``bakery`` loggers, see bakery.logs) on stderr,
    one line each, made safe to print; what bakery detected, and ``-v``'s detail, dim."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(Unmuted())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            detail = safe(record.getMessage())
            dim = event(record) == "detected" or record.levelno < logging.INFO
            err_console.print(
                f"[dim]{detail}[/]" if dim else detail, markup=True, highlight=False, soft_wrap=True
            )
        except Exception:  # a handler never raises into the core (logging's rule)
            self.handleError(record)


def log_to_console(*, quiet: bool, verbose: bool) -> Callable[[], None]:
    """The one handler on the ``bakery`` logger, at the level -q/-v ask for, for one
    command: the function returned takes it off again (the root command calls it when the
    command ends, so that bakery used as a library after a command prints nothing)."""
    logger = logging.getLogger("bakery")
    handler, level = ConsoleHandler(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)

    def remove() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)

    return remove


def usage_line(e: click.UsageError) -> str:
    """One line: the command, click's message, and where help is."""
    path = e.ctx.command_path if e.ctx is not None else "bakery"
    message = " ".join(e.format_message().split())
    return f"error: {path}: {message} (see `{path} -h`)"


def exit_code(e: BaseException) -> int:
    """The one handler: one line on stderr for ``e``, and its exit code. What is not an
    error bakery knows (a bug) is raised again, with its traceback."""
    if isinstance(e, click.exceptions.NoArgsIsHelpError):
        e.show()  # `bakery` alone: the help, as before
        return 2
    if isinstance(e, click.UsageError):
        print(usage_line(e), file=sys.stderr)
        return e.exit_code
    if isinstance(e, click.ClickException):
        print(f"error: {' '.join(e.format_message().split())}", file=sys.stderr)
        return e.exit_code
    if isinstance(e, BakeryError):
        err_console.print(
            f"[bold red]error:[/] {safe(e.message)}", markup=True, highlight=False, soft_wrap=True
        )
        return e.exit_code
    if isinstance(e, (KeyboardInterrupt, typer.Abort)):
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    raise e
