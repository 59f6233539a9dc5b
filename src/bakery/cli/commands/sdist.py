"""``bakery sdist``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli.common import package
from bakery.cli.console import context as _context
from bakery.cli.options import InterpretOpt, PackageOut, SeriesArg, TreeOpt, UnverifiedOpt
from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def sdist(
    series: SeriesArg,
    vllm: Annotated[
        str,
        typer.Option("--vllm", metavar="VERSION", help="The release (X.Y.Z) whose sdist to bake."),
    ],
    out: PackageOut = Path("dist"),
    tree: TreeOpt = None,
    force: Annotated[bool, typer.Option("--force", help="As apply --force.")] = False,
    interpret: InterpretOpt = None,
    unverified: UnverifiedOpt = False,
) -> None:
    """Bake a series into the release's source distribution, with the local version; only
    a verified bake is written (verify runs where none is recorded; exit 1 if not)."""
    from bakery.commands import wheel as wheel_cmd

    package(
        lambda: wheel_cmd.sdist(
            _context(),
            series,
            vllm=vllm,
            out_dir=out,
            tree=tree,
            force=force,
            publish=wheel_cmd.Publish(interpret, unverified),
        )
    )
