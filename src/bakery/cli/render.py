"""Rich rendering of what several commands print (a bake's report, the verify summary,
tables); a command's own output sits in its module (bakery.cli.commands)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bakery.model.report import BakeReport
from bakery.patch.engine import HunkResult
from bakery.safety.text import clean
from bakery.safety.urls import redact_text


def _t(text: object) -> str:
    """Text from input, made safe to print: one line, no control characters, no rich
    markup (see bakery.safety.text); console.safe, for this module (console imports it)."""
    return escape(clean(redact_text(str(text))))


#: Without a terminal, a download says how far it is at most this often (seconds).
PROGRESS_EVERY = 5.0

ProgressFn = Callable[[int, "int | None"], None]

_STYLE = {
    "applied": "green",
    "offset": "cyan",
    "fuzz": "yellow",
    "merged": "magenta",
    "ambiguous": "yellow",
    "already-applied": "yellow",
    "failed": "bold red",
}


def _status(s: str) -> str:
    return f"[{_STYLE.get(s, 'white')}]{_t(s)}[/]"


def _why(h: HunkResult) -> str:
    """The why column: every outcome but a plain one says why, and a moved hunk where."""
    parts = [h.reason or ""] if h.status.value not in ("applied", "offset") else []
    if h.moved_def:
        parts.append(f"moved-def: {h.moved_def.base} -> {h.moved_def.target}")
    return "; ".join(p for p in parts if p)


#: Hunk rows shown per file, and failed hunks named on its problem line: a series of
#: 100,000 failing hunks is reported in bounded time (the JSON report has them all).
_MAX_ROWS = 200
_MAX_LISTED = 20


def bake_report(
    console: Console,
    report: BakeReport,
    *,
    quiet: bool = False,
    verbose: bool = False,
    next_steps: list[str] | None = None,
    series: str | None = None,
) -> None:
    """One table per diff and file, a row per hunk, then every problem on its own line, the
    verdict, and the next steps (whole commands). quiet: no tables; verbose: the source's
    hash and each diff's commit too. series: the SERIES as the user gave it (a path, for a
    series outside launcher/), which the verdict's next command names."""
    if not quiet:
        _hunk_tables(console, report, verbose)
    _problems(console, report, quiet)
    _verdict(console, report, series or report.series_name)
    if next_steps:
        console.print("next:", soft_wrap=True)
        for step in next_steps:
            console.print(f"  {_t(step)}", soft_wrap=True)


def _hunk_tables(console: Console, report: BakeReport, verbose: bool) -> None:
    src = f"vLLM {report.version}" if report.version else report.source
    port = f"  [cyan](port {_t(report.port)})[/]" if report.port else ""
    console.print(f"[bold]{_t(report.series_name)}[/] on {_t(str(src))}{port}", soft_wrap=True)
    ident = report.identity
    if ident and not ident.pristine:
        why = ident.note or (
            f"{ident.count} file(s) differ from the pristine {ident.compared_with}"
        )
        console.print(
            f"  [yellow]identity[/] {_t(str(ident.label))} ({_t(str(why))})",
            soft_wrap=True,
        )
    if verbose:
        console.print(
            f"  [dim]source {_t(str(report.source))} sha256 {report.sha256 or '-'}[/]",
            soft_wrap=True,
        )
    for d in report.diffs:
        commit = f"  commit {d.commit}" if verbose and d.commit else ""
        digest = d.sha256 if verbose else d.sha256[:12]
        console.print(
            f"[bold]{_t(d.name)}[/]  {_status(d.status.value)}  [dim]{digest}{commit}[/]",
            soft_wrap=True,
        )
        for f in d.files:
            console.print(f"  {_t(f.path)}  {_status(f.status.value)}", soft_wrap=True)
            table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
            for col in ("hunk", "outcome", "line", "offset", "fuzz", "why"):
                table.add_column(
                    col, justify="right" if col in ("hunk", "line", "offset", "fuzz") else "left"
                )
            for h in f.hunks[:_MAX_ROWS]:
                table.add_row(
                    str(h.index),
                    _status(h.status.value),
                    str(h.line),
                    f"{h.offset:+d}" if h.offset else "0",
                    str(h.fuzz),
                    _t(_why(h)),
                )
            console.print(table)
            if len(f.hunks) > _MAX_ROWS:  # a table is laid out whole: bounded time
                more = len(f.hunks) - _MAX_ROWS
                console.print(f"  [dim]... and {more} more hunks (--json lists them all)[/]")


