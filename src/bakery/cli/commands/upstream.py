"""``bakery upstream``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli import render
from bakery.cli.common import finish, json_target
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

if TYPE_CHECKING:
    from bakery.commands.upstream import UpstreamReport

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
    upstream_commits(human(), result)
    finish(0 if result.check.ok else 1, json_file, result)


def upstream_commits(console: Console, result: UpstreamReport) -> None:
    """The commits since the last release that touched what the series relies on."""
    n = len(result.commits)
    console.print(
        _safe(
            f"{n} upstream commit{'s' if n != 1 else ''} since {result.since} "
            f"(up to {result.commit[:12]}) touched what the series relies on"
            + (":" if n else f" ({len(result.regions)} regions looked at)")
        ),
        soft_wrap=True,
    )
    for c in result.commits:
        console.print(f"  [bold]{c.sha[:12]}[/] {_safe(c.subject)}", soft_wrap=True)
        for t in c.touches:
            console.print(f"    {_safe(t)}", soft_wrap=True)
