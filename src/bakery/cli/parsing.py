"""click's parsing, adjusted where bakery's contract differs from click's defaults.

These classes subclass typer's own command classes (``typer.core``, over click's public
API), so help, completion and typer's option handling stay typer's. typer is held below
0.26, whose releases vendor click as a private ``typer._click`` (pyproject.toml says why).

- A usage error (unknown option, missing argument, a value out of range) is one line on
  stderr and exit 2, as the contract promises for bad input; click prints the usage, a hint
  and a framed message instead.
- ``matrix SERIES --vllm A B C``: several values after one option. click gives an option one
  value each time it is named; the list form is rewritten as ``--vllm A --vllm B --vllm C``
  before click parses it.
- ``verify ... -- ARGS``: everything after ``--`` goes to pytest; click would give its first
  word to the optional SERIES argument.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from bakery.cli import console
from bakery.errors import BakeryError, ReportedError
from bakery.outputs import write_json

#: The argument that follows ``--`` on verify's command line (pytest's), kept in ctx.meta.
PYTEST_ARGS = "bakery.pytest_args"


class BakeryGroup(TyperGroup):
    """The root command: whatever a command raises goes to the one handler
    (:func:`bakery.cli.console.exit_code`): one line, the contract's exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if args is None:
            args = sys.argv[1:]
        try:
            rv = super().main(
                args=hoist_globals(list(args)),
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except (Exception, KeyboardInterrupt) as e:  # the handler raises what it does not know
            rv = console.exit_code(e)
        code = rv if isinstance(rv, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    # each command's module is imported when that command runs (bakery.cli.commands)
    def list_commands(self, ctx: click.Context) -> list[str]:
        from bakery.cli.commands import COMMANDS

        own = super().list_commands(ctx)
        return [*own, *(name for name in COMMANDS if name not in own)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None:
            from bakery.cli.commands import load

            found = load(cmd_name)
        return found

    # typer turns a KeyboardInterrupt into a silent exit 130; as Abort it reaches the handler
    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            raise typer.Abort() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise typer.Abort() from None


#: Root options a user may also write after the command (``bakery apply dcp2 -q``).
GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose")


def hoist_globals(args: list[str]) -> list[str]:
    """Move -q/-v written after the command in front of it, where click reads them. Not
    for verify, whose unknown options are pytest's (``bakery verify -v`` is pytest -v)."""
    at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if at is None or args[at] == "verify":
        return args
    end = args.index("--") if "--" in args else len(args)
    moved = [a for a in args[at + 1 : end] if a in GLOBAL_FLAGS]
    if not moved:
        return args
    rest = [a for a in args[at + 1 : end] if a not in GLOBAL_FLAGS]
    return [*args[:at], *moved, args[at], *rest, *args[end:]]


def _takes_value(command: click.Command, ctx: click.Context) -> set[str]:
    """Every option name of the command that takes a value (the others are flags)."""
    names: set[str] = set()
    for p in command.get_params(ctx):
        if isinstance(p, TyperOption) and not p.is_flag and not p.count:
            names.update(p.opts)
    return names


def spread(args: list[str], multi: str, takes_value: set[str]) -> list[str]:
    """``multi A B C`` -> ``multi A multi B multi C``. The words that follow the option's
    value up to the next option are more values; when no other word is left for the
    command's positional argument, the last of them is that argument
    (``matrix --vllm 0.30.0 0.32.0 dcp2``)."""
    out: list[str] = []
    positional = False
    last_run: tuple[int, list[str]] | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        if a == multi and i + 1 < len(args):
            run = [args[i + 1]]
            i += 2
            while i < len(args) and not args[i].startswith("-"):
                run.append(args[i])
                i += 1
            last_run = (len(out), run)
            for v in run:
                out += [multi, v]
            continue
        if a in takes_value and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 2
            continue
        if not a.startswith("-") or a == "-":
            positional = True
        out.append(a)
        i += 1
    if not positional and last_run is not None and len(last_run[1]) > 1:
        at, run = last_run
        # the run's words sit at out[at:at + 2*len(run)] as (multi, value) pairs
        del out[at + 2 * (len(run) - 1) : at + 2 * len(run)]
        out.insert(0, run[-1])
    return out


class Word(click.types.StringParamType):
    """A plain word argument: its help shows the argument's metavar alone, not typer's
    ``<str>`` beside it."""

    def get_metavar(self, param: Any, ctx: click.Context) -> str | None:
        return ""


class BakeryCommand(TyperCommand):
    """Every command: usage lines name arguments as the README writes them (SERIES,
    [SERIES]), not typer's ``{SERIES}``; an error raised after the series was read
    (``ReportedError``) still writes its report where the command's ``--json`` asked."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReportedError as e:
            json_file = ctx.params.get("json_file")  # as typed: typer converts it later
            if isinstance(json_file, (str, Path)):
                try:
                    write_json(Path(json_file), e.report.to_json())
                except BakeryError as w:  # checked before the work: rare, still one line
                    e.error.message += f" (and the report was not written: {w.message})"
            raise e.error from None

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [
            p[1:-1] if p.startswith("{") and p.endswith("}") else p
            for p in super().collect_usage_pieces(ctx)
        ]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _one_of_each_pair(self, ctx, args)
        return super().parse_args(ctx, args)


def _one_of_each_pair(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """Both sides of an on/off flag (``--interpret --gpu``) are a usage error: click would
    keep the last one silently."""
    words = set(args[: args.index("--")] if "--" in args else args)
    for p in command.get_params(ctx):
        if isinstance(p, TyperOption) and p.is_flag and p.secondary_opts:
            on = [o for o in p.opts if o in words]
            off = [o for o in p.secondary_opts if o in words]
            if on and off:
                raise click.UsageError(f"{on[0]} and {off[0]}: give one of them, not both", ctx)


class ManyVllmCommand(BakeryCommand):
    """A command whose ``--vllm`` takes several values (matrix)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread(args, "--vllm", _takes_value(self, ctx)))


class PytestArgsCommand(BakeryCommand):
    """A command whose words after ``--`` are pytest's (verify)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        after: list[str] = []
        if "--" in args:
            at = args.index("--")
            args, after = args[:at], args[at + 1 :]
        args, theirs = _own_words(self, ctx, args)
        ctx.meta[PYTEST_ARGS] = [*theirs, *after]
        return super().parse_args(ctx, args)


def _own_words(
    command: click.Command, ctx: click.Context, args: list[str]
) -> tuple[list[str], list[str]]:
    """(the command's words, pytest's): an option the command does not know (``-q``,
    ``-x``) is pytest's, never the SERIES argument (``bakery verify -q --interpret``)."""
    known = {"--help", "-h"}
    for p in command.get_params(ctx):
        if isinstance(p, TyperOption):
            known.update(p.opts, p.secondary_opts)
    takes_value = _takes_value(command, ctx)
    own: list[str] = []
    theirs: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in takes_value and i + 1 < len(args):
            own += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith("-") and a != "-" and a.split("=", 1)[0] not in known:
            theirs.append(a)
        else:
            own.append(a)
        i += 1
    return own, theirs
