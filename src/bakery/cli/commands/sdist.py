"""``bakery sdist``: its options, its call into the core, and what it prints."""

from __future__ import annotations

import typer

from bakery.cli.common import package
from bakery.cli.console import context as _context
from bakery.cli.options import PackageOptions, command

app = typer.Typer()


@command(app, PackageOptions)
def sdist(o: PackageOptions) -> None:
    """Bake a series into the release's source distribution, with the local version; only
    a verified bake is written (verify runs where none is recorded; exit 1 if not)."""
    from bakery.commands import wheel as wheel_cmd

    package(
        lambda: wheel_cmd.sdist(
            _context(),
            o.series,
            vllm=o.vllm,
            out_dir=o.out,
            tree=o.tree,
            force=o.force,
            publish=wheel_cmd.Publish(o.interpret, o.unverified),
        )
    )
