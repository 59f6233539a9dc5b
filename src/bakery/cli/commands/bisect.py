"""``bakery bisect``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli.common import finish, json_target, preflight
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.options import JsonOpt, SeriesArg
from bakery.cli.parsing import (
    BakeryCommand,
)

if TYPE_CHECKING:
    from bakery.commands.bisect import BisectResult

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
    bisect_result(human(), result)
    finish(0 if result.ok else 1, json_file, result)


def bisect_result(console: Console, result: BisectResult) -> None:
    """The steps, then the culprit with its hunks and warnings, or why there is none."""
    console.print(
        _safe(
            f"{result.series} bisected on {result.mode} over {result.commits} commits of "
            f"{result.source}"
        ),
        soft_wrap=True,
    )
    for s in result.steps:
        mark = {"good": "[green]good[/]", "bad": "[red]bad[/]"}.get(s.verdict, "[yellow]flaky[/]")
        why = f"  {_safe(s.why)}" if s.why else ""
        console.print(f"  {s.commit[:12]} {mark} {_safe(s.subject)}{why}", soft_wrap=True)
    if result.culprit is None:
        console.print(f"[bold]no culprit[/]: {_safe(result.note or '')}", soft_wrap=True)
        return
    c = result.culprit
    console.print(
        f"[bold red]first bad commit[/] {c.commit} {_safe(c.subject)}: {_safe(c.why)}",
        soft_wrap=True,
    )
    for h in result.hunks:
        why = f" ({h['reason']})" if h.get("reason") else ""
        console.print(
            _safe(f"  {h['diff']}: {h['path']} hunk {h['hunk']}: {h['status']}{why}"),
            soft_wrap=True,
        )
    for w in result.warnings:
        console.print(f"  [yellow]warning:[/] {_safe(w)}", soft_wrap=True)
    for u in result.unsure:
        console.print(
            f"  [yellow]unsure:[/] {u.commit[:12]} {_safe(u.subject)} ({_safe(u.why)}): "
            "the culprit may be this commit",
            soft_wrap=True,
        )
