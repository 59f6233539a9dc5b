"""``bakery diff-ports``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from typing import Annotated

import typer

from bakery.cli import render
from bakery.cli.common import json_target, preflight
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)
from bakery.outputs import write_json

app = typer.Typer()


@app.command("diff-ports", cls=BakeryCommand)
def diff_ports(
    series: SeriesArg,
    vllm: Annotated[
        str | None, typer.Option("--vllm", metavar="VERSION", help="Only this release's port.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="REV[..REV]",
            help="Show how each port changed since a commit of the project (or between two).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Review the ports: per release, how the port differs from the series, hunk by hunk
    (= same change, ! changed, < series only, > port only), as git range-diff pairs two
    versions of a series."""
    from bakery.porting.review import diff_ports as run_review

    json_target(json_file)
    preflight((json_file, "--json"))
    views = run_review(_context(), series, vllm=vllm, since=since)
    if json_file is not None:
        write_json(json_file, {"series": series, "ports": [v.to_json() for v in views]})
    render.port_review(human(), views)
