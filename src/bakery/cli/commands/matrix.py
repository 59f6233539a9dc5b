"""``bakery matrix``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from bakery.cli.common import finish, json_target, preflight, strict_exit
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console, human
from bakery.cli.console import safe as _safe
from bakery.cli.options import InterpretOpt, JsonOpt, SeriesArg, StrictOpt, command
from bakery.cli.parsing import (
    ManyVllmCommand,
)
from bakery.errors import BakeryError
from bakery.model.report import DiffResult
from bakery.model.results import BakeStatus, VerifyState
from bakery.outputs import write_json

if TYPE_CHECKING:
    from bakery.reports.matrix import Row

app = typer.Typer()


@dataclass(frozen=True, kw_only=True)
class Options:
    series: SeriesArg
    vllm: Annotated[
        list[str] | None,
        typer.Option(
            "--vllm",
            metavar="SPEC...",
            help="Releases to bake: --vllm 0.30.0 0.32.0 (or repeat the option).",
        ),
    ] = None
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="VERSION",
            help="Every final release on the index from this version on.",
        ),
    ] = None
    pre: Annotated[bool, typer.Option("--pre", help="With --since: pre-releases too.")] = False
    do_verify: Annotated[bool, typer.Option("--verify", help="Verify each baked tree.")] = False
    interpret: InterpretOpt = None
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", min=1, metavar="N", help="Parallel workers (default: 2)."),
    ] = 2
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where the baked trees go (default: the project's build/matrix).",
        ),
    ] = None
    json_file: JsonOpt = None
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", metavar="FILE", help="Write a Markdown summary (for CI)."),
    ] = None
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML.")
    ] = None
    allow_fail: Annotated[
        bool,
        typer.Option(
            "--allow-fail",
            help="Exit 0 even when a release fails (not when a verify could not run).",
        ),
    ] = False
    strict: StrictOpt = False
    wheels: Annotated[
        bool,
        typer.Option("--wheels", help="Also write each release's wheels to <out>/wheels/."),
    ] = False


@command(app, Options, cls=ManyVllmCommand)
def matrix(o: Options) -> None:
    """Bake (and verify) a series on many vLLM releases, in parallel."""
    from bakery.commands import matrix as mx
    from bakery.patch.series import load_series
    from bakery.reports import matrix as reports

    json_target(o.json_file)
    preflight((o.json_file, "--json"), (o.markdown, "--markdown"), (o.junit, "--junit"))
    s = load_series(o.series)
    s.require_diffs()
    versions = mx.asked_versions(o.vllm or [], o.since, o.pre)
    if not versions:
        raise BakeryError("matrix needs --vllm VERSION... or --since VERSION")
    if not _Invocation.quiet:
        workers = f"{o.jobs} worker{'' if o.jobs == 1 else 's'}"
        err_console.print(_safe(f"baking {s.name} on {', '.join(versions)} with {workers}"))
    interpret = o.interpret
    if o.do_verify:
        from bakery.verifying.plan import choose_device

        interpret, where = choose_device(o.interpret)
        if not _Invocation.quiet:
            err_console.print(_safe(f"verifying each baked tree {where}"))
    rows = mx.run(
        _context(),
        str(s.path),
        versions,
        mx.MatrixOptions(
            out_root=(
                o.out if o.out is not None else _context().home / "build" / "matrix"
            ).absolute(),
            jobs=o.jobs,
            verify=o.do_verify,
            interpret=bool(interpret),
            wheels=o.wheels,
        ),
    )
    matrix_grid(human(), s.name, rows, quiet=_Invocation.quiet)
    matrix_wheels(human(), err_console, rows)
    if o.json_file:  # written before the reports, which may fail (a folder that is gone)
        write_json(o.json_file, reports.to_json(s.name, rows))
    reports.write_reports(s.name, rows, markdown=o.markdown, junit=o.junit)
    refused = [strict_exit(o.strict, r.diffs, label=f"{r.version}: ") for r in rows]
    for r in rows if o.strict else []:
        for line in r.port_stale:
            err_console.print(f"[red]strict:[/] {_safe(r.version)}: {_safe(line)}", markup=True)
            refused.append(1)
    finish(mx.exit_code(rows, o.allow_fail) or (1 if any(refused) else 0))


_SHORT = {
    "applied": "ok",
    "offset": "offset",
    "fuzz": "fuzz",
    "merged": "merged",
    "merged-syntax": "syntax",
    "ambiguous": "ambiguous",
    "already-applied": "upstream",
    "failed": "FAILED",
}


def _cell(diff: DiffResult) -> str:
    """A grid cell: the diff's hunk outcomes counted, in short words."""
    from bakery.reports.matrix import summarize

    parts = []
    for part in summarize(diff).split(", "):
        n, _, outcome = part.partition(" ")
        parts.append(f"{n} {_SHORT.get(outcome, outcome)}" if outcome else part)
    return " ".join(parts)


