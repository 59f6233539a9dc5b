"""Rich rendering of what several commands print (a bake's report, the verify summary,
tables); a command's own output sits in its module (bakery.cli.commands)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bakery.model.report import BakeReport, DiffResult
from bakery.model.results import BakeStatus, VerifyState
from bakery.patch.engine import HunkResult
from bakery.safety.text import clean
from bakery.safety.urls import redact_text

if TYPE_CHECKING:
    from bakery.commands.bisect import BisectResult
    from bakery.commands.listing import SeriesRow
    from bakery.commands.proving import PortResult
    from bakery.commands.upstream import UpstreamReport
    from bakery.porting.refresh import Refreshed
    from bakery.porting.review import PortView
    from bakery.porting.update import UpdateResult as PortUpdate
    from bakery.reports.matrix import Row
    from bakery.verifying.runner import VerifyResult


def _t(text: object) -> str:
    """Text from input, made safe to print: one line, no control characters, no rich
    markup (see bakery.safety.text)."""
    return escape(clean(redact_text(str(text))))


#: The width of a console that is not a terminal (a pipe, a CI log) when COLUMNS does not
#: say: wide enough that no line is wrapped; tables take only the width they need.
PIPE_WIDTH = 4096
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
        parts.append(f"moved-def: {h.moved_def[0]} -> {h.moved_def[1]}")
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
) -> None:
    """One table per diff and file, a row per hunk, then every problem on its own line, the
    verdict, and the next steps (whole commands). quiet: no tables; verbose: the source's
    hash and each diff's commit too."""
    if not quiet:
        _hunk_tables(console, report, verbose)
    _problems(console, report, quiet)
    _verdict(console, report)
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


