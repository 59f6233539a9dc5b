"""``bakery bisect SERIES --vllm git+URL --good REF --bad REF [--verify]``: the first
upstream commit that breaks the series.

A binary search over ``git rev-list --first-parent GOOD..BAD`` of the source's cached
mirror (read through the one git door, git/cmd.py: no hook, no configuration of the
repository runs). Each commit it tests is baked as ``bakery apply SERIES --vllm
git+URL@COMMIT`` would bake it (the same engine: ports, three-way and syntax merge,
contract warnings); with ``--verify`` the baked tree also runs the series' tests. A verify
that fails is run once more: one that passes the second time does not reproduce, and
that commit is set aside (as ``git bisect skip`` would), never named the culprit.

Hand-written rather than ``git bisect run``: ``git bisect`` writes its state into the
repository (the mirror is shared by every bake) and runs a command *from* it; here the
mirror is only read and each step is a bake in bakery's own scratch folder.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from bakery.context import Context
from bakery.errors import BakeryError, ReportedError, UsageError
from bakery.git import cmd as gitutil
from bakery.logs import muted
from bakery.model import records
from bakery.model.report import BakeReport
from bakery.patch.series import load_series
from bakery.safety import cachepolicy
from bakery.safety.urls import redact_url

_log = logging.getLogger(__name__)


@dataclass
class Step:
    commit: str
    subject: str
    #: "good", "bad" (does not bake, or verify fails twice) or "flaky" (verify failed,
    #: then passed)
    verdict: str
    why: str = ""


@dataclass
class BisectResult:
    series: str
    source: str
    good: str
    bad: str
    mode: str  # "apply" or "verify"
    commits: int
    steps: list[Step] = field(default_factory=list)
    culprit: Step | None = None
    #: commits set aside between the last good and the culprit (flaky verify)
    unsure: list[Step] = field(default_factory=list)
    #: the culprit's bake: hunks that did not apply as written, and contract warnings
    hunks: list[dict[str, object]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.culprit is not None and not self.unsure

    def to_json(self) -> dict[str, object]:
        return {
            "series": self.series,
            "vllm": self.source,
            "good": self.good,
            "bad": self.bad,
            "mode": self.mode,
            "commits": self.commits,
            "culprit": records.plain(self.culprit),
            "unsure": records.plain(self.unsure),
            "hunks": self.hunks,
            "warnings": self.warnings,
            "steps": records.plain(self.steps),
            "note": self.note,
        }


@dataclass
class _Run:
    series: str
    url: str
    scratch: Path
    verify: bool
    interpret: bool
    ctx: Context  # no progress bar: each step's bake is one line of the bisect
    reports: dict[str, BakeReport] = field(default_factory=dict)

    def bake(self, commit: str) -> tuple[BakeReport, Path]:
        from bakery.commands.apply import ApplyOptions, apply

        out = self.scratch / commit[:12]
        # what an earlier run left there, whatever it is (a file or a link too: a bake
        # refuses to replace those, and the commit would be called bad); a link is unlinked
        cachepolicy.remove(out)
        try:
            with muted():
                opts = ApplyOptions(
                    vllm=f"git+{self.url}@{commit}", out=out, force=True, remember=False
                )
                report = apply(self.ctx, self.series, opts)
        except ReportedError as e:
            report = e.report
        self.reports[commit] = report
        return report, out

    def judge(self, commit: str, subject: str) -> Step:
        _log.info(f"Testing {commit[:12]} {subject}", extra={"event": "bisect"})
        report, out = self.bake(commit)
        if report.status != "baked":
            why = report.error or f"{len(report.failed_hunks())} hunk(s) do not apply"
            return Step(commit, subject, "bad", f"apply: {why}")
        if not self.verify:
            return Step(commit, subject, "good")
        first = self._verify(out, commit, 1)
        if first is None:
            return Step(commit, subject, "good")
        again = self._verify(out, commit, 2)
        if again is None:
            return Step(commit, subject, "flaky", f"verify: {first}; passed when run again")
        return Step(commit, subject, "bad", f"verify: {again} (twice)")

    def _verify(self, tree: Path, commit: str, n: int) -> str | None:
        """None when the series' tests pass on the tree; else what failed."""
        from bakery.verifying import plan as plans
        from bakery.verifying.runner import run_verify

        log = self.scratch / f"{commit[:12]}.verify-{n}.log"
        # a second run is a run: a flaky test must get its chance to fail again
        reuse = plans.Reuse.REUSE if n == 1 else plans.Reuse.RECORD
        options = plans.VerifyOptions(interpret=self.interpret, log=log, jobs=1, reuse=reuse)
        try:
            plan = plans.for_series(load_series(self.series), tree, options, cache=self.ctx.cache)
            res = run_verify(plan)
        except BakeryError as e:
            return f"did not run: {e.message}"
        if res.exit_code == 0:
            return None
        return f"{res.failed} failed, {res.errors} errors, {res.passed} passed"