_GRID_STATUS: dict[BakeStatus, str] = {
    "baked": "[green]baked[/]",
    "checked": "[green]applies[/]",
    "conflict": "[red]conflict[/]",
}


_GRID_VERIFY: dict[VerifyState, str] = {
    "passed": "[green]passed[/]",
    "failed": "[red]failed[/]",
    "error": "[bold red]not verified[/]",
    "known-defects": "[yellow]known defects[/]",
}


def matrix_grid(console: Console, series: str, rows: list[Row], *, quiet: bool = False) -> None:
    """Releases by diffs. A diff's column is headed by its number (the names follow the
    grid), so that the grid stays readable at 80 columns; a release is never cut. quiet:
    one line per release instead."""
    from bakery.reports.matrix import diff_names

    if quiet:
        _matrix_lines(console, rows)
        return
    names = diff_names(rows)
    heads = [n.split("-", 1)[0] if "-" in n else n for n in names]
    if len(set(heads)) != len(heads):
        heads = [str(i) for i in range(1, len(names) + 1)]
    table = Table(title=_safe(f"{series}: releases x diffs"), title_justify="left")
    widest = max([len("release"), *(len(r.version) for r in rows)])
    table.add_column("release", no_wrap=True, min_width=widest)
    table.add_column("status", no_wrap=True)
    table.add_column("port", no_wrap=True)
    for h in heads:
        table.add_column(_safe(h), overflow="fold")
    table.add_column("verify", no_wrap=True)
    table.add_column("s", justify="right", no_wrap=True)
    from bakery.bake.strict import needs_review

    for r in rows:
        cells = {d.name: _cell(d) for d in r.diffs}
        status = _GRID_STATUS.get(r.status, f"[red]{_safe(r.status)}[/]")
        if r.status == "baked" and needs_review(r.diffs):
            status = "[yellow]baked, review[/]"  # merged/fuzz/ambiguous: never a plain pass
        table.add_row(
            _safe(r.version),
            status,
            ("[yellow]stale[/]" if r.port_stale else "yes") if r.port else "-",
            *[_safe(cells.get(n, "-")) for n in names],
            _GRID_VERIFY.get(r.verify, "-")
            if r.verify
            else _safe(r.proof.state if r.proof else "-"),
            f"{r.seconds:.1f}",
        )
    console.print(table)
    _matrix_notes(console, rows, [(h, n) for h, n in zip(heads, names, strict=True) if h != n])


def matrix_wheels(console: Console, err: Console, rows: list[Row]) -> None:
    """matrix --wheels: each wheel written, and why a release has none."""
    for r in rows:
        for w in r.wheels:
            console.print(f"wrote {_safe(w)}", soft_wrap=True)
        if r.wheel_error:
            err.print(f"[red]{_safe(r.version)}:[/] {_safe(r.wheel_error)}", soft_wrap=True)


def _matrix_lines(console: Console, rows: list[Row]) -> None:
    for r in rows:
        verify = f", verify {r.verify}" if r.verify else ""
        error = f": {r.error}" if r.error else ""
        console.print(_safe(f"{r.version} {r.status}{verify}{error}"), soft_wrap=True)
        if r.verify == "failed":
            _matrix_failed(console, r)


def _matrix_notes(console: Console, rows: list[Row], heads: list[tuple[str, str]]) -> None:
    """Under the grid: the diffs' full names, the ports used, the errors."""
    for h, n in heads:
        console.print(_safe(f"  {h}: {n}"), soft_wrap=True)
    for r in rows:
        if r.port:
            console.print(_safe(f"  {r.version}: port {r.port}"), soft_wrap=True)
        for line in r.port_stale:
            console.print(f"[yellow]  {_safe(r.version)}:[/] {_safe(line)}", soft_wrap=True)
    for r in rows:
        if r.error:
            console.print(f"[red]{_safe(r.version)}:[/] {_safe(r.error)}", soft_wrap=True)
        if r.verify == "error":
            console.print(f"[red]{_safe(r.version)}:[/] {_safe(r.verify_cell)}", soft_wrap=True)
        if r.verify == "known-defects":
            console.print(f"[yellow]{_safe(r.version)}:[/] {_safe(r.verify_cell)}", soft_wrap=True)
        if r.verify == "failed":
            _matrix_failed(console, r)


#: Failed tests named per release under the matrix (the log has them all).
_FAILED_SHOWN = 10


def _matrix_failed(console: Console, r: Row) -> None:
    """A release whose tests failed: which tests, and the log that has their output."""
    names = r.failed_tests
    count = f"{len(names)} " if names else ""
    console.print(f"[red]{_safe(r.version)}:[/] {count}tests failed", soft_wrap=True)
    for name in names[:_FAILED_SHOWN]:
        console.print(_safe(f"  {name}"), soft_wrap=True)
    if len(names) > _FAILED_SHOWN:
        console.print(f"  and {len(names) - _FAILED_SHOWN} more", soft_wrap=True)
    if r.verify_log:
        console.print(_safe(f"  log: {r.verify_log}"), soft_wrap=True)
