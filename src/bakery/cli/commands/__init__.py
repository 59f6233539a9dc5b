"""One module per command, loaded when the command runs (as pip's ``commands_dict``):
``bakery apply`` imports ``bakery.cli.commands.apply`` and no other command's code.

A command is a module here with a ``typer.Typer()`` named ``app`` holding one command
(its options, its call into the core, what it prints), and one line in :data:`COMMANDS`.
A group of commands (``cache``, ``ci``) is a typer app of its own, named the same way.
"""

from __future__ import annotations

import importlib

import click
import typer

#: Every command of ``bakery``: its name and ``module[:attribute]`` (default ``app``), in
#: the order ``bakery --help`` lists them.
COMMANDS: dict[str, str] = {
    "init": "bakery.cli.commands.init",
    "apply": "bakery.cli.commands.apply",
    "check": "bakery.cli.commands.check",
    "list": "bakery.cli.commands.list",
    "verify": "bakery.cli.commands.verify",
    "doctor": "bakery.cli.commands.doctor",
    "matrix": "bakery.cli.commands.matrix",
    "wheel": "bakery.cli.commands.wheel",
    "sdist": "bakery.cli.commands.sdist",
    "releases": "bakery.cli.commands.releases",
    "refresh": "bakery.cli.commands.refresh",
    "summarize": "bakery.cli.commands.summarize",
    "port": "bakery.cli.commands.port",
    "diff-ports": "bakery.cli.commands.diff_ports",
    "bisect": "bakery.cli.commands.bisect",
    "upstream": "bakery.cli.commands.upstream",
    "cache": "bakery.cli.cache:cache_app",
    "ci": "bakery.cli.ci:ci_app",
}


def load(name: str) -> click.Command | None:
    """The click command of ``name`` (its module imported now), or None for no such command."""
    where = COMMANDS.get(name)
    if where is None:
        return None
    module, _, attribute = where.partition(":")
    app: typer.Typer = getattr(importlib.import_module(module), attribute or "app")
    found: click.Command
    if len(app.registered_commands) == 1 and not app.registered_groups:
        # one command; typer.main.get_command would add the root's completion options
        found = typer.main.get_command_from_info(
            app.registered_commands[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
    else:
        found = typer.main.get_group(app)
    found.name = name
    return found
