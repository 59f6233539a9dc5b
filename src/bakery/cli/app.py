"""bakery's command line: thin typer commands over the core (see CONTRACT.md).

Only this layer prints. The core raises BakeryError subclasses; the one handler
(bakery.cli.console.exit_code, reached from the root command) turns them into one line on
stderr and the contract's exit code. A command is a plain ``@app.command(cls=...)``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from bakery import __version__
from bakery.cli import hints, render
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console, human, log_to_console, out_console
from bakery.cli.console import fit_consoles as _fit_consoles
from bakery.cli.console import safe as _safe
from bakery.cli.parsing import (
    PYTEST_ARGS,
    BakeryCommand,
    BakeryGroup,
    ManyVllmCommand,
    PytestArgsCommand,
    Word,
)
from bakery.errors import BakeryError, UsageError
from bakery.model.report import BakeReport, DiffResult
from bakery.outputs import check as check_output
from bakery.outputs import is_stdout, write_json
from bakery.outputs import write as write_output
from bakery.safety.text import CILineGuard

app = typer.Typer(
    name="bakery",
    cls=BakeryGroup,
    help="Bake patched vLLM trees from ordered series of plain diffs.\n\n"
    "Series live in launcher/ of the project: $BAKERY_HOME when set, else the nearest "
    "folder above the working directory that holds launcher/.",
    no_args_is_help=True,
    # typer's --install-completion/--show-completion; the completion code loads only when
    # a shell asks (see BENCHMARKS.md, "Process start")
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _json_target(json_file: Path | None) -> None:
    """--json -: the report takes stdout, the human output goes to stderr."""
    if is_stdout(json_file):
        _Invocation.human = err_console


def _preflight(*outputs: tuple[Path | None, str]) -> None:
    """Outputs the user named are checked before the work starts (a BakeryError: one
    line, exit 2, through the one handler, bakery.cli.console.exit_code)."""
    for target, what in outputs:
        check_output(target, what)


def _version_callback(value: bool) -> None:
    if value:
        out_console.print(f"bakery {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="Show the version."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Only the verdict, problems and errors: no progress, no tables."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="More detail: the source's hash, each diff's commit."),
    ] = False,
) -> None:
    """The options of every command (the help is the Typer's)."""
    _Invocation.quiet, _Invocation.verbose = quiet and not verbose, verbose
    _Invocation.human = out_console
    _fit_consoles()
    ctx.call_on_close(log_to_console(quiet=_Invocation.quiet, verbose=verbose))


SeriesArg = Annotated[
    str,
    typer.Argument(
        metavar="SERIES",
        click_type=Word(),
        help="A series: a folder name under launcher/, or a series folder.",
    ),
]
VllmOpt = Annotated[
    str | None,
    typer.Option(
        "--vllm",
        metavar="SPEC",
        help="A release (0.30.0, 0.30, v0.30.0, latest), a local tree or checkout, or "
        "git+URL@REF. Default: the series' base release.",
    ),
]
JsonOpt = Annotated[
    Path | None,
    typer.Option(
        "--json",
        metavar="FILE",
        help="Write the report as JSON here; - writes it to stdout (the rest goes to stderr).",
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Exit 1 when any hunk applied at an offset, with fuzz, by a merge, "
        "ambiguously, or in another definition (moved-def).",
    ),
]
FuzzOpt = Annotated[
    int,
    typer.Option(
        "--fuzz",
        min=0,
        max=3,
        metavar="N",
        help="Context lines a hunk may lose to match (default 0: never guess).",
    ),
]
AllowDirtyOpt = Annotated[
    bool,
    typer.Option("--allow-dirty", help="Accept a local git checkout with uncommitted changes."),
]
NoPortOpt = Annotated[
    bool,
    typer.Option("--no-port", help="Use the series' own diffs even where patches/ has a port."),
]
NoMergeOpt = Annotated[
    bool,
    typer.Option(
        "--no-merge", help="Do not fall back to a three-way merge against the base release."
    ),
]


@app.command(cls=BakeryCommand)
def init(
    series: Annotated[
        str,
        typer.Argument(
            metavar="SERIES", click_type=Word(), help="The new series' name (launcher/SERIES)."
        ),
    ],
    vllm: Annotated[
        str,
        typer.Option(
            "--vllm", metavar="VERSION", help="The release the diffs are made against (base)."
        ),
    ],
    tree: Annotated[
        Path | None,
        typer.Option(
            "--tree",
            metavar="DIR",
            help="Where the pristine working tree goes, inside the project (default work/SERIES/).",
        ),
    ] = None,
    no_tree: Annotated[
        bool, typer.Option("--no-tree", help="Write the series only, no working tree.")
    ] = False,
) -> None:
    """Start a series: launcher/SERIES/ (series.toml, diffs/, an example test) and a
    pristine git checkout of the release to edit; refresh --new-diff makes the diffs."""
    from bakery.commands.init import init as run_init

    done = run_init(_context(), series, vllm, tree=tree, with_tree=not no_tree)
    console = human()
    console.print(f"series {_safe(series)} (base vLLM {done.base}) in {_safe(str(done.series))}")
    if done.tree is not None:
        console.print(f"pristine working tree: {_safe(str(done.tree))}")
    if not _Invocation.quiet:
        console.print("next:")
        for step in done.next_steps:
            console.print(f"  {_safe(step)}", soft_wrap=True)


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

    _json_target(json_file)
    report = _run_bake(
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
    _show_report(report, hints.after_bake(report, asked))
    code = 0 if report.status == "baked" else 1
    code = code or _strict(strict, report.diffs, report)
    raise typer.Exit(code=code or _strict_port(strict, report))


@app.command(cls=BakeryCommand)
def check(
    series: SeriesArg,
    vllm: VllmOpt = None,
    json_file: JsonOpt = None,
    fuzz: FuzzOpt = 0,
    allow_dirty: AllowDirtyOpt = False,
    no_port: NoPortOpt = False,
    no_merge: NoMergeOpt = False,
    up_to_date: Annotated[
        bool,
        typer.Option(
            "--up-to-date",
            help="Also fail when a port's committed diffs do not reproduce from "
            "their own bake (for CI); with --vllm VERSION, only that release's port.",
        ),
    ] = False,
    strict: StrictOpt = False,
) -> None:
    """The same run as apply, without writing a tree."""
    from bakery.commands import apply as commands

    _json_target(json_file)
    report = _run_bake(
        lambda: commands.check(
            _context(),
            series,
            commands.BakeOptions(
                vllm=vllm,
                fuzz=fuzz,
                allow_dirty=allow_dirty,
                use_port=not no_port,
                merge=not no_merge,
            ),
        ),
        json_file,
    )
    asked = hints.Asked(series, vllm, no_port=no_port, fuzz=fuzz, no_merge=no_merge)
    _show_report(report, hints.after_bake(report, asked))
    code = 0 if report.ok else 1
    code = code or _strict(strict, report.diffs, report)
    code = code or _strict_port(strict, report)
    if up_to_date and code == 0:
        stale = commands.up_to_date(_context(), series, vllm=vllm)
        for line in stale:
            err_console.print(f"[red]not up to date:[/] {_safe(line)}", markup=True)
        code = 1 if stale else 0
    raise typer.Exit(code=code)


def _strict(
    strict: bool, diffs: list[DiffResult], report: BakeReport | None = None, label: str = ""
) -> int:
    """--strict: 1 (and each refused hunk on stderr) when a hunk applied but not exactly,
    or a release's port was taken for a tree that is not that release."""
    from bakery.bake.strict import identity_problems, strict_problems

    problems = strict_problems(diffs, label) if strict else []
    if strict and report is not None:
        problems += identity_problems(report)
    for line in problems:
        err_console.print(f"[red]strict:[/] {_safe(line)}", markup=True, soft_wrap=True)
    return 1 if problems else 0


def _strict_port(strict: bool, report: BakeReport) -> int:
    """--strict: 1 when the port used is out of step with the series (or has no record)."""
    if not strict or not report.port_stale:
        return 0
    for line in report.port_stale:
        err_console.print(f"[red]strict:[/] {_safe(str(report.port))}: {_safe(line)}", markup=True)
    return 1


def _run_bake(fn: Callable[[], BakeReport], json_file: Path | None) -> BakeReport:
    _preflight((json_file, "--json"))
    report = fn()
    if json_file is not None:
        write_json(json_file, report.to_json())
    return report


def _show_report(report: BakeReport, next_steps: list[str]) -> None:
    render.bake_report(
        human(), report, quiet=_Invocation.quiet, verbose=_Invocation.verbose, next_steps=next_steps
    )


@app.command("list", cls=BakeryCommand)
def list_(
    series: Annotated[
        str | None,
        typer.Argument(metavar="[SERIES]", click_type=Word(), help="One series; default: all."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The series, their diffs, the files they touch, and their base release."""
    from bakery.commands import listing as commands

    rows = commands.list_series(_context(), series)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        render.series_list(human(), rows)


InterpretOpt = Annotated[
    bool | None,
    typer.Option(
        "--interpret/--gpu",
        help="Run the kernels on the CPU (Triton's interpreter, gloo) or on a GPU. "
        "Default: a GPU when torch sees one, else the CPU.",
    ),
]


NnodesOpt = Annotated[
    int | None,
    typer.Option(
        "--nnodes",
        min=1,
        metavar="N",
        help="Hosts in one verify (default: $NNODES, else 1). Node 0 runs pytest; every "
        "other node serves its share of the ranks. Needs $BAKERY_VERIFY_TOKEN on each.",
    ),
]
NodeRankOpt = Annotated[
    int | None,
    typer.Option(
        "--node-rank",
        min=0,
        metavar="R",
        help="This host's node: 0 on the head (default: $NODE_RANK).",
    ),
]
MasterAddrOpt = Annotated[
    str | None,
    typer.Option(
        "--master-addr",
        metavar="ADDR",
        click_type=Word(),
        help="The head's address on the link between the hosts (default: $MASTER_ADDR).",
    ),
]
MasterPortOpt = Annotated[
    int | None,
    typer.Option(
        "--master-port",
        min=1,
        max=65535,
        metavar="PORT",
        help="The head's port for the nodes to join (default: $MASTER_PORT, else 29500).",
    ),
]
RequireTransportOpt = Annotated[
    str | None,
    typer.Option(
        "--require-transport",
        metavar="ib|socket",
        click_type=Word(),
        help="Fail a multi-node run whose NCCL worlds did not use this transport "
        "(ib: InfiniBand or RoCE; read from NCCL_DEBUG=INFO).",
    ),
]


@app.command(
    cls=PytestArgsCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def verify(
    ctx: typer.Context,
    series: Annotated[
        str | None,
        typer.Argument(
            metavar="[SERIES]",
            click_type=Word(),
            help="The series whose bundled tests run (default: the one --tree was baked "
            "from, else the last one applied).",
        ),
    ] = None,
    tree: Annotated[
        Path | None,
        typer.Option(
            "--tree",
            metavar="DIR",
            help="The baked tree (default: the series' last `bakery apply`).",
        ),
    ] = None,
    interpret: InterpretOpt = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write a JUnit XML file.")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Test worker processes (pytest-xdist; default: half the cores, up to 4, "
            "with --interpret, else 1).",
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            metavar="light|full",
            click_type=Word(),
            help="light: bakery's environment, packages' __init__.py not run; full: vLLM's "
            "own requirements installed once into a cached environment, so tests can "
            "import any pure-Python vllm module. Default: full on a GPU, else light.",
        ),
    ] = None,
    no_reuse: Annotated[
        bool,
        typer.Option(
            "--no-reuse",
            help="Run the tests even when an earlier run had exactly these inputs "
            "(default: reuse its result from bakery's cache).",
        ),
    ] = False,
    pristine: Annotated[
        bool,
        typer.Option(
            "--pristine",
            help="Also run the tests on the pristine release and say which test the "
            "series, which upstream, and which the series breaks.",
        ),
    ] = False,
    nnodes: NnodesOpt = None,
    node_rank: NodeRankOpt = None,
    master_addr: MasterAddrOpt = None,
    master_port: MasterPortOpt = None,
    require_transport: RequireTransportOpt = None,
) -> None:
    """Run the series' bundled tests against a baked tree's own code. Arguments after --
    go to pytest."""
    from bakery.commands import verify as commands
    from bakery.testing import nodes

    _preflight((junit, "--junit"))
    where = nodes.layout(nnodes, node_rank, master_addr, master_port)
    pytest_args = [*ctx.args, *ctx.meta.get(PYTEST_ARGS, [])]
    result, edited = commands.verify(
        _context(),
        series,
        tree=tree,
        interpret=interpret,
        junit=junit,
        pytest_args=pytest_args,
        jobs=jobs,
        env=env,
        reuse=not no_reuse,
        pristine=pristine,
        nodes=where,
        require_transport=require_transport,
    )
    render.verify_summary(err_console, result, edited)
    raise typer.Exit(code=result.exit_code)


@app.command(cls=ManyVllmCommand)
def matrix(
    series: SeriesArg,
    vllm: Annotated[
        list[str] | None,
        typer.Option(
            "--vllm",
            metavar="SPEC...",
            help="Releases to bake: --vllm 0.30.0 0.32.0 (or repeat the option).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="VERSION",
            help="Every final release on the index from this version on.",
        ),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="With --since: pre-releases too.")] = False,
    do_verify: Annotated[bool, typer.Option("--verify", help="Verify each baked tree.")] = False,
    interpret: InterpretOpt = None,
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", min=1, metavar="N", help="Parallel workers (default: 2)."),
    ] = 2,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where the baked trees go (default: the project's build/matrix).",
        ),
    ] = None,
    json_file: JsonOpt = None,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", metavar="FILE", help="Write a Markdown summary (for CI)."),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML.")
    ] = None,
    allow_fail: Annotated[
        bool,
        typer.Option(
            "--allow-fail",
            help="Exit 0 even when a release fails (not when a verify could not run).",
        ),
    ] = False,
    strict: StrictOpt = False,
    wheels: Annotated[
        bool,
        typer.Option("--wheels", help="Also write each release's wheels to <out>/wheels/."),
    ] = False,
) -> None:
    """Bake (and verify) a series on many vLLM releases, in parallel."""
    from bakery.commands import matrix as mx
    from bakery.patch.series import load_series

    _json_target(json_file)
    _preflight((json_file, "--json"), (markdown, "--markdown"), (junit, "--junit"))
    s = load_series(series)
    s.require_diffs()
    versions = mx.asked_versions(vllm or [], since, pre)
    if not versions:
        raise BakeryError("matrix needs --vllm VERSION... or --since VERSION")
    if not _Invocation.quiet:
        err_console.print(_safe(f"baking {s.name} on {', '.join(versions)} with {jobs} workers"))
    if do_verify:
        from bakery.verifying.plan import choose_device

        interpret, where = choose_device(interpret)
        if not _Invocation.quiet:
            err_console.print(_safe(f"verifying each baked tree {where}"))
    rows = mx.run(
        _context(),
        str(s.path),
        versions,
        mx.MatrixOptions(
            out_root=(out if out is not None else _context().home / "build" / "matrix").absolute(),
            jobs=jobs,
            verify=do_verify,
            interpret=bool(interpret),
            wheels=wheels,
        ),
    )
    render.matrix_grid(human(), s.name, rows, quiet=_Invocation.quiet)
    render.matrix_wheels(human(), err_console, rows)
    if json_file:
        write_json(json_file, mx.to_json(s.name, rows))
    mx.write_reports(s.name, rows, markdown=markdown, junit=junit)
    refused = [_strict(strict, r.diffs, label=f"{r.version}: ") for r in rows]
    for r in rows if strict else []:
        for line in r.port_stale:
            err_console.print(f"[red]strict:[/] {_safe(r.version)}: {_safe(line)}", markup=True)
            refused.append(1)
    raise typer.Exit(code=mx.exit_code(rows, allow_fail) or (1 if any(refused) else 0))


PackageOut = Annotated[
    Path, typer.Option("--out", metavar="DIR", help="Folder the packages are written to.")
]
TreeOpt = Annotated[
    Path | None,
    typer.Option(
        "--tree",
        metavar="DIR",
        help="Where the baked tree goes (default build/<series>-<version>/).",
    ),
]


@app.command(cls=BakeryCommand)
def wheel(
    series: SeriesArg,
    vllm: Annotated[
        str,
        typer.Option("--vllm", metavar="VERSION", help="The release (X.Y.Z) whose wheel to bake."),
    ],
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            metavar="ARCH",
            help="x86_64, aarch64 or all (default: this machine's).",
        ),
    ] = None,
    out: PackageOut = Path("dist"),
    tree: TreeOpt = None,
    force: Annotated[bool, typer.Option("--force", help="As apply --force.")] = False,
) -> None:
    """Bake a series into the release's upstream wheel: vllm-X+SERIES.HASH-TAGS.whl, no
    compiler needed. Refused (exit 2) when the series changes what the wheel compiles."""
    from bakery.commands import wheel as wheel_cmd

    _package(
        lambda: wheel_cmd.wheel(
            _context(),
            series,
            vllm=vllm,
            platform=platform,
            out_dir=out,
            tree=tree,
            force=force,
        )
    )


@app.command(cls=BakeryCommand)
def sdist(
    series: SeriesArg,
    vllm: Annotated[
        str,
        typer.Option("--vllm", metavar="VERSION", help="The release (X.Y.Z) whose sdist to bake."),
    ],
    out: PackageOut = Path("dist"),
    tree: TreeOpt = None,
    force: Annotated[bool, typer.Option("--force", help="As apply --force.")] = False,
) -> None:
    """Bake a series into the release's source distribution, with the local version."""
    from bakery.commands import wheel as wheel_cmd

    _package(
        lambda: wheel_cmd.sdist(
            _context(),
            series,
            vllm=vllm,
            out_dir=out,
            tree=tree,
            force=force,
        )
    )


def _package(fn: Callable[[], Any]) -> NoReturn:
    done = fn()
    render.bake_report(err_console, done.report)
    for kind, path in done.files:
        size = path.stat().st_size / 1e6
        human().print(
            f"wrote {_safe(str(path))} ({kind}, {size:.1f} MB)", highlight=False, soft_wrap=True
        )
    raise typer.Exit(code=0 if done.report.status == "baked" else 1)


@app.command(cls=BakeryCommand)
def releases(
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="VERSION", help="From this release on (0.30, v0.30.0)."),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Pre-releases too.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON list (for a CI matrix's fromJSON).")
    ] = False,
) -> None:
    """The vLLM releases on the package index (with a source distribution), oldest first."""
    from bakery.commands.releases import releases as found

    versions = found(since, pre)
    typer.echo(json.dumps(versions) if as_json else "\n".join(versions))


@app.command(cls=BakeryCommand)
def refresh(
    series: SeriesArg,
    tree: Annotated[Path, typer.Option("--tree", metavar="DIR", help="The edited baked tree.")],
    release: Annotated[
        str | None,
        typer.Option(
            "--release",
            metavar="VERSION",
            help="The release the tree was baked from (checked against the tree's manifest).",
        ),
    ] = None,
    into: Annotated[
        str | None,
        typer.Option(
            "--into",
            metavar="NN-NAME.diff",
            help="Put edits to files no diff touches into this diff of the series.",
        ),
    ] = None,
    new_diff: Annotated[
        str | None,
        typer.Option(
            "--new-diff",
            metavar="NAME",
            help="Put edits to files no diff touches into a new diff at the end "
            "(NAME.diff, numbered after the last).",
        ),
    ] = None,
) -> None:
    """Turn an edited baked tree back into diffs, as quilt refresh does: a tree of the
    series' base release refreshes launcher/<series>/diffs/, a tree of another release
    its port in patches/<series>/<release>/."""
    from bakery.porting import refresh as refresh_mod

    done = refresh_mod.refresh(_context(), series, tree, release, into=into, new_diff=new_diff)
    for n in done.notes:
        err_console.print(f"[dim]{_safe(n)}[/]", markup=True, soft_wrap=True)
    render.refresh_done(
        human(), done, hints.after_refresh(done, series, tree), quiet=_Invocation.quiet
    )


@app.command(cls=BakeryCommand)
def summarize(
    reports: Annotated[
        list[str],
        typer.Argument(
            metavar="REPORT.json...", click_type=Word(), help="Matrix or apply JSON reports."
        ),
    ],
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown", metavar="FILE", help="Write the Markdown here (default: stdout)."
        ),
    ] = None,
) -> None:
    """Join JSON reports (one per CI job) into one Markdown summary."""
    from bakery.commands import matrix as mx

    _preflight((markdown, "--markdown"))
    name, rows = mx.rows_from_reports([Path(r) for r in reports])
    text = mx.to_markdown(name, rows, title="bakery summary")
    if markdown:
        write_output(markdown, text.encode(), "--markdown")
    else:
        # as is (Markdown must not be wrapped or styled), through the CI line guard
        guarded = CILineGuard(lambda: sys.stdout)
        guarded.write(text)
        guarded.flush()
    raise typer.Exit(code=0 if all(r.ok for r in rows) else 1)


@app.command(cls=BakeryCommand)
def port(
    series: SeriesArg,
    vllm: Annotated[
        str | None,
        typer.Option(
            "--vllm",
            metavar="SPEC",
            help="The release to port the series to; or a tree or git+URL@REF that is no "
            "release: its port goes to patches/SERIES/next/.",
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Carry the series' changes since each stale port was made into it "
            "(every port, or --vllm's), merged and proven by verify.",
        ),
    ] = False,
    promote: Annotated[
        str | None,
        typer.Option(
            "--promote",
            metavar="VERSION",
            help="Move patches/SERIES/next/ to the release's port: as it is where the "
            "release's files are the ones it was proven on, else once re-proven on it.",
        ),
    ] = None,
    upstream: Annotated[
        Path | None,
        typer.Option(
            "--upstream",
            metavar="DIR",
            help="A vLLM git checkout: name the upstream commits behind each merged or "
            "failed hunk.",
        ),
    ] = None,
    interpret: Annotated[
        bool,
        typer.Option("--interpret/--gpu", help="Prove on the CPU (Triton interpreter) or a GPU."),
    ] = True,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Prove the proposal but write no port.")
    ] = False,
    lines_only: Annotated[
        bool,
        typer.Option("--lines-only", help="Merge by lines only, never by syntax (for comparison)."),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Scratch folder for candidate trees (default: the project's build/port).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Propose a port of the series to a release: every start tried, merged by lines
    then by syntax, and written to patches/ only when verify proves it."""
    from bakery.commands.port import port as run_port

    _json_target(json_file)
    if update:
        _port_update(series, vllm, out, interpret, dry_run, json_file)
    if promote is not None:
        if vllm is not None:
            raise UsageError("bakery port: --vllm SPEC or --promote VERSION, not both")
        _promote(series, promote, interpret, out, json_file)
    if vllm is None:
        raise UsageError("bakery port needs --vllm SPEC or --promote VERSION (or --update)")
    result = run_port(
        _context(),
        series,
        vllm=vllm,
        out_root=out,
        interpret=interpret,
        upstream=upstream,
        write=not dry_run,
        syntax=not lines_only,
    )
    if json_file is not None:
        write_json(json_file, result.to_json())
    render.port_result(human(), result)
    raise typer.Exit(code=0 if result.ok else 1)


def _port_update(
    series: str,
    vllm: str | None,
    out: Path | None,
    interpret: bool,
    dry_run: bool,
    json_file: Path | None,
) -> NoReturn:
    from bakery.porting.update import update as run_update

    result = run_update(
        _context(), series, vllm=vllm, out_root=out, interpret=interpret, write=not dry_run
    )
    if json_file is not None:
        write_json(json_file, result.to_json())
    render.port_update(human(), result)
    raise typer.Exit(code=0 if result.ok else 1)


@app.command("diff-ports", cls=BakeryCommand)
def diff_ports(
    series: SeriesArg,
    vllm: Annotated[
        str | None, typer.Option("--vllm", metavar="VERSION", help="Only this release's port.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="REV[..REV]",
            help="Show how each port changed since a commit of the project (or between two).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Review the ports: per release, how the port differs from the series, hunk by hunk
    (= same change, ! changed, < series only, > port only), as git range-diff pairs two
    versions of a series."""
    from bakery.porting.review import diff_ports as run_review

    _json_target(json_file)
    _preflight((json_file, "--json"))
    views = run_review(_context(), series, vllm=vllm, since=since)
    if json_file is not None:
        write_json(json_file, {"series": series, "ports": [v.to_json() for v in views]})
    render.port_review(human(), views)


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

    _json_target(json_file)
    _preflight((json_file, "--json"))
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
    if json_file is not None:
        write_json(json_file, result.to_json())
    render.bisect_result(human(), result)
    raise typer.Exit(code=0 if result.ok else 1)


def _promote(
    series: str, version: str, interpret: bool, out: Path | None, json_file: Path | None
) -> None:
    from bakery.commands.port_next import promote

    done = promote(_context(), series, version, interpret=interpret, out_root=out)
    if json_file is not None:
        write_json(json_file, done.to_json())
    console = human()
    if done.ok:
        console.print(f"[bold green]promoted[/] to {_safe(str(done.port))} ({done.how})")
    else:
        console.print(f"[bold red]not promoted[/]: {_safe(done.note or '')}", soft_wrap=True)
        for rel in done.differs:
            console.print(f"  differs: {_safe(rel)}", soft_wrap=True)
        if done.verify:
            console.print(f"  verify on the release: {_safe(done.verify)}", soft_wrap=True)
    raise typer.Exit(code=0 if done.ok else 1)


def _add_subcommands() -> None:
    from bakery.cli.cache import cache_app
    from bakery.cli.ci import ci_app

    app.add_typer(cache_app)
    app.add_typer(ci_app)


_add_subcommands()


@app.command(cls=BakeryCommand)
def upstream(
    series: SeriesArg,
    vllm: Annotated[
        str,
        typer.Option(
            "--vllm",
            metavar="SPEC",
            help="The branch to watch: git+URL@REF (e.g. vLLM's main).",
        ),
    ],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="VERSION",
            help="The release to compare with (default: the last tag before REF).",
        ),
    ] = None,
    json_file: JsonOpt = None,
) -> None:
    """Check a series against a vLLM branch, and list the upstream commits since the last
    release that touched its hunks or the names its code uses."""
    from bakery.commands import upstream as up

    _json_target(json_file)
    result = up.upstream(
        _context(),
        series,
        vllm,
        since=since,
    )
    if json_file is not None:
        write_json(json_file, result.to_json())
    render.bake_report(human(), result.check)
    render.upstream_commits(human(), result)
    raise typer.Exit(code=0 if result.check.ok else 1)
