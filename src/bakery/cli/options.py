"""The options and arguments several commands share, as typer annotations, and
:func:`command`, which gives a command its options as one frozen value.

typer reads a command's options from its function's parameters, so a command of twelve
options was a function of twelve parameters, handed on one by one. Here a command's
options are the fields of a frozen dataclass (each annotated as typer wants it), and the
command is a function of that one value: typer sees a generated signature with the
fields as parameters (``__signature__``, which typer reads through ``inspect``).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand

from bakery.cli.parsing import (
    BakeryCommand,
    Word,
)

T = TypeVar("T")


def command(
    app: typer.Typer,
    options: type[T],
    *,
    name: str | None = None,
    cls: type[TyperCommand] = BakeryCommand,
    **settings: Any,
) -> Callable[[Callable[[T], None]], Callable[[T], None]]:
    """Register ``fn(options: T)`` as ``app``'s command whose command-line parameters are
    the fields of the dataclass ``options`` (keyword-only, in field order)."""
    hints = typing.get_type_hints(options, include_extras=True)
    params = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in dataclasses.fields(options)  # type: ignore[arg-type]
    ]

    def register(fn: Callable[[T], None]) -> Callable[[T], None]:
        def run(**values: Any) -> None:
            fn(options(**values))

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        run.__name__, run.__doc__, run.__module__ = fn.__name__, fn.__doc__, fn.__module__
        app.command(name, cls=cls, **settings)(run)
        return fn

    return register


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


InterpretOpt = Annotated[
    bool | None,
    typer.Option(
        "--interpret/--gpu",
        help="Run the kernels on the CPU (Triton's interpreter, gloo) or on a GPU. "
        "Default: a GPU when torch sees one, else the CPU.",
    ),
]


UnverifiedOpt = Annotated[
    bool,
    typer.Option(
        "--unverified",
        help="Write it though the bake is not verified (its metadata says so: bakery.json).",
    ),
]


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class BakeOptions:
    """The options ``apply`` and ``check`` share (a command's own options extend it)."""

    series: SeriesArg
    vllm: VllmOpt = None
    json_file: JsonOpt = None
    fuzz: FuzzOpt = 0
    allow_dirty: AllowDirtyOpt = False
    no_port: NoPortOpt = False
    no_merge: NoMergeOpt = False
    strict: StrictOpt = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackageOptions:
    """The options ``wheel`` and ``sdist`` share."""

    series: SeriesArg
    vllm: Annotated[
        str,
        typer.Option(
            "--vllm", metavar="VERSION", help="The release (X.Y.Z) whose package to bake."
        ),
    ]
    out: PackageOut = Path("dist")
    tree: TreeOpt = None
    force: Annotated[bool, typer.Option("--force", help="As apply --force.")] = False
    interpret: InterpretOpt = None
    unverified: UnverifiedOpt = False


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
