"""``bakery verify``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from bakery.cli.common import finish, preflight
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console
from bakery.cli.console import safe as _safe
from bakery.cli.options import InterpretOpt, MasterAddrOpt, MasterPortOpt, NodeRankOpt, command
from bakery.cli.parsing import (
    PYTEST_ARGS,
    PytestArgsCommand,
    Word,
)

if TYPE_CHECKING:
    from bakery.verifying.runner import VerifyResult

app = typer.Typer()


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


@dataclass(frozen=True, kw_only=True)
class Options:
    ctx: typer.Context
    series: Annotated[
        str | None,
        typer.Argument(
            metavar="[SERIES]",
            click_type=Word(),
            help="The series whose bundled tests run (default: the one --tree was baked "
            "from, else the last one applied).",
        ),
    ] = None
    tree: Annotated[
        Path | None,
        typer.Option(
            "--tree",
            metavar="DIR",
            help="The baked tree (default: the series' last `bakery apply`).",
        ),
    ] = None
    interpret: InterpretOpt = None
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write a JUnit XML file.")
    ] = None
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
    ] = None
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
    ] = None
    no_reuse: Annotated[
        bool,
        typer.Option(
            "--no-reuse",
            help="Run the tests even when an earlier run had exactly these inputs "
            "(default: reuse its result from bakery's cache).",
        ),
    ] = False
    pristine: Annotated[
        bool,
        typer.Option(
            "--pristine",
            help="Also run the tests on the pristine release and say which test the "
            "series, which upstream, and which the series breaks.",
        ),
    ] = False
    nnodes: NnodesOpt = None
    node_rank: NodeRankOpt = None
    master_addr: MasterAddrOpt = None
    master_port: MasterPortOpt = None
    require_transport: RequireTransportOpt = None


@command(
    app,
    Options,
    cls=PytestArgsCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def verify(o: Options) -> None:
    """Run the series' bundled tests against a baked tree's own code. Arguments after --
    go to pytest."""
    from bakery.commands import verify as commands
    from bakery.testing import nodes
    from bakery.verifying import plan as plans

    preflight((o.junit, "--junit"))
    where = nodes.layout(o.nnodes, o.node_rank, o.master_addr, o.master_port)
    pytest_args = [*o.ctx.args, *o.ctx.meta.get(PYTEST_ARGS, [])]
    options = plans.VerifyOptions(
        interpret=o.interpret,
        env=o.env,
        pytest_args=tuple(pytest_args),
        junit=o.junit,
        jobs=o.jobs,
        reuse=plans.Reuse.RECORD if o.no_reuse else plans.Reuse.REUSE,
    )
    result, edited = commands.verify(
        _context(),
        o.series,
        tree=o.tree,
        options=options,
        pristine=o.pristine,
        nodes=where,
        require_transport=o.require_transport,
    )
    verify_summary(err_console, result, edited, verbose=_Invocation.verbose)
    finish(result.exit_code)


def _skips_and_pristine(console: Console, r: VerifyResult) -> None:
    if r.unexpected_skips:
        console.print(
            f"[red]{r.unexpected_skips} unexpected skips[/] (not in the release's expected skips)"
        )
    for line in r.pristine:
        console.print(_safe(line), soft_wrap=True)
    if r.pristine_not_run:  # issue 45: one line, the oracle's tests left out, and why
        console.print(
            f"[yellow]pristine oracle not run:[/] {_safe(r.pristine_not_run)}; its tests were "
            "left out (pass the pristine tree: -- --bakery-pristine DIR)",
            soft_wrap=True,
        )


def verify_summary(
    console: Console, result: VerifyResult, edited: list[str], *, verbose: bool = False
) -> None:
    """After pytest's own output: where the code came from (one line; each module with
    ``verbose``), edits since the bake, counts."""
    r = result  # bakery.verifying.runner.VerifyResult
    if edited:
        console.print(
            "[yellow]the tree was edited since it was baked; these files differ "
            "from the bake's manifest:[/]"
        )
        for f in edited:
            console.print(f"  {_safe(f)}")
    tree_mods = [m.name for m in r.from_tree]
    stood = [f"{m.name} ({m.detail})" for m in r.stood_in]
    if r.env == "full":
        console.print("environment: full (vLLM's own requirements, bakery's torch and Triton)")
    if tree_mods and verbose:
        console.print("real, from the tree:")
        for m in r.from_tree:
            console.print(_safe(f"  {m.name}  ({m.detail})"), soft_wrap=True)
    elif tree_mods:
        shown = tree_mods if len(tree_mods) <= _MODULES_SHOWN else tree_mods[:_MODULES_SHOWN]
        more = len(tree_mods) - len(shown)
        tail = f" and {more} more (bakery -v verify lists them)" if more else ""
        console.print(_safe(f"real, from the tree: {', '.join(shown)}{tail}"), soft_wrap=True)
    console.print(_safe(f"stood in: {', '.join(stood) or 'none'}"), soft_wrap=True)
    for fix in r.tool_fixes:
        console.print(_safe(f"test tools: {fix}"), soft_wrap=True)
    if r.expectations:
        console.print(_safe(f"expectations: vLLM {r.expectations} (the series' expectations)"))
    for defect, count in sorted(r.known_defects.items()):
        noun = "test" if count == 1 else "tests"
        console.print(f"[yellow]known defect {_safe(defect)}: {count} {noun}[/]")
    _skips_and_pristine(console, r)
    parts = [
        f"{n} {label}"
        for n, label in (
            (r.passed, "passed"),
            (r.failed, "failed"),
            (r.errors, "error" if r.errors == 1 else "errors"),
            (r.skipped, "skipped"),
            (sum(r.known_defects.values()), "known defect"),
        )
        if n
    ]
    console.print(f"{_verify_verdict(r)}: {', '.join(parts) or 'no tests ran'} {_verify_took(r)}")
    _light_hint(console, r)


def _light_hint(console: Console, r: VerifyResult) -> None:
    """The way out of a light run's missing module, as the last line: pytest shows it
    inside a collection traceback, after its own hint about test module names."""
    if r.light_missing:
        console.print(
            _safe(
                f"hint: the light test environment lacks {', '.join(r.light_missing)}: "
                '`bakery verify --env full` (or env = "full" in series.toml) installs '
                "vLLM's requirements"
            ),
            soft_wrap=True,
        )


def _verify_verdict(r: VerifyResult) -> str:
    """verified / verified, with known defects / tests failed / not verified; (reused from
    DATE, KEY)."""
    # "not verified" is kept for a verify that could not run or ran no test (README); tests
    # that ran and failed are "tests failed"
    if r.exit_code != 0:
        words, colour = ("tests failed" if r.failed or r.errors else "not verified"), "red"
    elif r.known_defects:
        words, colour = "verified, with known defects", "yellow"
    else:
        words, colour = "verified", "green"
    if r.exit_code == 0 and r.pristine_not_run:
        words, colour = f"{words}, pristine oracle not run", "yellow"
    if r.reused and r.key:
        words += f" (reused from {r.reused}, {r.key[:16]})"
    return f"[bold {colour}]{_safe(words)}[/]"


def _verify_took(r: VerifyResult) -> str:
    took = (
        f"(that run took {r.elapsed:.1f}s; --no-reuse runs it again)"
        if r.reused
        else f"in {r.elapsed:.1f}s"
    )
    return took + (f"; JUnit {_safe(str(r.junit))}" if r.junit else "")


#: Modules from the tree listed by name after a verify (a full environment imports hundreds).
_MODULES_SHOWN = 3
