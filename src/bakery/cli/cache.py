"""``bakery cache list|dir|clean``: the typer sub-app (output only; the work is in
commands/cache.py)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.markup import escape

from bakery.cli.console import context, err_console, out_console
from bakery.safety.text import clean as printable

cache_app = typer.Typer(
    name="cache",
    help=(
        "Show or clean bakery's cache of releases, git sources, upstream wheels, "
        "full test environments and verify results."
    ),
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _ago(when: float, now: float | None = None) -> str:
    """How long ago, in the largest unit that is at least 1 (never "0 h ago")."""
    seconds = max(0.0, (time.time() if now is None else now) - when)
    for unit, length in (("day", 86400), ("h", 3600), ("min", 60)):
        n = int(seconds // length)
        if n >= 1:
            return f"{n} {unit}{'s' if unit == 'day' and n > 1 else ''} ago"
    return "just now"


@cache_app.command("dir")
def dir_() -> None:
    """Print the cache's folder (BAKERY_CACHE_DIR, else the user's cache folder)."""
    out_console.print(escape(str(context().cache.root)), soft_wrap=True)


@cache_app.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The cache's entries, the one used last first, with their sizes."""
    from bakery.commands import cache as commands

    cache, rows = commands.listing(context())
    if as_json:
        data = {
            "root": str(cache.root),
            "size": sum(r.size for r in rows),
            "entries": [r.to_json() for r in rows],
        }
        out_console.print_json(json.dumps(data))
        return
    w = max([38, *(len(r.key) for r in rows)])  # a long wheel key widens the column
    if rows:
        out_console.print(
            escape(f"{'KEY (used last first)':<{w}} {'KIND':<8} {'SIZE':>9}  {'USED':<13} WHAT"),
            soft_wrap=True,
        )
    for r in rows:
        what = r.meta.get("version") or r.meta.get("source") or ""
        if r.kind == "mirror":
            what = "git mirror"
        elif r.kind == "wheel":
            what = r.meta.get("source") or what
        elif not r.complete:
            what += " (incomplete)"
        out_console.print(
            escape(
                printable(f"{r.key:<{w}} {r.kind:<8} {size(r.size):>9}  {_ago(r.used):<13} {what}")
            ),
            soft_wrap=True,
        )
    out_console.print(
        escape(
            printable(f"{_entries(len(rows))}, {size(sum(r.size for r in rows))} in {cache.root}")
        ),
        soft_wrap=True,
    )


@cache_app.command()
def clean(
    keep: Annotated[
        int | None,
        typer.Option("--keep", metavar="N", help="Keep the N entries used last; remove the rest."),
    ] = None,
    older_than: Annotated[
        float | None,
        typer.Option("--older-than", metavar="DAYS", help="Remove entries unused for DAYS days."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
) -> None:
    """Remove entries: all, or all but the N used last, or those unused for DAYS.

    An entry that a running bake holds is left alone (and named)."""
    from bakery.commands import cache as commands

    result = commands.clean(context(), keep=keep, older_than=older_than, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for r in result.removed:
        # an entry's name comes from the cache's folder: data, never printed raw
        out_console.print(escape(printable(f"{verb} {r.key} ({size(r.size)})")), soft_wrap=True)
    for r in result.busy:
        err_console.print(
            escape(printable(f"in use by a running bake, kept: {r.key}")), soft_wrap=True
        )
    out_console.print(
        escape(
            f"{verb} {_entries(len(result.removed))} ({size(result.freed)}), "
            f"kept {len(result.kept) + len(result.busy)}"
        ),
        soft_wrap=True,
    )
