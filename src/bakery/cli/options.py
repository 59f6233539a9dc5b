"""The options and arguments several commands share, as typer annotations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bakery.cli.parsing import (
    Word,
)

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
