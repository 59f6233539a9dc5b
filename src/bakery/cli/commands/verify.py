"""``bakery verify``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from bakery.cli import render
from bakery.cli.common import finish, preflight
from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import context as _context
from bakery.cli.console import err_console
from bakery.cli.options import InterpretOpt, command
from bakery.cli.parsing import (
    PYTEST_ARGS,
    PytestArgsCommand,
    Word,
)

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
    render.verify_summary(err_console, result, edited, verbose=_Invocation.verbose)
    finish(result.exit_code)
