"""bakery's command line: thin typer commands over the core (see CONTRACT.md).

Only this layer prints, and only this layer turns errors into exit codes: the core raises
BakeryError subclasses, which become one line on stderr and the contract's exit code.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from bakery import __version__
from bakery.bake.report import BakeReport, write_json
from bakery.cli import render
from bakery.errors import BakeryError

app = typer.Typer(
    name="bakery",
    help="Bake patched vLLM trees from ordered series of plain diffs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out_console = Console(highlight=False, soft_wrap=False)
err_console = Console(stderr=True, highlight=False)


def fail(err: BakeryError) -> NoReturn:
    err_console.print(
        f"[bold red]error:[/] {escape(err.message)}", markup=True, highlight=False, soft_wrap=True
    )
    raise typer.Exit(code=err.exit_code)


def _version_callback(value: bool) -> None:
    if value:
        out_console.print(f"bakery {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Show the version."
        ),
    ] = False,
) -> None:
    """Bake patched vLLM trees from ordered series of plain diffs."""


def _events(event: str, detail: str) -> None:
    err_console.print(
        f"[dim]{escape(detail)}[/]" if event == "detected" else escape(detail),
        markup=True,
        highlight=False,
        soft_wrap=True,
    )


SeriesArg = Annotated[
    str, typer.Argument(help="A series under launcher/ (dcp2), or a path to a series folder.")
]
VllmOpt = Annotated[
    str | None,
    typer.Option(
        "--vllm",
        help="A release (0.30.0), a local tree or checkout, or git+URL@REF. "
        "Default: the series' base release.",
    ),
]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the report as JSON here.")]
FuzzOpt = Annotated[
    int,
    typer.Option(
        "--fuzz",
        min=0,
        max=3,
        help="Context lines a hunk may lose to match (default 0: never guess).",
    ),
]


@app.command()
def apply(
    series: SeriesArg,
    vllm: VllmOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Where the baked tree goes (default build/<series>-<version>/)."
        ),
    ] = None,
    json_file: JsonOpt = None,
    fuzz: FuzzOpt = 0,
    keep_failed: Annotated[
        bool,
        typer.Option(
            "--keep-failed",
            help="On a conflict, write the attempt to <out>.failed/ with .rej "
            "files or conflict markers.",
        ),
    ] = False,
    allow_dirty: Annotated[
        bool,
        typer.Option("--allow-dirty", help="Accept a local git checkout with uncommitted changes."),
    ] = False,
    no_port: Annotated[
        bool,
        typer.Option("--no-port", help="Use the series' own diffs even where patches/ has a port."),
    ] = False,
    no_merge: Annotated[
        bool,
        typer.Option(
            "--no-merge", help="Do not fall back to a three-way merge against the base release."
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace a baked tree at --out even if it has local changes."),
    ] = False,
    with_fixes: Annotated[
        bool,
        typer.Option(
            "--with-fixes", help="Also apply the series' proposed fixes (fixes/), after its diffs."
        ),
    ] = False,
) -> None:
    """Apply a series to a pristine vLLM tree, into a new baked tree."""
    from bakery.commands import bake as commands

    report = _run_bake(
        lambda: commands.apply(
            series,
            vllm=vllm,
            out=out,
            fuzz=fuzz,
            keep_failed=keep_failed,
            allow_dirty=allow_dirty,
            use_port=not no_port,
            merge=not no_merge,
            force=force,
            events=_events,
            progress=render.download_progress(err_console),
            with_fixes=with_fixes,
        ),
        json_file,
    )
    render.bake_report(out_console, report)
    raise typer.Exit(code=0 if report.status == "baked" else 1)


@app.command()
def check(
    series: SeriesArg,
    vllm: VllmOpt = None,
    json_file: JsonOpt = None,
    fuzz: FuzzOpt = 0,
    allow_dirty: Annotated[bool, typer.Option("--allow-dirty")] = False,
    no_port: Annotated[bool, typer.Option("--no-port")] = False,
    no_merge: Annotated[bool, typer.Option("--no-merge")] = False,
    up_to_date: Annotated[
        bool,
        typer.Option(
            "--up-to-date",
            help="Also fail when a port's committed diffs do not reproduce from "
            "their own bake (for CI).",
        ),
    ] = False,
) -> None:
    """The same run as apply, without writing a tree."""
    from bakery.commands import bake as commands

    report = _run_bake(
        lambda: commands.check(
            series,
            vllm=vllm,
            fuzz=fuzz,
            allow_dirty=allow_dirty,
            use_port=not no_port,
            merge=not no_merge,
            events=_events,
            progress=render.download_progress(err_console),
        ),
        json_file,
    )
    render.bake_report(out_console, report)
    code = 0 if report.ok else 1
    if up_to_date and code == 0:
        try:
            stale = commands.up_to_date(series, events=_events)
        except BakeryError as e:
            fail(e)
        for line in stale:
            err_console.print(f"[red]not up to date:[/] {escape(line)}", markup=True)
        code = 1 if stale else 0
    raise typer.Exit(code=code)


def _run_bake(fn: object, json_file: Path | None) -> BakeReport:
    from bakery.commands.bake import ReportedError

    try:
        report = fn()  # type: ignore[operator]
    except ReportedError as e:
        if json_file is not None:
            write_json(json_file, e.report.to_json())
        fail(e.error)
    except BakeryError as e:
        fail(e)
    if json_file is not None:
        write_json(json_file, report.to_json())
    return report  # type: ignore[no-any-return]


@app.command("list")
def list_(
    series: Annotated[str | None, typer.Argument(help="One series; default: all.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The series, their diffs, the files they touch, and their base release."""
    from bakery.commands import bake as commands

    try:
        rows = commands.list_series(series)
    except BakeryError as e:
        fail(e)
    if as_json:
        out_console.print_json(json.dumps(rows))
    else:
        render.series_list(out_console, rows)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def verify(
    ctx: typer.Context,
    series: Annotated[str, typer.Argument(help="The series whose bundled tests run.")] = "dcp2",
    tree: Annotated[
        Path | None,
        typer.Option("--tree", help="The baked tree (default: the last one baked for the series)."),
    ] = None,
    interpret: Annotated[
        bool, typer.Option("--interpret", help="CPU only: Triton's interpreter and gloo.")
    ] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML file.")] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Test worker processes (pytest-xdist; default: the cores, up to 4, "
            "with --interpret, else 1).",
        ),
    ] = None,
) -> None:
    """Run the series' bundled tests against a baked tree's own code. Arguments after --
    go to pytest."""
    from bakery.commands import bake as commands

    try:
        result, edited = commands.verify(
            series,
            tree=tree,
            interpret=interpret,
            junit=junit,
            pytest_args=list(ctx.args),
            jobs=jobs,
        )
    except BakeryError as e:
        fail(e)
    render.verify_summary(err_console, result, edited)
    raise typer.Exit(code=result.exit_code)


