"""``bakery doctor``: its options, its call into the core (:mod:`bakery.verifying.doctor`),
and what it prints: one line per finding, a problem with its fix."""

from __future__ import annotations

from typing import Annotated

import typer

from bakery.cli.common import finish
from bakery.cli.options import MasterAddrOpt, MasterPortOpt, NodeRankOpt
from bakery.cli.parsing import BakeryCommand
from bakery.safety.text import clean

app = typer.Typer()


@app.command(cls=BakeryCommand)
def doctor(
    nnodes: Annotated[
        int | None,
        typer.Option(
            "--nnodes",
            min=1,
            metavar="N",
            help="Also check the nodes of a multi-node verify "
            "(run doctor on each, with verify's flags; default: $NNODES).",
        ),
    ] = None,
    node_rank: NodeRankOpt = None,
    master_addr: MasterAddrOpt = None,
    master_port: MasterPortOpt = None,
) -> None:
    """What a GPU verify needs of this host (and of its peers with --nnodes): the GPU and
    its compute capability; torch, Triton and CUDA; Triton's ptxas for the GPU's arch;
    NCCL and its interface; whether the nodes reach each other and their clocks agree.
    Exit 1 when there is a problem."""
    from bakery.testing import nodes
    from bakery.verifying.doctor import examine

    where = nodes.layout(nnodes, node_rank, master_addr, master_port)
    key = nodes.token() if where is not None else None
    found = examine(where, key)
    width = max(len(f.topic) for f in found)
    for f in found:
        line = f"{'ok' if f.ok else 'problem':8} {clean(f.topic):{width}}  {clean(f.text)}"
        typer.echo(line if f.ok else f"{line}; fix: {clean(f.fix)}")
    problems = sum(not f.ok for f in found)
    typer.echo(f"{problems} problem{'s' if problems != 1 else ''}" if problems else "no problem")
    finish(1 if problems else 0)