def _verdict(console: Console, report: BakeReport) -> None:
    counts: dict[str, int] = {}
    for d in report.diffs:
        for f in d.files:
            for h in f.hunks:
                counts[h.status.value] = counts.get(h.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if report.status == "baked":
        console.print(
            f"[bold green]baked[/] {_t(str(report.out))} ({summary}){_proof(report)}",
            soft_wrap=True,
        )
    elif report.status == "checked":
        console.print(f"[bold green]applies[/] ({summary}){_proof(report)}", soft_wrap=True)
    else:
        stop = next((d.name for d in report.diffs if not d.ok), None)
        where = (
            f"; attempt written to {_t(report.failed_out)}, stopped at {_t(stop)}"
            if report.failed_out and stop
            else ""
        )
        console.print(f"[bold red]does not apply[/] ({summary}){where}", soft_wrap=True)


def _proof(report: BakeReport) -> str:
    """The tree's proof state (issue 45), ending the verdict: ``, unverified: N hunks
    merged; run `bakery verify S```."""
    proof = report.proof
    if proof is None:
        return ""
    if proof.state == "unverified":
        merged = proof.reason.partition(";")[0]
        carried = f"; {report.carried}" if report.carried else ""
        line = f"unverified: {merged}{carried}; run `bakery verify {report.series_name}`"
    else:
        line = f"{proof.state}: {proof.reason}"
    color = {"verified": "green", "failed": "red"}.get(proof.state, "yellow")
    return f", [{color}]{_t(line)}[/]"


def series_list(console: Console, rows: list[SeriesRow]) -> None:
    for row in rows:
        console.print(
            _t(f"{row.name}  base {row.base or '-'}  root {row.root or '(detected)'}  {row.path}")
        )
        if row.description:
            console.print(f"  {_t(str(row.description))}")
        if row.ports:
            console.print(_t(f"  ports: {', '.join(row.ports)}"))
        for d in row.diffs:
            n = d.hunks
            console.print(_t(f"  {d.name}  ({n} hunk{'' if n == 1 else 's'})"))
            for f in d.files:
                console.print(_t(f"    {f}"))


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


_SHORT = {
    "applied": "ok",
    "offset": "offset",
    "fuzz": "fuzz",
    "merged": "merged",
    "merged-syntax": "syntax",
    "ambiguous": "ambiguous",
    "already-applied": "upstream",
    "failed": "FAILED",
}


def _cell(diff: DiffResult) -> str:
    """A grid cell: the diff's hunk outcomes counted, in short words."""
    from bakery.reports.matrix import summarize

    parts = []
    for part in summarize(diff).split(", "):
        n, _, outcome = part.partition(" ")
        parts.append(f"{n} {_SHORT.get(outcome, outcome)}" if outcome else part)
    return " ".join(parts)


_GRID_STATUS: dict[BakeStatus, str] = {
    "baked": "[green]baked[/]",
    "checked": "[green]applies[/]",
    "conflict": "[red]conflict[/]",
}
_GRID_VERIFY: dict[VerifyState, str] = {
    "passed": "[green]passed[/]",
    "failed": "[red]failed[/]",
    "error": "[bold red]not verified[/]",
    "known-defects": "[yellow]known defects[/]",
}


def matrix_grid(console: Console, series: str, rows: list[Row], *, quiet: bool = False) -> None:
    """Releases by diffs. A diff's column is headed by its number (the names follow the
    grid), so that the grid stays readable at 80 columns; a release is never cut. quiet:
    one line per release instead."""
    from bakery.reports.matrix import diff_names

    if quiet:
        _matrix_lines(console, rows)
        return
    names = diff_names(rows)
    heads = [n.split("-", 1)[0] if "-" in n else n for n in names]
    if len(set(heads)) != len(heads):
        heads = [str(i) for i in range(1, len(names) + 1)]
    table = Table(title=_t(f"{series}: releases x diffs"), title_justify="left")
    widest = max([len("release"), *(len(r.version) for r in rows)])
    table.add_column("release", no_wrap=True, min_width=widest)
    table.add_column("status", no_wrap=True)
    table.add_column("port", no_wrap=True)
    for h in heads:
        table.add_column(_t(h), overflow="fold")
    table.add_column("verify", no_wrap=True)
    table.add_column("s", justify="right", no_wrap=True)
    from bakery.bake.strict import needs_review

    for r in rows:
        cells = {d.name: _cell(d) for d in r.diffs}
        status = _GRID_STATUS.get(r.status, f"[red]{_t(r.status)}[/]")
        if r.status == "baked" and needs_review(r.diffs):
            status = "[yellow]baked, review[/]"  # merged/fuzz/ambiguous: never a plain pass
        table.add_row(
            _t(r.version),
            status,
            ("[yellow]stale[/]" if r.port_stale else "yes") if r.port else "-",
            *[_t(cells.get(n, "-")) for n in names],
            _GRID_VERIFY.get(r.verify, "-") if r.verify else _t(r.proof.state if r.proof else "-"),
            f"{r.seconds:.1f}",
        )
    console.print(table)
    _matrix_notes(console, rows, [(h, n) for h, n in zip(heads, names, strict=True) if h != n])


def matrix_wheels(console: Console, err: Console, rows: list[Row]) -> None:
    """matrix --wheels: each wheel written, and why a release has none."""
    for r in rows:
        for w in r.wheels:
            console.print(f"wrote {_t(w)}", soft_wrap=True)
        if r.wheel_error:
            err.print(f"[red]{_t(r.version)}:[/] {_t(r.wheel_error)}", soft_wrap=True)


def _matrix_lines(console: Console, rows: list[Row]) -> None:
    for r in rows:
        verify = f", verify {r.verify}" if r.verify else ""
        error = f": {r.error}" if r.error else ""
        console.print(_t(f"{r.version} {r.status}{verify}{error}"), soft_wrap=True)
        if r.verify == "failed":
            _matrix_failed(console, r)


def _matrix_notes(console: Console, rows: list[Row], heads: list[tuple[str, str]]) -> None:
    """Under the grid: the diffs' full names, the ports used, the errors."""
    for h, n in heads:
        console.print(_t(f"  {h}: {n}"), soft_wrap=True)
    for r in rows:
        if r.port:
            console.print(_t(f"  {r.version}: port {r.port}"), soft_wrap=True)
        for line in r.port_stale:
            console.print(f"[yellow]  {_t(r.version)}:[/] {_t(line)}", soft_wrap=True)
    for r in rows:
        if r.error:
            console.print(f"[red]{_t(r.version)}:[/] {_t(r.error)}", soft_wrap=True)
        if r.verify == "error":
            console.print(f"[red]{_t(r.version)}:[/] {_t(r.verify_cell)}", soft_wrap=True)
        if r.verify == "known-defects":
            console.print(f"[yellow]{_t(r.version)}:[/] {_t(r.verify_cell)}", soft_wrap=True)
        if r.verify == "failed":
            _matrix_failed(console, r)


#: Failed tests named per release under the matrix (the log has them all).
_FAILED_SHOWN = 10


def _matrix_failed(console: Console, r: Row) -> None:
    """A release whose tests failed: which tests, and the log that has their output."""
    names = r.failed_tests
    count = f"{len(names)} " if names else ""
    console.print(f"[red]{_t(r.version)}:[/] {count}tests failed", soft_wrap=True)
    for name in names[:_FAILED_SHOWN]:
        console.print(_t(f"  {name}"), soft_wrap=True)
    if len(names) > _FAILED_SHOWN:
        console.print(f"  and {len(names) - _FAILED_SHOWN} more", soft_wrap=True)
    if r.verify_log:
        console.print(_t(f"  log: {r.verify_log}"), soft_wrap=True)


def refresh_done(
    console: Console, done: Refreshed, next_steps: list[str], *, quiet: bool = False
) -> None:
    """What refresh wrote: the folder, a diffstat per diff, and the next step."""
    from bakery.bake.staging import display_path

    console.print(f"refreshed {_t(str(display_path(done.folder)))}", soft_wrap=True)
    if not quiet:
        for name, stat in done.diffstat:
            console.print(_t(f"  {name}  {stat}"), soft_wrap=True)
    if next_steps:
        console.print("next:", soft_wrap=True)
        for step in next_steps:
            console.print(f"  {_t(step)}", soft_wrap=True)


#: Modules from the tree listed by name after a verify (a full environment imports hundreds).
_MODULES_SHOWN = 3


def _skips_and_pristine(console: Console, r: VerifyResult) -> None:
    if r.unexpected_skips:
        console.print(
            f"[red]{r.unexpected_skips} unexpected skips[/] (not in the release's expected skips)"
        )
    for line in r.pristine:
        console.print(_t(line), soft_wrap=True)
    if r.pristine_not_run:  # issue 45: one line, the oracle's tests left out, and why
        console.print(
            f"[yellow]pristine oracle not run:[/] {_t(r.pristine_not_run)}; its tests were "
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
            console.print(f"  {_t(f)}")
    tree_mods = [m.name for m in r.from_tree]
    stood = [f"{m.name} ({m.detail})" for m in r.stood_in]
    if r.env == "full":
        console.print("environment: full (vLLM's own requirements, bakery's torch and Triton)")
    if tree_mods and verbose:
        console.print("real, from the tree:")
        for m in r.from_tree:
            console.print(_t(f"  {m.name}  ({m.detail})"), soft_wrap=True)
    elif tree_mods:
        shown = tree_mods if len(tree_mods) <= _MODULES_SHOWN else tree_mods[:_MODULES_SHOWN]
        more = len(tree_mods) - len(shown)
        tail = f" and {more} more (bakery -v verify lists them)" if more else ""
        console.print(_t(f"real, from the tree: {', '.join(shown)}{tail}"), soft_wrap=True)
    console.print(_t(f"stood in: {', '.join(stood) or 'none'}"), soft_wrap=True)
    for fix in r.tool_fixes:
        console.print(_t(f"test tools: {fix}"), soft_wrap=True)
    if r.expectations:
        console.print(_t(f"expectations: vLLM {r.expectations} (the series' expectations)"))
    for defect, count in sorted(r.known_defects.items()):
        noun = "test" if count == 1 else "tests"
        console.print(f"[yellow]known defect {_t(defect)}: {count} {noun}[/]")
    _skips_and_pristine(console, r)
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
    console.print(f"{_verify_verdict(r)}: {', '.join(parts) or 'no tests ran'} {_verify_took(r)}")


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
    return f"[bold {colour}]{_t(words)}[/]"


def _verify_took(r: VerifyResult) -> str:
    took = (
        f"(that run took {r.elapsed:.1f}s; --no-reuse runs it again)"
        if r.reused
        else f"in {r.elapsed:.1f}s"
    )
    return took + (f"; JUnit {_t(str(r.junit))}" if r.junit else "")


def port_result(console: Console, result: PortResult) -> None:
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col in ("start", "merge base", "conflicts", "hunks", "lines from previous port"):
        table.add_column(col)
    for c in result.candidates:
        hunks = ", ".join(f"{n} {k}" for k, n in sorted(c.kinds.items()))
        table.add_row(_t(c.start.label), c.start.release, str(c.failed), _t(hunks), str(c.distance))
    # the headline says what was tried; the verdict below, what came of it (issue 45)
    console.print(f"[bold]{_t(result.series)}[/]: a port to vLLM {_t(result.target)}")
    console.print(table)
    for t in result.tried:
        mark = "[green]accepted[/]" if t.accepted else "[red]not accepted[/]"
        console.print(f"{_t(t.start)}: verify {_t(t.verify)}; {mark}")
        for d in t.differences:
            console.print(f"  differs: {_t(d)}", soft_wrap=True)
    for h in result.hunks:
        why = f" ({h['reason']})" if h.get("reason") else ""
        console.print(
            _t(f"{h['diff']}: {h['path']} hunk {h['hunk']}: {h['status']}{why}"),
            soft_wrap=True,
        )
        for line in h.get("upstream") or []:  # type: ignore[attr-defined]
            console.print(f"  upstream {_t(str(line))}", soft_wrap=True)
    if result.no_port_needed:
        console.print(
            f"[bold green]no port needed:[/] the series' own diffs bake and verify on "
            f"vLLM {_t(result.target)}; nothing written"
        )
    elif result.written:
        did = "would write" if result.dry_run else "wrote"  # --dry-run writes nothing
        console.print(f"[bold green]{did}[/] {_t(result.written)} (with PROVENANCE.md)")
    else:
        where = f"; best attempt in {result.failed_out}" if result.failed_out else ""
        console.print(f"[bold red]no proposal proven[/]{_t(where)}")


def bisect_result(console: Console, result: BisectResult) -> None:
    """The steps, then the culprit with its hunks and warnings, or why there is none."""
    console.print(
        _t(
            f"{result.series} bisected on {result.mode} over {result.commits} commits of "
            f"{result.source}"
        ),
        soft_wrap=True,
    )
    for s in result.steps:
        mark = {"good": "[green]good[/]", "bad": "[red]bad[/]"}.get(s.verdict, "[yellow]flaky[/]")
        why = f"  {_t(s.why)}" if s.why else ""
        console.print(f"  {s.commit[:12]} {mark} {_t(s.subject)}{why}", soft_wrap=True)
    if result.culprit is None:
        console.print(f"[bold]no culprit[/]: {_t(result.note or '')}", soft_wrap=True)
        return
    c = result.culprit
    console.print(
        f"[bold red]first bad commit[/] {c.commit} {_t(c.subject)}: {_t(c.why)}", soft_wrap=True
    )
    for h in result.hunks:
        why = f" ({h['reason']})" if h.get("reason") else ""
        console.print(
            _t(f"  {h['diff']}: {h['path']} hunk {h['hunk']}: {h['status']}{why}"), soft_wrap=True
        )
    for w in result.warnings:
        console.print(f"  [yellow]warning:[/] {_t(w)}", soft_wrap=True)
    for u in result.unsure:
        console.print(
            f"  [yellow]unsure:[/] {u.commit[:12]} {_t(u.subject)} ({_t(u.why)}): the culprit "
            "may be this commit",
            soft_wrap=True,
        )


def upstream_commits(console: Console, result: UpstreamReport) -> None:
    """The commits since the last release that touched what the series relies on."""
    n = len(result.commits)
    console.print(
        _t(
            f"{n} upstream commit{'s' if n != 1 else ''} since {result.since} "
            f"(up to {result.commit[:12]}) touched what the series relies on"
            + (":" if n else f" ({len(result.regions)} regions looked at)")
        ),
        soft_wrap=True,
    )
    for c in result.commits:
        console.print(f"  [bold]{c.sha[:12]}[/] {_t(c.subject)}", soft_wrap=True)
        for t in c.touches:
            console.print(f"    {_t(t)}", soft_wrap=True)


_UPDATE_STATE = {
    "current": "[green]current[/]",
    "carried": "[green]carried, verify passed[/] (dry run: not written)",
    "written": "[bold green]carried and written[/]",
    "conflict": "[red]needs a hand: conflicts[/]",
    "failed": "[red]needs a hand: verify did not pass[/]",
    "cannot": "[red]cannot be updated[/]",
}


def port_update(console: Console, result: PortUpdate) -> None:
    """bakery port --update: each port's state, and what is left to a person."""
    for p in result.ports:
        console.print(f"[bold]{_t(p.port)}[/]: {_UPDATE_STATE.get(p.state, _t(p.state))}")
        for line in p.stale:
            console.print(f"  {_t(line)}", soft_wrap=True)
        if p.verify:
            console.print(f"  verify {_t(p.verify)}", soft_wrap=True)
        if p.why:
            console.print(f"  {_t(p.why)}", soft_wrap=True)
        for c in p.conflicts:
            console.print(
                _t(f"  {c['diff']}: {c['path']}:{c['line']}: conflict (the series' change)"),
                soft_wrap=True,
            )
        if p.conflict_tree:
            console.print(
                _t(
                    f"  resolve the markers in {p.conflict_tree}, then: "
                    f"bakery refresh {result.series} --tree {p.conflict_tree}"
                ),
                soft_wrap=True,
            )


_REVIEW_MARK = {"=": "[dim]=[/]", "!": "[yellow]![/]", "<": "[red]<[/]", ">": "[green]>[/]"}


def port_review(console: Console, views: list[PortView]) -> None:
    """bakery diff-ports: per release and file, each hunk pair range-diff style."""
    for v in views:
        c = v.counts()
        console.print(
            f"[bold]{_t(v.release)}[/]: {_t(v.left)} .. {_t(v.right)}: {c['=']} same, "
            f"{c['!']} changed, {c['>']} only in the port, {c['<']} only in the series",
            soft_wrap=True,
        )
        for f in v.files:
            console.print(f"  {_t(f.diff)}: {_t(f.path)}", soft_wrap=True)
            for p in f.pairs:
                left = str(p.left) if p.left is not None else "-"
                right = str(p.right) if p.right is not None else "-"
                console.print(
                    f"    {left:>3}: {_REVIEW_MARK[p.mark]} {right:>3}: {_t(p.header)}",
                    soft_wrap=True,
                )
                for line in p.interdiff:
                    console.print(f"        {_t(line)}", soft_wrap=True, highlight=False)
