"""``bakery bisect``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import render
from bakery.cli.common import finish, json_target, preflight
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def bisect(
    series: SeriesArg,
    vllm: Annotated[
        str, typer.Option("--vllm", metavar="git+URL", help="The upstream repository.")
    ],
    good: Annotated[
        str, typer.Option("--good", metavar="REF", help="A commit where the series bakes.")
    ],
    bad: Annotated[
        str, typer.Option("--bad", metavar="REF", help="A later commit where it does not.")
    ],
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Also run the series' tests on each commit's bake."),
    ] = False,
    interpret: Annotated[
        bool,
        typer.Option("--interpret/--gpu", help="Verify on the CPU (Triton interpreter) or a GPU."),
    ] = True,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Scratch folder for the bakes (default: the project's build/bisect).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Name the first upstream commit (first-parent, from --good to --bad) that breaks
    the series: on apply, or with --verify on apply plus the series' tests."""
    from bakery.commands.bisect import bisect as run_bisect

    json_target(json_file)
    preflight((json_file, "--json"))
    result = run_bisect(
        _context(),
        series,
        vllm=vllm,
        good=good,
        bad=bad,
        verify=verify,
        interpret=interpret,
        out_root=out,
    )
    render.bisect_result(human(), result)
    finish(0 if result.ok else 1, json_file, result)
