"""``bakery list``: its options, its call into the core, and what it prints."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from bakery.cli import render
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.parsing import (
    BakeryCommand,
    Word,
)

app = typer.Typer()


@app.command("list", cls=BakeryCommand)
def list_(
    series: Annotated[
        str | None,
        typer.Argument(metavar="[SERIES]", click_type=Word(), help="One series; default: all."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The series, their diffs, the files they touch, and their base release."""
    from bakery.commands import listing as commands

    rows = commands.list_series(_context(), series)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        render.series_list(human(), rows)
