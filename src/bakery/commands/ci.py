"""``bakery ci``: the steps of bakery's reusable CI workflows, as commands a person runs too.

The workflows in ``.github/workflows/bakery-*.yml`` (``on: workflow_call``) are thin: each
step is one ``bakery ci`` command, so what CI does is what a person gets on their own
machine, and a test runs the very steps end to end. The steps, for one series and release:

- ``plan``: the matrix, every series of ``launcher/`` (or those named) with every release
  since its ``base`` in series.toml (or ``--since``, or the releases named), as JSON for
  ``fromJSON``;
- ``bake``: ``bakery apply --keep-failed`` into ``build/SERIES-X`` with the JSON report;
- ``env-key``: the full test environment's key (the hash of the tree's requirements, the
  Python, the platform and bakery's torch and Triton: :func:`bakery.verifying.fullenv.env_key`),
  for the CI cache; empty for a series whose tests run in the light environment;
- ``verify``: ``bakery verify`` of that tree (JUnit, log), then ``bakery check
  --up-to-date``; the verdict goes into the release's report and a Markdown summary;
- ``issue``: one issue per series and release (``bakery: SERIES on vLLM X``), edited while
  red rather than opened again, closed with a comment once green (``gh``).

Each step's outcome is kept in ``REPORTS/SERIES-X.ci`` (JSON), so a later step knows what
an earlier one did (``verify`` after a failed bake says "not verified" and exits 1).
The children are bakery's own commands (``python -m bakery``), started here so that the
log a person reads is exactly those commands' output; nothing here prints: output lines go
to the caller's ``echo``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bakery import process
from bakery.context import Context
from bakery.errors import BakeryError, SeriesError, UsageError
from bakery.outputs import replace_bytes
from bakery.patch.series import Series, load_series
from bakery.sources import versions

Echo = Callable[[str], None]

#: The reusable workflows ``bakery ci workflows`` calls from a team's project.
REBAKE_WORKFLOW = ".github/workflows/bakery-rebake.yml"
PORT_WORKFLOW = ".github/workflows/bakery-port.yml"
#: Lines of a verify's log kept in the summary and the issue.
_TAIL = 15
#: Lines of a port's report kept in its issue (an issue's body holds 65,536 characters).
_PORT_TAIL = 200


class GhError(BakeryError):
    """``gh`` failed (not found, not logged in, or refused): exit 1 (CONTRACT.md)."""

    exit_code = 1


@dataclass(frozen=True)
class Job:
    series: str
    vllm: str

    @property
    def stem(self) -> str:
        return f"{self.series}-{self.vllm}"


# --- plan --------------------------------------------------------------------------------------


def all_series(home: Path) -> list[str]:
    """Every series folder of ``launcher/`` (one with a ``diffs/`` folder), by name."""
    found = sorted(p.name for p in (home / "launcher").glob("*") if (p / "diffs").is_dir())
    if not found:
        from bakery.project import where_series_are

        raise SeriesError(f"no series{where_series_are(home)}")
    return found


def plan(
    ctx: Context,
    names: Sequence[str] = (),
    *,
    since: str | None = None,
    releases: Sequence[str] = (),
) -> list[Job]:
    """The CI matrix: each series (default: all of launcher/) on each release, from
    ``since`` (default: the series' base) on, or on the ``releases`` named."""
    from bakery.sources.resolve import releases as listed

    jobs: list[Job] = []
    named = [job_of("", v).vllm for v in releases]
    for name in names or all_series(ctx.home):
        series = load_series(name, ctx.home)
        if named:
            chosen = named
        else:
            oldest = since or series.base
            if not oldest:
                raise SeriesError(
                    f"{series.path / 'series.toml'}: no base release; set base, or pass --since"
                )
            chosen = listed(oldest)
        jobs += [Job(series.name, v) for v in chosen]
    if not jobs:
        raise SourceLess("no vLLM release to bake from the oldest release asked for on")
    return jobs


class SourceLess(BakeryError):
    """The plan came out empty: exit 1, a workflow's matrix needs one entry."""

    exit_code = 1


# --- steps -------------------------------------------------------------------------------------


@dataclass
class Outcomes:
    """What each step of one series and release did: ``SERIES-X.ci``, JSON (not named
    ``*.json``: ``bakery summarize reports/*.json`` reads the bakes' reports)."""

    path: Path
    steps: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, reports: Path, job: Job) -> Outcomes:
        path = reports / f"{job.stem}.ci"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        steps = data.get("steps") if isinstance(data, dict) else None
        clean = {str(k): v for k, v in (steps or {}).items() if isinstance(v, int)}
        return cls(path, clean)

    def record(self, step: str, code: int) -> None:
        self.steps[step] = code
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_bytes(self.path, (json.dumps({"steps": self.steps}, indent=2) + "\n").encode())

    @property
    def green(self) -> bool:
        return bool(self.steps) and all(code == 0 for code in self.steps.values())


