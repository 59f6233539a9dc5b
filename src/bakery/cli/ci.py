"""``bakery ci plan|bake|env-key|verify|summary|issue|workflows``: the typer sub-app of the
steps bakery's reusable workflows run (output only; the work is in commands/ci.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from bakery.cli.console import context, err_console, out_console
from bakery.cli.parsing import Word
from bakery.model import records
from bakery.safety.text import clean as printable

ci_app = typer.Typer(
    name="ci",
    help="The steps of bakery's reusable CI workflows (.github/workflows/bakery-*.yml), "
    "one command each, so CI does what you can run here.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

SeriesArg = Annotated[str, typer.Argument(metavar="SERIES", click_type=Word(), help="A series.")]
VllmOpt = Annotated[str, typer.Option("--vllm", metavar="X", help="The vLLM release.")]
ReportsOpt = Annotated[
    Path,
    typer.Option(
        "--reports", metavar="DIR", help="Where the reports, logs and outcomes go (reports/)."
    ),
]


def _echo(line: str) -> None:
    err_console.print(escape(printable(line)), soft_wrap=True, highlight=False)


@ci_app.command("plan")
def plan(
    series: Annotated[
        list[str] | None,
        typer.Argument(metavar="[SERIES]...", help="Default: every series in launcher/."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="X", help="The oldest release (default: each base)."),
    ] = None,
    vllm: Annotated[
        list[str] | None,
        typer.Option("--vllm", metavar="X", help="These releases instead (repeat it)."),
    ] = None,
) -> None:
    """The matrix as JSON ({"include": [{"series", "vllm"}, ...]}) for fromJSON."""
    from bakery.commands import ci

    jobs = ci.plan(context(), series or (), since=since, releases=vllm or ())
    print(json.dumps({"include": records.plain(jobs)}, separators=(",", ":")))


@ci_app.command("bake")
def bake(series: SeriesArg, vllm: VllmOpt, reports: ReportsOpt = Path("reports")) -> None:
    """bakery apply --keep-failed into build/SERIES-X, the report in DIR/SERIES-X.json."""
    from bakery.commands import ci

    raise typer.Exit(ci.bake(context(), ci.job_of(series, vllm), reports, _echo))


@ci_app.command("env-key")
def env_key(
    series: SeriesArg,
    vllm: VllmOpt,
    gpu: Annotated[bool, typer.Option("--gpu", help="For a GPU host.")] = False,
) -> None:
    """The full test environment's key of build/SERIES-X (empty: the light environment)."""
    from bakery.commands import ci

    print(ci.env_key(context(), ci.job_of(series, vllm), gpu=gpu))


@ci_app.command("verify")
def verify(
    series: SeriesArg,
    vllm: VllmOpt,
    reports: ReportsOpt = Path("reports"),
    gpu: Annotated[
        bool, typer.Option("--gpu", help="On the GPU (default: the CPU, --interpret).")
    ] = False,
) -> None:
    """bakery verify of build/SERIES-X (JUnit and log in DIR), then check --up-to-date."""
    from bakery.commands import ci

    job = ci.job_of(series, vllm)
    mode = "--gpu" if gpu else "--interpret"
    raise typer.Exit(ci.verify(context(), job, reports, _echo, mode=mode))


@ci_app.command("summary")
def summary(series: SeriesArg, vllm: VllmOpt, reports: ReportsOpt = Path("reports")) -> None:
    """The Markdown of each step's outcome (for $GITHUB_STEP_SUMMARY)."""
    from bakery.commands import ci

    print(ci.summary(ci.job_of(series, vllm), reports), end="")


@ci_app.command("issue")
def issue(
    series: SeriesArg,
    vllm: VllmOpt,
    reports: ReportsOpt = Path("reports"),
    port: Annotated[
        Path | None,
        typer.Option("--port", metavar="FILE", help="The issue of a port left unproven."),
    ] = None,
) -> None:
    """The one issue of SERIES on X: opened or edited while red, closed once green (gh)."""
    from bakery.commands import ci

    job = ci.job_of(series, vllm)
    filed = ci.port_issue(job, port) if port is not None else ci.issue(job, reports)
    where = f" #{filed.number}" if filed.number is not None else ""
    out_console.print(escape(printable(f"issue{where} {filed.action}: {filed.title}")))


@ci_app.command("workflows")
def workflows(
    series: Annotated[
        list[str] | None,
        typer.Argument(metavar="[SERIES]...", help="Default: every series in launcher/."),
    ] = None,
    uses: Annotated[
        str,
        typer.Option("--uses", metavar="OWNER/REPO@COMMIT", help="bakery's repository and commit."),
    ] = "",
    since: Annotated[
        str, typer.Option("--since", metavar="X", help="The oldest release (default: each base).")
    ] = "",
    python: Annotated[str, typer.Option("--python", metavar="X.Y", help="Python.")] = "3.11",
) -> None:
    """Write .github/workflows/bakery.yml: bakery's reusable workflows, called for your series."""
    from bakery.commands import ci
    from bakery.errors import UsageError

    if not uses:
        raise UsageError("--uses OWNER/REPO@COMMIT: which bakery the workflows run")
    text = ci.caller_workflow(uses, series or (), since=since, python=python)
    written = ci.write_workflows(context(), text)
    out_console.print(escape(printable(f"wrote {written}")), soft_wrap=True)
