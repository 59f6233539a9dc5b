"""``bakery wheel``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from bakery.cli.common import package
from bakery.cli.console import context as _context
from bakery.cli.options import PackageOptions, command

app = typer.Typer()


@dataclass(frozen=True, kw_only=True)
class Options(PackageOptions):
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            metavar="ARCH",
            help="x86_64, aarch64 or all (default: this machine's).",
        ),
    ] = None


@command(app, Options)
def wheel(o: Options) -> None:
    """Bake a series into the release's upstream wheel: vllm-X+SERIES.HASH-TAGS.whl, no
    compiler needed. Refused (exit 2) when the series changes what the wheel compiles;
    only a verified bake is written (verify runs where none is recorded; exit 1 if not)."""
    from bakery.commands import wheel as wheel_cmd

    package(
        lambda: wheel_cmd.wheel(
            _context(),
            o.series,
            vllm=o.vllm,
            platform=o.platform,
            out_dir=o.out,
            tree=o.tree,
            force=o.force,
            publish=wheel_cmd.Publish(o.interpret, o.unverified),
        )
    )