def tree_of(ctx: Context, job: Job) -> Path:
    return ctx.home / "build" / job.stem


def run_bakery(args: Sequence[str], log: Path, echo: Echo, cwd: Path) -> int:
    """``python -m bakery ARGS`` through the process door: its output line by line to
    ``echo`` and to ``log``; its exit code."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "bakery", *args]
    with log.open("wb") as out:
        child = process.start(command, cwd=cwd, env=env, stderr=subprocess.STDOUT)
        try:
            assert child.stdout is not None
            for raw in child.stdout:
                out.write(raw)
                echo(raw.decode("utf-8", errors="replace").rstrip("\n"))
            return child.wait()
        except BaseException:
            process.stop(child)
            raise


def bake(ctx: Context, job: Job, reports: Path, echo: Echo) -> int:
    """``bakery apply`` into build/SERIES-X (``--keep-failed``), with the JSON report."""
    reports = reports.resolve()
    tree = tree_of(ctx, job)
    code = run_bakery(
        ["apply", job.series, "--vllm", job.vllm, "--out", str(tree)]
        + ["--json", str(reports / f"{job.stem}.json"), "--keep-failed"],
        reports / f"{job.stem}.bake.log",
        echo,
        ctx.home,
    )
    Outcomes.load(reports, job).record("bake", code)
    return code


def env_key(ctx: Context, job: Job, *, gpu: bool = False) -> str:
    """The full environment's key for the baked tree's requirements (the CI cache's key),
    or "" when the series' tests run in the light environment."""
    from bakery.verifying import fullenv
    from bakery.verifying import requirements as reqfiles

    series = load_series(job.series, ctx.home)
    if (series.env or ("full" if gpu else "light")) != "full":
        return ""
    tree = tree_of(ctx, job)
    if not tree.is_dir():
        return ""  # the bake failed: no verify, nothing to restore
    return fullenv.env_key(reqfiles.requirements(tree, cpu=not gpu), fullenv.pins())


def verify(
    ctx: Context,
    job: Job,
    reports: Path,
    echo: Echo,
    *,
    mode: str = "--interpret",
) -> int:
    """``bakery verify`` of the bake (JUnit and log in reports), then ``bakery check
    --up-to-date``; the verdict goes into the release's JSON report. 0 when both pass."""
    reports = reports.resolve()
    outcomes = Outcomes.load(reports, job)
    tree = tree_of(ctx, job)
    if outcomes.steps.get("bake") != 0 or not tree.is_dir():
        echo(f"not verified: {job.series} did not bake on vLLM {job.vllm} (see the bake step)")
        outcomes.record("verify", 1)
        return 1
    log = reports / f"{job.stem}.verify.log"
    code = run_bakery(
        ["verify", job.series, "--tree", str(tree), mode, "--junit"]
        + [str(reports / f"{job.stem}.junit.xml")],
        log,
        echo,
        ctx.home,
    )
    outcomes.record("verify", code)
    _add_verdict(reports / f"{job.stem}.json", "passed" if code == 0 else "failed", tree)
    check = run_bakery(
        ["check", job.series, "--vllm", job.vllm, "--up-to-date"],
        reports / f"{job.stem}.check.log",
        echo,
        ctx.home,
    )
    outcomes.record("check", check)
    return code or check


def _add_verdict(report: Path, verdict: str, tree: Path) -> None:
    """``bakery summarize`` reads ``verify`` from each release's report."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    data["verify"], data["verify_tree"] = verdict, str(tree)
    replace_bytes(report, (json.dumps(data, indent=2) + "\n").encode())


def summary(job: Job, reports: Path) -> str:
    """The Markdown of one series and release: each step's outcome and the log's tail."""
    outcomes = Outcomes.load(reports, job)
    words = {0: "ok"}
    lines = [f"### bakery: {job.series} on vLLM {job.vllm}", ""]
    for step in ("bake", "verify", "check"):
        if step in outcomes.steps:
            code = outcomes.steps[step]
            lines.append(f"- {step}: {words.get(code, f'failed (exit {code})')}")
    for step in ("bake", "verify", "check"):
        log = reports / f"{job.stem}.{step}.log"
        if outcomes.steps.get(step, 0) != 0 and log.is_file():
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-_TAIL:]
            lines += ["", f"`bakery {step}`, its last lines:", "```", *tail, "```"]
    run = _run_url()
    if run:
        lines += ["", f"The run: {run} (its reports: the `report-{job.stem}` artifact)."]
    return "\n".join(lines) + "\n"


def _run_url() -> str:
    server, repo, run = (
        os.environ.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    )
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else ""


# --- the one issue per series and release ------------------------------------------------------


Gh = Callable[[list[str]], str]


def gh(args: list[str]) -> str:
    """``gh ARGS`` (GitHub's CLI, on every hosted runner); its output. The repository is
    gh's (``GH_REPO``, else the checkout's), the token ``GH_TOKEN``."""
    try:
        done = process.run(["gh", *args], timeout=120)
    except subprocess.TimeoutExpired:
        raise GhError(f"gh {args[0]} {args[1]}: no answer in 120 s") from None
    except process.ProcessFailed as e:
        raise GhError(e.message) from None
    if done.returncode != 0:
        raise GhError(process.failure(f"gh {args[0]} {args[1]}", done))
    return done.stdout.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Filed:
    action: str  # "opened" | "edited" | "closed" | "none"
    number: int | None
    title: str


def issue_title(job: Job) -> str:
    return f"bakery: {job.series} on vLLM {job.vllm}"


def open_issue(title: str, run: Gh) -> int | None:
    """The open issue with exactly this title (the search is by words; the title decides)."""
    out = run(
        ["issue", "list", "--state", "open", "--search", f"{title} in:title"]
        + ["--json", "number,title", "--limit", "100"]
    )
    try:
        found = json.loads(out or "[]")
    except ValueError:
        raise GhError("gh issue list: not JSON") from None
    numbers = sorted(
        int(i["number"])
        for i in found
        if isinstance(i, dict) and i.get("title") == title and isinstance(i.get("number"), int)
    )
    return numbers[0] if numbers else None


def file_issue(title: str, body: Path, *, red: bool, run: Gh = gh) -> Filed:
    """Red: the open issue with this title gets the new body, else one is opened. Green:
    an open one is closed with a comment. Never a second issue for one title."""
    number = open_issue(title, run)
    if red:
        if number is None:
            out = run(["issue", "create", "--title", title, "--body-file", str(body)])
            tail = out.strip().rsplit("/", 1)[-1]
            return Filed("opened", int(tail) if tail.isdigit() else None, title)
        run(["issue", "edit", str(number), "--body-file", str(body)])
        return Filed("edited", number, title)
    if number is None:
        return Filed("none", None, title)
    run(["issue", "close", str(number), "--comment", f"Green again. {_run_url()}".strip()])
    return Filed("closed", number, title)


def issue(job: Job, reports: Path, run: Gh = gh) -> Filed:
    """The series' issue for this release, from the steps' outcomes."""
    reports = reports.resolve()
    outcomes = Outcomes.load(reports, job)
    if not outcomes.steps:
        raise UsageError(f"{outcomes.path}: no step has run for {job.stem} (run bakery ci bake)")
    body = reports / f"{job.stem}.issue.md"
    replace_bytes(body, summary(job, reports).encode())
    return file_issue(issue_title(job), body, red=not outcomes.green, run=run)


def port_issue(job: Job, report: Path, run: Gh = gh) -> Filed:
    """The one issue of a port that ``bakery port`` could not prove: the end of its report
    (what is left, hunk by hunk, and the upstream commits behind each)."""
    try:
        lines = report.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise UsageError(f"{report}: {e.strerror}") from None
    text = (
        f"`bakery port {job.series} --vllm {job.vllm}` proposed no port that verify proves.\n\n"
        + "```\n"
        + "\n".join(lines[-_PORT_TAIL:])
        + "\n```\n"
    )
    run_url = _run_url()
    if run_url:
        text += f"\nThe run: {run_url} (its `port-reports` artifact).\n"
    body = report.with_name(f"{report.name}.issue.md")
    replace_bytes(body, text.encode())
    return file_issue(f"bakery: port {job.series} to vLLM {job.vllm}", body, red=True, run=run)


# --- a team's workflows ------------------------------------------------------------------------


CALLER = """\
# bakery's CI for {what} (written by `bakery ci workflows`): rebake each series on every
# vLLM release since its base, daily and on every change of a series, with one issue per
# series and release while it is red; propose ports for the releases that do not bake.
# The jobs are bakery's reusable workflows at one commit; this file only says what to run.
# GPU verify: set the repository variable BAKERY_GPU_RUNS_ON to the JSON list of your
# self-hosted runner labels (["self-hosted", "gpu"]); unset, the GPU job is skipped.
name: bakery

on:
  schedule:
    - cron: "17 5 * * *"
  push:
    branches: [main]
    paths: ["launcher/**", "patches/**", ".github/workflows/bakery.yml"]
  pull_request:
    paths: ["launcher/**", "patches/**", ".github/workflows/bakery.yml"]
  workflow_dispatch:

permissions: {{}}

concurrency:
  group: bakery-${{{{ github.ref }}}}
  cancel-in-progress: ${{{{ github.event_name == 'pull_request' }}}}

jobs:
  rebake:
    uses: {repo}/{rebake}@{ref} # bakery {ref_note}
    permissions:
      contents: read
      issues: write # one issue per series and release, edited while red
    with:
      series: "{series}"
      since: "{since}"
      python: "{python}"
      bakery: "{install}"
      gpu-runs-on: ${{{{ vars.BAKERY_GPU_RUNS_ON || '' }}}}
    secrets:
      # 64 hex digits (python -c "import secrets; print(secrets.token_hex(32))"): the
      # cached full test environment is reused only under the key that sealed it
      BAKERY_SEAL_KEY: ${{{{ secrets.BAKERY_SEAL_KEY }}}}

  port:
    needs: rebake
    if: ${{{{ github.event_name == 'schedule' || github.event_name == 'workflow_dispatch' }}}}
    uses: {repo}/{port}@{ref} # bakery {ref_note}
    permissions:
      contents: write # the port's branch
      pull-requests: write # its pull request, updated in place
      issues: write # or the issue with what is left
    with:
      series: "{series}"
      since: "{since}"
      python: "{python}"
      bakery: "{install}"
"""


def caller_workflow(
    uses: str, series: Sequence[str], *, since: str = "", python: str = "3.11"
) -> str:
    """A team's ``.github/workflows/bakery.yml``: bakery's reusable workflows at the commit
    ``uses`` names (``OWNER/REPO@SHA``: a commit id, as zizmor asks of every ``uses``)."""
    repo, _, ref = uses.partition("@")
    owner, _, name = repo.partition("/")
    if not (_plain(owner) and _plain(name) and len(ref) == 40 and _hex(ref)):
        raise UsageError(
            f"--uses {uses!r}: OWNER/REPO@COMMIT, the full 40-hex commit id of bakery to run"
        )
    for s in series:
        if not _plain(s):
            raise UsageError(f"series {s!r}: a plain name (letters, digits, . _ -)")
    if since:
        since = versions.normalize(since)
    if not all(part.isdigit() for part in python.split(".")):
        raise UsageError(f"--python {python!r}: a version such as 3.11")
    return CALLER.format(
        what=", ".join(series) or "every series in launcher/",
        repo=repo,
        ref=ref,
        ref_note="at one commit: update both uses and bakery together",
        rebake=REBAKE_WORKFLOW,
        port=PORT_WORKFLOW,
        series=" ".join(series),
        since=since,
        python=python,
        install=f"bakery[kernels] @ git+https://github.com/{repo}@{ref}",
    )


def _plain(word: str) -> bool:
    return bool(word) and all(c.isalnum() or c in "._-" for c in word) and word[0] not in ".-"


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text.lower())


def write_workflows(ctx: Context, text: str) -> Path:
    """``.github/workflows/bakery.yml`` of the project; an existing one is not replaced."""
    target = ctx.home / ".github" / "workflows" / "bakery.yml"
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} exists: bakery replaces nothing (remove it to write it anew)")
    target.parent.mkdir(parents=True, exist_ok=True)
    replace_bytes(target, text.encode())
    return target


def job_of(series: Series | str, vllm: str) -> Job:
    """One series on one release (a version: its name is part of file names)."""
    if versions.parse(vllm) is None:
        raise UsageError(f"--vllm {vllm!r}: a vLLM release version (0.32.0)")
    return Job(series if isinstance(series, str) else series.name, versions.normalize(vllm))