def _first_parent(mirror: Path, good: str, bad: str) -> list[tuple[str, str]]:
    out = gitutil.git(
        mirror, "log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{good}..{bad}"
    )
    rows = []
    for line in out.splitlines():
        sha, _, subject = line.partition("\t")
        if len(sha) == 40:
            rows.append((sha, subject))
    return rows


def _on_the_line(
    mirror: Path, commits: list[tuple[str, str]], good: tuple[str, str], bad: tuple[str, str]
) -> None:
    """--good must be on --bad's first-parent line: an ancestor of it (else good..bad
    holds commits that never had --good in them), and not only through a merged side
    branch (else the first commits of the line are not descendants of --good)."""
    (g, good_c), (b, bad_c) = good, bad
    if not commits or commits[-1][0] != bad_c:
        raise UsageError(f"--bad {b} is not a first-parent descendant of --good {g}")
    if gitutil.git(mirror, "merge-base", "--is-ancestor", good_c, bad_c, raw=True).returncode:
        raise UsageError(f"--good {g} is not an ancestor of --bad {b}: nothing to bisect")
    if gitutil.git(mirror, "rev-parse", f"{commits[0][0]}^1").strip() != good_c:
        raise UsageError(
            f"--good {g} is an ancestor of --bad {b} only through a merged side branch: "
            "bisect follows --bad's first-parent line; give a --good on it"
        )


def bisect(
    ctx: Context,
    series_spec: str,
    *,
    vllm: str,
    good: str,
    bad: str,
    verify: bool = False,
    interpret: bool = True,
    out_root: Path | None = None,
) -> BisectResult:
    from bakery.sources import spec as sources
    from bakery.sources.gitsource import mirror_commit

    series = load_series(series_spec, ctx.home)
    source = sources.parse(vllm) if sources.is_git(vllm) else None
    if not isinstance(source, sources.Git):
        raise UsageError(f"bakery bisect needs --vllm git+URL, not {vllm!r}")
    url, ref = source.url, source.ref
    if ref != "HEAD":
        raise UsageError("bakery bisect: give the refs as --good and --bad, not in --vllm")
    if verify and not (series.path / "tests").is_dir():
        raise UsageError(f"{series.path}: no tests/ folder: --verify has nothing to run")
    mirror, good_c = mirror_commit(url, good, ctx.cache)
    _, bad_c = mirror_commit(url, bad, ctx.cache)
    commits = _first_parent(mirror, good_c, bad_c)
    _on_the_line(mirror, commits, (good, good_c), (bad, bad_c))
    out_root = out_root if out_root is not None else ctx.home / "build" / "bisect"
    scratch = (out_root / series.name).absolute()
    scratch.mkdir(parents=True, exist_ok=True)
    run = _Run(series_spec, url, scratch, verify, interpret, replace(ctx, progress=None))
    result = BisectResult(
        series.name,
        f"git+{redact_url(url)}",
        good_c,
        bad_c,
        "verify" if verify else "apply",
        len(commits),
    )
    start = run.judge(good_c, f"--good {good}")
    result.steps.append(start)
    if start.verdict != "good":
        raise UsageError(f"--good {good} ({good_c[:12]}) is not good: {start.why}")
    _search(run, commits, result)
    return result


def _search(run: _Run, commits: list[tuple[str, str]], result: BisectResult) -> None:
    """The binary search; commits[-1] is --bad."""
    end = run.judge(*commits[-1])
    result.steps.append(end)
    if end.verdict != "bad":
        result.note = f"--bad {end.commit[:12]} is not bad ({end.verdict}): nothing to bisect"
        return
    lo, hi = -1, len(commits) - 1  # lo: the last good (-1: --good), hi: the first bad known
    set_aside: set[int] = set()
    while True:
        open_ = [i for i in range(lo + 1, hi) if i not in set_aside]
        if not open_:
            break
        mid = open_[len(open_) // 2]
        step = run.judge(*commits[mid])
        result.steps.append(step)
        if step.verdict == "good":
            lo = mid
        elif step.verdict == "bad":
            hi = mid
        else:
            set_aside.add(mid)
    by_commit = {s.commit: s for s in result.steps}
    result.culprit = by_commit[commits[hi][0]]
    result.unsure = [by_commit[commits[i][0]] for i in sorted(set_aside) if lo < i < hi]
    _explain(run.reports[commits[hi][0]], result)


def _explain(report: BakeReport, result: BisectResult) -> None:
    for d in report.diffs:
        result.warnings += [f"{d.name}: {w}" for w in d.warnings]
        for f in d.files:
            for h in f.hunks:
                if h.status.value not in ("applied", "offset"):
                    result.hunks.append(
                        {
                            "diff": d.name,
                            "path": f.path,
                            "hunk": h.index,
                            "status": h.status.value,
                            "reason": h.reason,
                        }
                    )
