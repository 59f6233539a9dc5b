"""Rich rendering of bakery's results (the only module besides cli.py that prints)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bakery.bake.report import BakeReport

if TYPE_CHECKING:
    from bakery.testing.runner import VerifyResult

_STYLE = {
    "applied": "green",
    "offset": "cyan",
    "fuzz": "yellow",
    "merged": "magenta",
    "already-applied": "yellow",
    "failed": "bold red",
}


def _status(s: str) -> str:
    return f"[{_STYLE.get(s, 'white')}]{s}[/]"


def bake_report(console: Console, report: BakeReport) -> None:
    """One table per diff and file, a row per hunk, then every problem on its own line."""
    src = f"vLLM {report.version}" if report.version else report.source
    port = f"  [cyan](port {escape(report.port)})[/]" if report.port else ""
    console.print(
        f"[bold]{escape(report.series_name)}[/] on {escape(str(src))}{port}", soft_wrap=True
    )
    for d in report.diffs:
        console.print(
            f"[bold]{escape(d.name)}[/]  {_status(d.status.value)}  [dim]{d.sha256[:12]}[/]",
            soft_wrap=True,
        )
        for f in d.files:
            console.print(f"  {escape(f.path)}  {_status(f.status.value)}", soft_wrap=True)
            table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
            for col in ("hunk", "outcome", "line", "offset", "fuzz", "why"):
                table.add_column(
                    col, justify="right" if col in ("hunk", "line", "offset", "fuzz") else "left"
                )
            for h in f.hunks:
                table.add_row(
                    str(h.index),
                    _status(h.status.value),
                    str(h.line),
                    f"{h.offset:+d}" if h.offset else "0",
                    str(h.fuzz),
                    escape(h.reason or "") if not h.status.ok or h.status.value == "merged" else "",
                )
            console.print(table)
    for d in report.diffs:
        for w in d.warnings:
            console.print(f"[yellow]warning:[/] {escape(d.name)}: {escape(w)}", soft_wrap=True)
        for f in d.files:
            bad = [h for h in f.hunks if not h.status.ok]
            if not bad:
                continue
            where = ", ".join(f"{h.index} (line {h.line})" for h in bad)
            actions = sorted({h.action for h in bad if h.action})
            console.print(
                f"[red]{escape(d.name)}: {escape(f.path)}: hunks {where} "
                f"{'do' if len(bad) > 1 else 'does'} not apply[/]",
                soft_wrap=True,
            )
            for a in actions:
                console.print(f"  next: {escape(a)}", soft_wrap=True)
    counts: dict[str, int] = {}
    for d in report.diffs:
        for f in d.files:
            for h in f.hunks:
                counts[h.status.value] = counts.get(h.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if report.status == "baked":
        console.print(f"[bold green]baked[/] {escape(str(report.out))} ({summary})")
    elif report.status == "checked":
        console.print(f"[bold green]applies[/] ({summary})")
    else:
        console.print(
            f"[bold red]does not apply[/] ({summary})"
            + (f"; attempt written to {escape(report.failed_out)}" if report.failed_out else "")
        )


def series_list(console: Console, rows: list[dict[str, object]]) -> None:
    for row in rows:
        console.print(
            escape(
                f"{row['name']}  base {row['base'] or '-'}  "
                f"root {row['root'] or '(detected)'}  {row['path']}"
            )
        )
        if row["description"]:
            console.print(f"  {escape(str(row['description']))}")
        if row["ports"]:
            console.print(escape(f"  ports: {', '.join(row['ports'])}"))  # type: ignore[arg-type]
        for d in row["diffs"]:  # type: ignore[attr-defined]
            console.print(escape(f"  {d['name']}  ({d['hunks']} hunks)"))
            for f in d["files"]:
                console.print(escape(f"    {f}"))


def download_progress(console: Console) -> Callable[[int, int | None], None]:
    """A progress callback that shows a bar once a download starts."""
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
        p.update(state["t"], completed=done)  # type: ignore[attr-defined]
        if total and done >= total:
            p.stop()  # type: ignore[attr-defined]

    return update


def matrix_grid(console: Console, series: str, rows: list) -> None:  # type: ignore[type-arg]
    from bakery.commands.matrix import diff_names, summarize, verify_cell

    names = diff_names(rows)
    table = Table(title=escape(f"{series}: releases x diffs"), title_justify="left")
    table.add_column("release")
    table.add_column("status")
    table.add_column("port")
    for n in names:
        table.add_column(escape(n if len(n) <= 24 else n[:21] + "..."))
    table.add_column("verify")
    table.add_column("s", justify="right")
    for r in rows:
        cells = {str(d["name"]): summarize(d) for d in r.diffs}
        status = {"baked": "[green]baked[/]", "conflict": "[red]conflict[/]"}.get(
            r.status, f"[red]{r.status}[/]"
        )
        verify = {"passed": "[green]passed[/]", "failed": "[red]failed[/]"}.get(
            r.verify or "", f"[yellow]{escape(verify_cell(r))}[/]" if r.verify else "-"
        )
        table.add_row(
            escape(r.version),
            status,
            escape(r.port or "-"),
            *[escape(cells.get(n, "-")) for n in names],
            verify,
            f"{r.seconds:.1f}",
        )
    console.print(table)
    for r in rows:
        if r.error:
            console.print(f"[red]{escape(r.version)}:[/] {escape(r.error)}")


def verify_summary(console: Console, result: VerifyResult, edited: list[str]) -> None:
    """After pytest's own output: where the code came from, edits since the bake, counts."""
    r = result  # bakery.testing.runner.VerifyResult
    if edited:
        console.print(
            "[yellow]the tree was edited since it was baked; these files differ "
            "from the bake's manifest:[/]"
        )
        for f in edited:
            console.print(f"  {escape(f)}")
    tree_mods = [m.name for m in r.from_tree]
    stood = [f"{m.name} ({m.detail})" for m in r.stood_in]
    if tree_mods:
        console.print(escape(f"from the tree: {', '.join(tree_mods)}"), soft_wrap=True)
    if stood:
        console.print(escape(f"stood in: {', '.join(stood)}"), soft_wrap=True)
    for fix in r.tool_fixes:
        console.print(escape(f"test tools: {fix}"), soft_wrap=True)
    if r.expectations:
        console.print(escape(f"expectations: vLLM {r.expectations} (the series' expectations)"))
    for defect, count in sorted(r.known_defects.items()):
        noun = "test" if count == 1 else "tests"
        console.print(f"[yellow]known defect {escape(defect)}: {count} {noun}[/]")
    if r.unexpected_skips:
        console.print(
            f"[red]{r.unexpected_skips} unexpected skips[/] (not in the release's expected skips)"
        )
    parts = [
        f"{n} {label}"
        for n, label in (
            (r.passed, "passed"),
            (r.failed, "failed"),
            (r.errors, "errors"),
            (r.skipped, "skipped"),
            (sum(r.known_defects.values()), "known defect"),
        )
        if n
    ]
    verdict = "[bold green]verified[/]" if r.exit_code == 0 else "[bold red]not verified[/]"
    if r.exit_code == 0 and r.known_defects:
        verdict = "[bold yellow]verified, with known defects[/]"
    console.print(
        f"{verdict}: {', '.join(parts) or 'no tests ran'} "
        f"in {r.elapsed:.1f}s" + (f"; JUnit {escape(str(r.junit))}" if r.junit else "")
    )
