"""``bakery diff-ports``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli.common import json_target, preflight
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)
from bakery.outputs import write_json

if TYPE_CHECKING:
    from bakery.porting.review import PortView

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
    port_review(human(), views)


def port_review(console: Console, views: list[PortView]) -> None:
    """bakery diff-ports: per release and file, each hunk pair range-diff style."""
    for v in views:
        c = v.counts()
        console.print(
            f"[bold]{_safe(v.release)}[/]: {_safe(v.left)} .. {_safe(v.right)}: {c['=']} same, "
            f"{c['!']} changed, {c['>']} only in the port, {c['<']} only in the series",
            soft_wrap=True,
        )
        for f in v.files:
            console.print(f"  {_safe(f.diff)}: {_safe(f.path)}", soft_wrap=True)
            for p in f.pairs:
                left = str(p.left) if p.left is not None else "-"
                right = str(p.right) if p.right is not None else "-"
                console.print(
                    f"    {left:>3}: {_REVIEW_MARK[p.mark]} {right:>3}: {_safe(p.header)}",
                    soft_wrap=True,
                )
                for line in p.interdiff:
                    console.print(f"        {_safe(line)}", soft_wrap=True, highlight=False)


_REVIEW_MARK = {"=": "[dim]=[/]", "!": "[yellow]![/]", "<": "[red]<[/]", ">": "[green]>[/]"}
