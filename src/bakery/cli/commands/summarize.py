"""``bakery summarize``: its options, its call into the core, and what it prints."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from bakery.cli.common import finish, preflight
from bakery.cli.parsing import (
    BakeryCommand,
    Word,
)
from bakery.outputs import write as write_output
from bakery.safety.text import CILineGuard

app = typer.Typer()


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
    from bakery.reports import matrix as mx

    preflight((markdown, "--markdown"))
    name, rows = mx.rows_from_reports([Path(r) for r in reports])
    text = mx.to_markdown(name, rows, title="bakery summary")
    if markdown:
        write_output(markdown, text.encode(), "--markdown")
    else:
        # as is (Markdown must not be wrapped or styled), through the CI line guard
        guarded = CILineGuard(lambda: sys.stdout)
        guarded.write(text)
        guarded.flush()
    finish(0 if all(r.ok for r in rows) else 1)
