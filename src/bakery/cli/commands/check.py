"""``bakery check``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
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
from bakery.cli.console import err_console
from bakery.cli.console import safe as _safe
from bakery.cli.options import (
    BakeOptions,
    command,
)

app = typer.Typer()


@dataclass(frozen=True, kw_only=True)
class Options(BakeOptions):
    up_to_date: Annotated[
        bool,
        typer.Option(
            "--up-to-date",
            help="Also fail when a port's committed diffs do not reproduce from "
            "their own bake (for CI); with --vllm VERSION, only that release's port.",
        ),
    ] = False


@command(app, Options)
def check(o: Options) -> None:
    """The same run as apply, without writing a tree."""
    from bakery.commands import apply as commands

    json_target(o.json_file)
    report = run_bake(
        lambda: commands.check(
            _context(),
            o.series,
            commands.BakeOptions(
                vllm=o.vllm,
                fuzz=o.fuzz,
                allow_dirty=o.allow_dirty,
                use_port=not o.no_port,
                merge=not o.no_merge,
            ),
        ),
        o.json_file,
    )
    asked = hints.Asked(o.series, o.vllm, no_port=o.no_port, fuzz=o.fuzz, no_merge=o.no_merge)
    show_report(report, hints.after_bake(report, asked), o.series)
    code = 0 if report.ok else 1
    code = code or strict_exit(o.strict, report.diffs, report)
    code = code or strict_port_exit(o.strict, report)
    if o.up_to_date and code == 0:
        stale = commands.up_to_date(_context(), o.series, vllm=o.vllm)
        for line in stale:
            err_console.print(f"[red]not up to date:[/] {_safe(line)}", markup=True)
        if stale:
            err_console.print("next:", soft_wrap=True)
            for step in hints.after_stale(o.series, o.vllm):
                err_console.print(f"  {_safe(step)}", soft_wrap=True)
        code = 1 if stale else 0
    finish(code)
