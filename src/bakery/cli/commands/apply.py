"""``bakery apply``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import hints
from bakery.cli.common import (
    finish,
    json_target,
    run_bake,
    show_report,
    strict_exit,
    strict_port_exit,
)
from bakery.cli.console import context as _context
from bakery.cli.options import (
    BakeOptions,
    command,
)

app = typer.Typer()


@dataclass(frozen=True, kw_only=True)
class Options(BakeOptions):
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where the baked tree goes (default build/<series>-<version>/).",
        ),
    ] = None
    keep_failed: Annotated[
        bool,
        typer.Option(
            "--keep-failed",
            help="On a conflict, write the attempt to <out>.failed/: a git tree with the "
            "diffs before the failing one as commits and the conflicts in git's index.",
        ),
    ] = False
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace a baked tree at --out even if it has local changes."),
    ] = False
    with_fixes: Annotated[
        bool,
        typer.Option(
            "--with-fixes", help="Also apply the series' proposed fixes (fixes/), after its diffs."
        ),
    ] = False


@command(app, Options)
def apply(o: Options) -> None:
    """Apply a series to a pristine vLLM tree, into a new baked tree."""
    from bakery.commands import apply as commands

    json_target(o.json_file)
    report = run_bake(
        lambda: commands.apply(
            _context(),
            o.series,
            commands.ApplyOptions(
                vllm=o.vllm,
                fuzz=o.fuzz,
                allow_dirty=o.allow_dirty,
                use_port=not o.no_port,
                merge=not o.no_merge,
                with_fixes=o.with_fixes,
                out=o.out,
                keep_failed=o.keep_failed,
                force=o.force,
            ),
        ),
        o.json_file,
    )
    asked = hints.Asked(
        o.series, o.vllm, no_port=o.no_port, out=o.out, fuzz=o.fuzz, no_merge=o.no_merge
    )
    show_report(report, hints.after_bake(report, asked), o.series)
    code = 0 if report.status == "baked" else 1
    code = code or strict_exit(o.strict, report.diffs, report)
    finish(code or strict_port_exit(o.strict, report))
