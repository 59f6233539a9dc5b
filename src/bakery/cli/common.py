"""What several commands do the same way: outputs checked before the work, the bake's
report shown, --strict, a package written, and the exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import typer

from bakery.cli.console import Invocation as _Invocation
from bakery.cli.console import err_console, human
from bakery.cli.console import safe as _safe
from bakery.outputs import check as check_output
from bakery.outputs import is_stdout, write_json

if TYPE_CHECKING:  # the renderer and the model load where a command runs, not for --help
    from bakery.model.report import BakeReport, DiffResult


class Reported(Protocol):
    """A command's result that has a JSON form (its ``--json`` report)."""

    def to_json(self) -> Any: ...


def finish(code: int, json_file: Path | None = None, report: Reported | None = None) -> NoReturn:
    """The end every command shares: the report written where ``--json`` asked (after
    what the command printed), then the contract's exit code."""
    if json_file is not None and report is not None:
        write_json(json_file, report.to_json())
    raise typer.Exit(code=code)


def json_target(json_file: Path | None) -> None:
    """--json -: the report takes stdout, the human output goes to stderr."""
    if is_stdout(json_file):
        _Invocation.human = err_console


def preflight(*outputs: tuple[Path | None, str]) -> None:
    """Outputs the user named are checked before the work starts (a BakeryError: one
    line, exit 2, through the one handler, bakery.cli.console.exit_code)."""
    for target, what in outputs:
        check_output(target, what)


def strict_exit(
    strict: bool, diffs: list[DiffResult], report: BakeReport | None = None, label: str = ""
) -> int:
    """--strict: 1 (and each refused hunk on stderr) when a hunk applied but not exactly,
    or a release's port was taken for a tree that is not that release."""
    from bakery.bake.strict import identity_problems, strict_problems

    problems = strict_problems(diffs, label) if strict else []
    if strict and report is not None:
        problems += identity_problems(report)
    for line in problems:
        err_console.print(f"[red]strict:[/] {_safe(line)}", markup=True, soft_wrap=True)
    return 1 if problems else 0


def strict_port_exit(strict: bool, report: BakeReport) -> int:
    """--strict: 1 when the port used is out of step with the series (or has no record)."""
    if not strict or not report.port_stale:
        return 0
    for line in report.port_stale:
        err_console.print(f"[red]strict:[/] {_safe(str(report.port))}: {_safe(line)}", markup=True)
    return 1


def run_bake(fn: Callable[[], BakeReport], json_file: Path | None) -> BakeReport:
    preflight((json_file, "--json"))
    report = fn()
    if json_file is not None:
        write_json(json_file, report.to_json())
    return report


def show_report(report: BakeReport, next_steps: list[str], series: str | None = None) -> None:
    """series: the SERIES argument as given, for the commands the report suggests."""
    from bakery.cli import render

    render.bake_report(
        human(),
        report,
        quiet=_Invocation.quiet,
        verbose=_Invocation.verbose,
        next_steps=next_steps,
        series=series,
    )


def package(fn: Callable[[], Any]) -> NoReturn:
    from bakery.cli import render

    done = fn()
    # -q: the verdict and the problems, not the hunk tables (then what was written)
    render.bake_report(
        err_console, done.report, quiet=_Invocation.quiet, verbose=_Invocation.verbose
    )
    for kind, path in done.files:
        size = path.stat().st_size / 1e6
        human().print(
            f"wrote {_safe(str(path))} ({kind}, {size:.1f} MB)", highlight=False, soft_wrap=True
        )
    raise typer.Exit(code=0 if done.report.status == "baked" else 1)
