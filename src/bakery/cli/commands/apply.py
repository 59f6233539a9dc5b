"""``bakery apply``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import hints
from bakery.cli.common import json_target, run_bake, show_report, strict_exit, strict_port_exit
from bakery.cli.console import context as _context
from bakery.cli.options import (
    AllowDirtyOpt,
    FuzzOpt,
    JsonOpt,
    NoMergeOpt,
    NoPortOpt,
    SeriesArg,
    StrictOpt,
    VllmOpt,
)
from bakery.cli.parsing import (
    BakeryCommand,
)

app = typer.Typer()


@app.command(cls=BakeryCommand)
def apply(
    series: SeriesArg,
    vllm: VllmOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where the baked tree goes (default build/<series>-<version>/).",
        ),
    ] = None,
    json_file: JsonOpt = None,
    fuzz: FuzzOpt = 0,
    keep_failed: Annotated[
        bool,
        typer.Option(
            "--keep-failed",
            help="On a conflict, write the attempt to <out>.failed/: a git tree with the "
            "diffs before the failing one as commits and the conflicts in git's index.",
        ),
    ] = False,
    allow_dirty: AllowDirtyOpt = False,
    no_port: NoPortOpt = False,
    no_merge: NoMergeOpt = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace a baked tree at --out even if it has local changes."),
    ] = False,
    strict: StrictOpt = False,
    with_fixes: Annotated[
        bool,
        typer.Option(
            "--with-fixes", help="Also apply the series' proposed fixes (fixes/), after its diffs."
        ),
    ] = False,
) -> None:
    """Apply a series to a pristine vLLM tree, into a new baked tree."""
    from bakery.commands import apply as commands

    json_target(json_file)
    report = run_bake(
        lambda: commands.apply(
            _context(),
            series,
            commands.ApplyOptions(
                vllm=vllm,
                fuzz=fuzz,
                allow_dirty=allow_dirty,
                use_port=not no_port,
                merge=not no_merge,
                with_fixes=with_fixes,
                out=out,
                keep_failed=keep_failed,
                force=force,
            ),
        ),
        json_file,
    )
    asked = hints.Asked(series, vllm, no_port=no_port, out=out, fuzz=fuzz, no_merge=no_merge)
    show_report(report, hints.after_bake(report, asked))
    code = 0 if report.status == "baked" else 1
    code = code or strict_exit(strict, report.diffs, report)
    raise typer.Exit(code=code or strict_port_exit(strict, report))
