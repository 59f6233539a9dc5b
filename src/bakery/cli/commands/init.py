"""``bakery init``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.parsing import (
    BakeryCommand,
    Word,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def init(
    series: Annotated[
        str,
        typer.Argument(
            metavar="SERIES", click_type=Word(), help="The new series' name (launcher/SERIES)."
        ),
    ],
    vllm: Annotated[
        str,
        typer.Option(
            "--vllm", metavar="VERSION", help="The release the diffs are made against (base)."
        ),
    ],
    tree: Annotated[
        Path | None,
        typer.Option(
            "--tree",
            metavar="DIR",
            help="Where the pristine working tree goes, inside the project (default work/SERIES/).",
        ),
    ] = None,
    no_tree: Annotated[
        bool, typer.Option("--no-tree", help="Write the series only, no working tree.")
    ] = False,
) -> None:
    """Start a series: launcher/SERIES/ (series.toml, diffs/, an example test) and a
    pristine git checkout of the release to edit; refresh --new-diff makes the diffs."""
    from bakery.commands.init import init as run_init

    done = run_init(_context(), series, vllm, tree=tree, with_tree=not no_tree)
    console = human()
    console.print(f"series {_safe(series)} (base vLLM {done.base}) in {_safe(str(done.series))}")
    if done.tree is not None:
        console.print(f"pristine working tree: {_safe(str(done.tree))}")
    if done.gitignore is not None:
        console.print(
            f"wrote {_safe(str(done.gitignore))} (build/, dist/, reports/: not committed)"
        )
    if not _Invocation.quiet:
        console.print("next:")
        for step in done.next_steps:
            console.print(f"  {_safe(step)}", soft_wrap=True)
