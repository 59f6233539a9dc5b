"""``bakery refresh``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import hints, render
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console, human
from bakery.cli.console import safe as _safe
from bakery.cli.options import SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def refresh(
    series: SeriesArg,
    tree: Annotated[Path, typer.Option("--tree", metavar="DIR", help="The edited baked tree.")],
    release: Annotated[
        str | None,
        typer.Option(
            "--release",
            metavar="VERSION",
            help="The release the tree was baked from (checked against the tree's manifest).",
        ),
    ] = None,
    into: Annotated[
        str | None,
        typer.Option(
            "--into",
            metavar="NN-NAME.diff",
            help="Put edits to files no diff touches into this diff of the series.",
        ),
    ] = None,
    new_diff: Annotated[
        str | None,
        typer.Option(
            "--new-diff",
            metavar="NAME",
            help="Put edits to files no diff touches into a new diff at the end "
            "(NAME.diff, numbered after the last).",
        ),
    ] = None,
) -> None:
    """Turn an edited baked tree back into diffs, as quilt refresh does: a tree of the
    series' base release refreshes launcher/<series>/diffs/, a tree of another release
    its port in patches/<series>/<release>/."""
    from bakery.porting import worktree

    done = worktree.refresh(_context(), series, tree, release, into=into, new_diff=new_diff)
    for n in done.notes:
        err_console.print(f"[dim]{_safe(n)}[/]", markup=True, soft_wrap=True)
    render.refresh_done(
        human(), done, hints.after_refresh(done, series, tree), quiet=_Invocation.quiet
    )