@app.command()
def matrix(
    series: SeriesArg,
    vllm: Annotated[
        list[str] | None,
        typer.Option("--vllm", help="Releases to bake (repeat the option, or list them after it)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Every final release on the index from this version on."),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="With --since: pre-releases too.")] = False,
    do_verify: Annotated[bool, typer.Option("--verify", help="Verify each baked tree.")] = False,
    interpret: Annotated[
        bool,
        typer.Option(
            "--interpret/--gpu", help="Verify on the CPU (Triton interpreter) or on a GPU."
        ),
    ] = True,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Parallel workers (default: 2).")
    ] = 2,
    out: Annotated[Path, typer.Option("--out", help="Where the baked trees go.")] = Path(
        "build/matrix"
    ),
    json_file: JsonOpt = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown summary (for CI).")
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML.")] = None,
    allow_fail: Annotated[
        bool, typer.Option("--allow-fail", help="Exit 0 even when a release fails.")
    ] = False,
) -> None:
    """Bake (and verify) a series on many vLLM releases, in parallel."""
    from bakery.commands import matrix as mx
    from bakery.patch.series import load_series, project_root

    try:
        s = load_series(series)
        versions = list(vllm or [])
        if since:
            versions += [v for v in mx.select_versions(since, pre) if v not in versions]
        if not versions:
            raise BakeryError("matrix needs --vllm VERSION... or --since VERSION")
        err_console.print(escape(f"baking {s.name} on {', '.join(versions)} with {jobs} workers"))
        rows = mx.run(
            str(s.path),
            versions,
            out_root=out.absolute(),
            jobs=jobs,
            verify=do_verify,
            interpret=interpret,
            home=project_root(),
        )
    except BakeryError as e:
        fail(e)
    render.matrix_grid(out_console, s.name, rows)
    if json_file:
        write_json(json_file, mx.to_json(s.name, rows))
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(mx.to_markdown(s.name, rows))
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_bytes(mx.to_junit(s.name, rows))
    ok = all(r.ok for r in rows)
    raise typer.Exit(code=0 if ok or allow_fail else 1)


@app.command()
def refresh(
    series: SeriesArg,
    tree: Annotated[Path, typer.Option("--tree", help="The edited baked tree.")],
    release: Annotated[
        str | None,
        typer.Option("--release", help="The release the port is for (default: the tree's)."),
    ] = None,
) -> None:
    """Turn an edited baked tree back into the series' diffs, as a port in
    patches/<series>/<release>/."""
    from bakery.bake import refresh as refresh_mod

    try:
        port, notes = refresh_mod.refresh(series, tree, release, events=_events)
    except BakeryError as e:
        fail(e)
    for n in notes:
        err_console.print(f"[dim]{escape(n)}[/]", markup=True)
    out_console.print(f"wrote port {escape(str(port))}")


@app.command()
def summarize(
    reports: Annotated[list[Path], typer.Argument(help="Matrix or apply JSON reports.")],
    markdown: Annotated[Path | None, typer.Option("--markdown")] = None,
) -> None:
    """Join JSON reports (one per CI job) into one Markdown summary."""
    from bakery.commands import matrix as mx

    try:
        name, rows = mx.rows_from_reports(reports)
    except BakeryError as e:
        fail(e)
    text = mx.to_markdown(name, rows)
    if markdown:
        markdown.write_text(text)
    else:
        out_console.print(text, markup=False)
    raise typer.Exit(code=0 if all(r.ok for r in rows) else 1)


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Console entry point. SIGTERM is treated like SIGINT: the bake in progress removes
    its staging folder and bakery exits 130 (typer turns KeyboardInterrupt into 130)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
