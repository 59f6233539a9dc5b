"""``bakery list``: its options, its call into the core, and what it prints."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.parsing import (
    BakeryCommand,
    Word,
)

if TYPE_CHECKING:
    from bakery.commands.listing import SeriesRow

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
        series_list(human(), rows)


def series_list(console: Console, rows: list[SeriesRow]) -> None:
    for row in rows:
        console.print(
            _safe(
                f"{row.name}  base {row.base or '-'}  root {row.root or '(detected)'}  "
                f"strip {'(detected)' if row.strip is None else row.strip}  {row.path}"
            )
        )
        if row.description:
            console.print(f"  {_safe(str(row.description))}")
        if row.ports:
            console.print(_safe(f"  ports: {', '.join(row.ports)}"))
        for d in row.diffs:
            n = d.hunks
            console.print(_safe(f"  {d.name}  ({n} hunk{'' if n == 1 else 's'})"))
            for f in d.shown or d.files:
                console.print(_safe(f"    {f}"))
