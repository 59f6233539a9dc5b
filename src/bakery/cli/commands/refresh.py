"""``bakery refresh``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli import hints
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console, human
from bakery.cli.console import safe as _safe
from bakery.cli.options import SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

if TYPE_CHECKING:
    from bakery.porting.refresh import Refreshed

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
            help="Put the edits made since the bake (and edits to files no diff "
            "touches) into a new diff at the end (NAME.diff, numbered after the last).",
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
    refresh_done(human(), done, hints.after_refresh(done, series, tree), quiet=_Invocation.quiet)


def refresh_done(
    console: Console, done: Refreshed, next_steps: list[str], *, quiet: bool = False
) -> None:
    """What refresh wrote: the folder, a diffstat per diff, and the next step."""
    from bakery.bake.staging import display_path

    console.print(f"refreshed {_safe(str(display_path(done.folder)))}", soft_wrap=True)
    if not quiet:
        for name, stat in done.diffstat:
            console.print(_safe(f"  {name}  {stat}"), soft_wrap=True)
    if next_steps:
        console.print("next:", soft_wrap=True)
        for step in next_steps:
            console.print(f"  {_safe(step)}", soft_wrap=True)