def _problems(console: Console, report: BakeReport, quiet: bool = False) -> None:
    """Warnings, and notes (never under -q), each once; then the hunks that failed."""
    shown: set[tuple[str, str]] = set()
    for line in report.port_stale:  # a port out of step with the series is never silent
        console.print(
            f"[yellow]warning:[/] {_t(report.port or 'port')}: {_t(line)}", soft_wrap=True
        )
    for d in report.diffs:
        notes = [*d.notes, *(w for w in d.warnings if "resolved by the port" in w)]
        for w in [*(() if quiet else notes), *(w for w in d.warnings if w not in notes)]:
            if (d.name, w) in shown:
                continue
            shown.add((d.name, w))
            label = "[dim]note:[/]" if w in notes else "[yellow]warning:[/]"
            console.print(f"{label} {_t(d.name)}: {_t(w)}", soft_wrap=True)
        for f in d.files:
            bad = [h for h in f.hunks if not h.status.ok]
            if not bad:
                continue
            # line 0: a new file's hunk, which has no line in the file before it
            where = ", ".join(
                f"{h.index}" + (f" (line {h.line})" if h.line else "") for h in bad[:_MAX_LISTED]
            )
            if len(bad) > _MAX_LISTED:
                where += f" and {len(bad) - _MAX_LISTED} more"
            actions = sorted({h.action for h in bad if h.action})
            many = len(bad) > 1
            console.print(
                f"[red]{_t(d.name)}: {_t(f.path)}: {'hunks' if many else 'hunk'} {where} "
                f"{'do' if many else 'does'} not apply[/]",
                soft_wrap=True,
            )
            broken = [h for h in bad[:_MAX_LISTED] if (h.reason or "").startswith("contract:")]
            for h in broken:  # a merge that breaks a contract: why (issue 45)
                console.print(f"  hunk {h.index}: {_t(h.reason or '')}", soft_wrap=True)
            for a in actions:
                console.print(f"  {_t(a)}", soft_wrap=True)


def _verdict(console: Console, report: BakeReport, series: str) -> None:
    counts: dict[str, int] = {}
    for d in report.diffs:
        for f in d.files:
            for h in f.hunks:
                counts[h.status.value] = counts.get(h.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if report.status == "baked":
        console.print(
            f"[bold green]baked[/] {_t(str(report.out))} ({summary}){_proof(report, series)}",
            soft_wrap=True,
        )
    elif report.status == "checked":
        console.print(f"[bold green]applies[/] ({summary}){_proof(report, series)}", soft_wrap=True)
    else:
        stop = next((d.name for d in report.diffs if not d.ok), None)
        where = (
            f"; attempt written to {_t(report.failed_out)}, stopped at {_t(stop)}"
            if report.failed_out and stop
            else ""
        )
        console.print(f"[bold red]does not apply[/] ({summary}){where}", soft_wrap=True)


def _proof(report: BakeReport, series: str) -> str:
    """The tree's proof state (issue 45), ending the verdict: ``, unverified: N hunks
    merged; run `bakery verify S```."""
    proof = report.proof
    if proof is None:
        return ""
    if proof.state == "unverified" and proof.reason[:1].isdigit():  # a bake's own words
        merged = proof.reason.partition(";")[0]
        carried = f"; {report.carried}" if report.carried else ""
        line = f"unverified: {merged}{carried}; run `bakery verify {shlex.quote(series)}`"
    else:
        line = f"{proof.state}: {proof.reason}"
    color = {"verified": "green", "failed": "red"}.get(proof.state, "yellow")
    return f", [{color}]{_t(line)}[/]"


def download_progress(console: Console) -> ProgressFn:
    """A progress callback: a bar on a terminal; without one (CI), a line every
    PROGRESS_EVERY seconds, so a long download is seen to be moving."""
    if not console.is_terminal:
        return _progress_lines(console)
    state: dict[str, Any] = {}

    def update(done: int, total: int | None) -> None:
        if "p" not in state:
            # imported here: rich.progress costs every start ~7 ms, only downloads use it
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            p = Progress(
                TextColumn("downloading"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=console,
                transient=True,
            )
            p.start()
            state["p"] = p
            state["t"] = p.add_task("download", total=total)
        p = state["p"]
        p.update(state["t"], completed=done)
        if total and done >= total:
            p.stop()

    return update


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _progress_lines(console: Console) -> ProgressFn:
    start = time.monotonic()
    last: list[float] = []

    def update(done: int, total: int | None) -> None:
        now = time.monotonic()
        finished = total is not None and done >= total
        if last and now - last[0] < PROGRESS_EVERY and not finished:
            return
        last[:] = [now]
        of = f" of {_mb(total)} ({100 * done // total}%)" if total else ""
        rate = done / max(now - start, 1e-3)
        console.print(
            f"downloading: {_mb(done)}{of}, {_mb(int(rate))}/s", markup=False, soft_wrap=True
        )

    return update
