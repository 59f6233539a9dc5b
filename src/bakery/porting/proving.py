"""What proving a port candidate takes, shared by ``bakery port`` (port.py, a release) and
its unreleased-tree form (port_next.py): the candidate baked from its own diffs and
verified (``prove``, ``verify_tree``), the one-line verify verdict (``verify_line``), the
hunks still needing a person with the upstream commits behind them (``attention``), and
the result both commands return (``PortResult``).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakery.bake.merge import Fallback
from bakery.bake.tree import bake, refuse_to_discard_attempts
from bakery.context import Context
from bakery.errors import BakeryError
from bakery.logs import muted
from bakery.model import records
from bakery.patch.series import Series, load_series
from bakery.porting.propose import Candidate
from bakery.sources.pristine import Pristine
from bakery.verifying import plan as plans
from bakery.verifying.runner import VerifyResult, run_verify

_log = logging.getLogger(__name__)


@dataclass
class Tried:
    """What became of one candidate that had no conflict."""

    start: str
    verify: str  # "passed", "failed (N failed)", or why it did not run
    differences: list[str] = field(default_factory=list)
    accepted: bool = False


@dataclass
class PortResult:
    series: str
    target: str
    candidates: list[Candidate]
    tried: list[Tried] = field(default_factory=list)
    written: str | None = None
    failed_out: str | None = None
    #: The best candidate's hunks that did not apply as they are (merged, merged by
    #: syntax, failed), with the upstream commits that touched their lines (--upstream).
    hunks: list[dict[str, object]] = field(default_factory=list)
    previous: str | None = None
    #: The series' own diffs apply exactly (offsets at most) and verify passes: no port.
    no_port_needed: bool = False
    #: --dry-run: ``written`` is where the port would go; nothing was written
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.written is not None or self.no_port_needed

    def to_json(self) -> dict[str, object]:
        return {
            "series": self.series,
            "vllm": self.target,
            "ok": self.ok,
            "port": self.written,
            "no_port_needed": self.no_port_needed,
            "dry_run": self.dry_run,
            "failed_out": self.failed_out,
            "previous": self.previous,
            "candidates": [c.to_json() for c in self.candidates],
            "tried": records.plain(self.tried),
            "hunks": self.hunks,
        }


def verify_line(code: int, passed: int, failed: int, skipped: int) -> str:
    if code == 0:
        return f"passed ({passed} passed, {skipped} skipped)"
    return f"failed ({failed} failed, {passed} passed)"


def verify_tree(series: Series, folder: Path, interpret: bool) -> VerifyResult:
    """The series' tests on ``folder/tree``, in the series' test environment, the result
    recorded (and reused) in bakery's cache."""
    options = plans.VerifyOptions(interpret=interpret, log=folder / "verify.log")
    return run_verify(plans.for_series(series, folder / "tree", options))


def prove(
    series: Series,
    cand: Candidate,
    target: Pristine,
    folder: Path,
    interpret: bool,
) -> Tried:
    """Bake the candidate from its own port diffs, then verify that tree."""
    _log.info(f"Verifying the proposal from {cand.start.label}", extra={"event": "port"})
    port_dir = folder / "port"
    port_dir.mkdir(parents=True)
    s = load_series(str(series.path))
    for d, text in zip(s.load_diffs(), cand.texts, strict=True):
        (port_dir / d.name).write_bytes(text)
    s = s.with_port(port_dir)
    with muted():
        report = bake(s, target, folder / "tree")
    if report.status != "baked":
        return Tried(cand.start.label, "not run: the proposed diffs do not bake as written")
    try:
        res = verify_tree(series, folder, interpret)
    except BakeryError as e:
        return Tried(cand.start.label, f"not run: {e.message}")
    return Tried(cand.start.label, verify_line(res.exit_code, res.passed, res.failed, res.skipped))


def attention(cand: Candidate, target: str, upstream: Path | None) -> list[dict[str, object]]:
    """Each hunk that was merged or failed, with the upstream commits behind it."""
    by_name = {d.name: d for d in cand.series.load_diffs()}
    rows: list[dict[str, object]] = []
    for d in cand.plan.report.diffs:
        for f in d.files:
            for h in f.hunks:
                if h.status.value in ("applied", "offset"):
                    continue
                row: dict[str, object] = {
                    "diff": d.name,
                    "path": f.path,
                    "hunk": h.index,
                    "status": h.status.value,
                    "reason": h.reason,
                }
                hunk = next(
                    (fp.hunks[h.index - 1] for fp in by_name[d.name].files if fp.path == f.path),
                    None,
                )
                if upstream is not None and hunk is not None:
                    row["upstream"] = blame(upstream, cand.start.release, target, f.path, h, hunk)
                rows.append(row)
    return rows


def blame(upstream: Path, since: str, until: str, path: str, res: Any, hunk: Any) -> list[str]:
    """The upstream commits in since..until that touched the lines the hunk needs, as they
    stand in the target release (where the engine looked for them)."""
    from bakery.git import cmd as gitutil
    from bakery.git import history

    first = max(res.line, 1)
    last = first + max(hunk.old_len, 1) - 1
    try:
        a, b = history.release_ref(upstream, since), history.release_ref(upstream, until)
        found = history.touching(upstream, a, b, path, (first, last))
    except gitutil.GitError as e:  # the file is gone at the target (moved): said, not fatal
        return [f"no blame: {e.message}"]
    return [history.line(c) for c in found]


def clear_scratch(scratch: Path) -> None:
    """The scratch folder of an earlier run, unless the attempt it left was edited since
    (the same rule as ``apply --keep-failed``: the user's work is never removed)."""
    refuse_to_discard_attempts(scratch, "bakery port:")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)


def leave_best(
    ctx: Context, spec: str, result: PortResult, target: Pristine, scratch: Path, *, syntax: bool
) -> None:
    """The best attempt as a conflict tree, for a person to finish (merged by lines only
    with --lines-only)."""
    from bakery.porting.propose import _series_for
    from bakery.sources.resolve import release

    if not result.candidates:
        return
    best = result.candidates[0]
    s = _series_for(spec, best.start, ctx.home)
    start = _series_for(spec, best.start, ctx.home)
    base = release(best.start.release, ctx.cache)
    fallback = Fallback(s, target, base, True, syntax=syntax, start=start)
    with muted():
        report = bake(s, target, scratch / "attempt", keep_failed=True, fallback=fallback)
    # its conflicts unmerged in git's index; or, where it bakes (verify failed), the tree
    result.failed_out = report.failed_out or report.out
