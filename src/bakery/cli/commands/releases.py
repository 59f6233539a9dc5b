"""``bakery releases``: its options, its call into the core, and what it prints."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def releases(
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="VERSION", help="From this release on (0.30, v0.30.0)."),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Pre-releases too.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON list (for a CI matrix's fromJSON).")
    ] = False,
) -> None:
    """The vLLM releases on the package index (with a source distribution), oldest first."""
    from bakery.commands.releases import releases as found

    versions = found(since, pre)
    typer.echo(json.dumps(versions) if as_json else "\n".join(versions))
