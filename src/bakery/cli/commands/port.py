"""``bakery port``: its options, its call into the core, and what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from bakery.cli import hints
from bakery.cli.common import finish, json_target
from bakery.cli.console import context as _context
from bakery.cli.console import human
from bakery.cli.console import safe as _safe
from bakery.cli.options import InterpretOpt, JsonOpt, SeriesArg, command
from bakery.errors import UsageError

if TYPE_CHECKING:
    from bakery.porting.proving import PortResult
    from bakery.porting.update import UpdateResult as PortUpdate

app = typer.Typer()


def _port_update(
    series: str,
    vllm: str | None,
    out: Path | None,
    interpret: bool,
    dry_run: bool,
    json_file: Path | None,
) -> NoReturn:
    from bakery.porting.update import update as run_update

    result = run_update(
        _context(), series, vllm=vllm, out_root=out, interpret=interpret, write=not dry_run
    )
    port_update(human(), result, series)
    finish(0 if result.ok else 1, json_file, result)


def _promote(
    series: str, version: str, interpret: bool, out: Path | None, json_file: Path | None
) -> None:
    from bakery.commands.port_next import promote

    done = promote(_context(), series, version, interpret=interpret, out_root=out)
    console = human()
    if done.ok:
        console.print(f"[bold green]promoted[/] to {_safe(str(done.port))} ({done.how})")
    else:
        console.print(f"[bold red]not promoted[/]: {_safe(done.note or '')}", soft_wrap=True)
        for rel in done.differs:
            console.print(f"  differs: {_safe(rel)}", soft_wrap=True)
        if done.verify:
            console.print(f"  verify on the release: {_safe(done.verify)}", soft_wrap=True)
    finish(0 if done.ok else 1, json_file, done)


@dataclass(frozen=True, kw_only=True)
class Options:
    series: SeriesArg
    vllm: Annotated[
        str | None,
        typer.Option(
            "--vllm",
            metavar="SPEC",
            help="The release to port the series to; or a tree or git+URL@REF that is no "
            "release: its port goes to patches/SERIES/next/.",
        ),
    ] = None
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Carry the series' changes since each stale port was made into it "
            "(every port, or --vllm's), merged and proven by verify.",
        ),
    ] = False
    promote: Annotated[
        str | None,
        typer.Option(
            "--promote",
            metavar="VERSION",
            help="Move patches/SERIES/next/ to the release's port: as it is where the "
            "release's files are the ones it was proven on, else once re-proven on it.",
        ),
    ] = None
    upstream: Annotated[
        Path | None,
        typer.Option(
            "--upstream",
            metavar="DIR",
            help="A vLLM git checkout: name the upstream commits behind each merged or "
            "failed hunk.",
        ),
    ] = None
    interpret: InterpretOpt = None
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Prove the proposal but write no port.")
    ] = False
    lines_only: Annotated[
        bool,
        typer.Option("--lines-only", help="Merge by lines only, never by syntax (for comparison)."),
    ] = False
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Scratch folder for candidate trees (default: the project's build/port).",
        ),
    ] = None
    json_file: JsonOpt = None


@command(app, Options)
def port(o: Options) -> None:
    """Propose a port of the series to a release: every start tried, merged by lines
    then by syntax, and written to patches/ only when verify proves it."""
    from bakery.commands.port import PortOptions
    from bakery.commands.port import port as run_port
    from bakery.verifying.plan import choose_device

    json_target(o.json_file)
    # as verify and matrix: a GPU when torch sees one, else the CPU (trial, finding 8)
    interpret, _ = choose_device(o.interpret)
    if o.update:
        _port_update(o.series, o.vllm, o.out, interpret, o.dry_run, o.json_file)
    if o.promote is not None:
        if o.vllm is not None:
            raise UsageError("bakery port: --vllm SPEC or --promote VERSION, not both")
        _promote(o.series, o.promote, interpret, o.out, o.json_file)
    if o.vllm is None:
        raise UsageError("bakery port needs --vllm SPEC or --promote VERSION (or --update)")
    options = PortOptions(
        o.vllm,
        out_root=o.out,
        interpret=interpret,
        upstream=o.upstream,
        write=not o.dry_run,
        syntax=not o.lines_only,
    )
    result = run_port(_context(), o.series, options)
    port_result(human(), result, o.series)
    finish(0 if result.ok else 1, o.json_file, result)


def port_result(console: Console, result: PortResult, series: str | None = None) -> None:
    """series: the SERIES argument as given, for the next steps."""
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col in ("start", "merge base", "conflicts", "hunks", "lines from previous port"):
        table.add_column(col)
    for c in result.candidates:
        hunks = ", ".join(f"{n} {k}" for k, n in sorted(c.kinds.items()))
        table.add_row(
            _safe(c.start.label), c.start.release, str(c.failed), _safe(hunks), str(c.distance)
        )
    # the headline says what was tried; the verdict below, what came of it (issue 45)
    console.print(f"[bold]{_safe(result.series)}[/]: a port to vLLM {_safe(result.target)}")
    console.print(table)
    for t in result.tried:
        mark = "[green]accepted[/]" if t.accepted else "[red]not accepted[/]"
        console.print(f"{_safe(t.start)}: verify {_safe(t.verify)}; {mark}")
        for d in t.differences:
            console.print(f"  differs: {_safe(d)}", soft_wrap=True)
    for h in result.hunks:
        why = f" ({h['reason']})" if h.get("reason") else ""
        console.print(
            _safe(f"{h['diff']}: {h['path']} hunk {h['hunk']}: {h['status']}{why}"),
            soft_wrap=True,
        )
        for line in h.get("upstream") or []:  # type: ignore[attr-defined]
            console.print(f"  upstream {_safe(str(line))}", soft_wrap=True)
    _port_verdict(console, result, series)


def _port_verdict(console: Console, result: PortResult, series: str | None) -> None:
    """What came of the port, and the steps that finish an attempt not proven."""
    if result.no_port_needed:
        console.print(
            f"[bold green]no port needed:[/] the series' own diffs bake and verify on "
            f"vLLM {_safe(result.target)}; nothing written"
        )
    elif result.written:
        did = "would write" if result.dry_run else "wrote"  # --dry-run writes nothing
        console.print(f"[bold green]{did}[/] {_safe(result.written)} (with PROVENANCE.md)")
    else:
        where = f"; best attempt in {result.failed_out}" if result.failed_out else ""
        console.print(f"[bold red]no proposal proven[/]{_safe(where)}")
        steps = hints.after_port(series or result.series, result.failed_out)
        if steps:
            console.print("next:", soft_wrap=True)
            for step in steps:
                console.print(f"  {_safe(step)}", soft_wrap=True)


def port_update(console: Console, result: PortUpdate, series: str | None = None) -> None:
    """bakery port --update: each port's state, and what is left to a person (series: the
    SERIES argument as given, for the next step)."""
    for p in result.ports:
        console.print(f"[bold]{_safe(p.port)}[/]: {_UPDATE_STATE.get(p.state, _safe(p.state))}")
        for line in p.stale:
            console.print(f"  {_safe(line)}", soft_wrap=True)
        if p.verify:
            console.print(f"  verify {_safe(p.verify)}", soft_wrap=True)
        if p.why:
            console.print(f"  {_safe(p.why)}", soft_wrap=True)
        for c in p.conflicts:
            console.print(
                _safe(f"  {c['diff']}: {c['path']}:{c['line']}: conflict (the series' change)"),
                soft_wrap=True,
            )
        if p.conflict_tree:
            console.print(
                _safe(
                    f"  resolve the markers in {p.conflict_tree}, then: "
                    f"bakery refresh {result.series} --tree {p.conflict_tree}"
                ),
                soft_wrap=True,
            )
        elif p.state in ("cannot", "failed"):  # nothing to resolve: propose the port anew
            step = hints.command("bakery", "port", series or result.series, "--vllm", p.release)
            console.print(f"  next: {_safe(step)}", soft_wrap=True)


_UPDATE_STATE = {
    "current": "[green]current[/]",
    "carried": "[green]carried, verify passed[/] (dry run: not written)",
    "written": "[bold green]carried and written[/]",
    "conflict": "[red]needs a hand: conflicts[/]",
    "failed": "[red]needs a hand: verify did not pass[/]",
    "cannot": "[red]cannot be updated[/]",
}
