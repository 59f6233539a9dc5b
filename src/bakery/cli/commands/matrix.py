"""``bakery matrix``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import render
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
from bakery.outputs import write_json

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
        err_console.print(_safe(f"baking {s.name} on {', '.join(versions)} with {o.jobs} workers"))
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
    render.matrix_grid(human(), s.name, rows, quiet=_Invocation.quiet)
    render.matrix_wheels(human(), err_console, rows)
    if o.json_file:  # written before the reports, which may fail (a folder that is gone)
        write_json(o.json_file, reports.to_json(s.name, rows))
    reports.write_reports(s.name, rows, markdown=o.markdown, junit=o.junit)
    refused = [strict_exit(o.strict, r.diffs, label=f"{r.version}: ") for r in rows]
    for r in rows if o.strict else []:
        for line in r.port_stale:
            err_console.print(f"[red]strict:[/] {_safe(r.version)}: {_safe(line)}", markup=True)
            refused.append(1)
    finish(mx.exit_code(rows, o.allow_fail) or (1 if any(refused) else 0))
