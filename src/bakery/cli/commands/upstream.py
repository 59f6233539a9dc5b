"""``bakery upstream``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from typing import Annotated

import typer

from bakery.cli import render
from bakery.cli.common import finish, json_target
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def upstream(
    series: SeriesArg,
    vllm: Annotated[
        str,
        typer.Option(
            "--vllm",
            metavar="SPEC",
            help="The branch to watch: git+URL@REF (e.g. vLLM's main).",
        ),
    ],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="VERSION",
            help="The release to compare with (default: the last tag before REF).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Check a series against a vLLM branch, and list the upstream commits since the last
    release that touched its hunks or the names its code uses."""
    from bakery.commands import upstream as up

    json_target(json_file)
    result = up.upstream(
        _context(),
        series,
        vllm,
        since=since,
    )
    render.bake_report(human(), result.check)
    render.upstream_commits(human(), result)
    finish(0 if result.check.ok else 1, json_file, result)
