"""``--strict``: a series that applies, but not exactly as written, fails.

Like ungoogled-chromium's patch validator and dpkg-source, which refuse fuzz: a hunk found
at an offset, with fuzz, by a three-way merge, in more than one place (``ambiguous``), or
inside another definition than on the base release (``moved-def``) applied, but nothing
checked that it applied *right*. Without ``--strict`` these are reported; with it they fail.

Works on the typed diffs (``DiffResult``): apply/check pass the report's, the matrix its
rows' (a worker's or a JSON report's, read back with ``reports.matrix.read_row``), so all
share one rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from bakery.model.report import BakeReport, DiffResult
from bakery.model.results import HunkResult, Outcome

#: Hunk outcomes that ``--strict`` refuses.
STRICT_OUTCOMES = frozenset(
    {Outcome.OFFSET, Outcome.FUZZ, Outcome.MERGED, Outcome.MERGED_SYNTAX, Outcome.AMBIGUOUS}
)
#: Outcomes that applied but ask for a look: never rendered as a plain pass.
REVIEW_OUTCOMES = frozenset(
    {Outcome.FUZZ, Outcome.MERGED, Outcome.MERGED_SYNTAX, Outcome.AMBIGUOUS}
)


def _hunks(diffs: Iterable[DiffResult]) -> Iterator[tuple[str, str, HunkResult]]:
    for d in diffs:
        for f in d.files:
            for h in f.hunks:
                yield d.name, f.path, h


def strict_problems(diffs: Iterable[DiffResult], label: str = "") -> list[str]:
    """One line per hunk that ``--strict`` refuses, naming the diff (after ``label``, a
    matrix row's release), file, hunk and why."""
    out = []
    for name, path, h in _hunks(diffs):
        why = []
        if h.status in STRICT_OUTCOMES:
            why.append(h.status.value)
        if h.moved_def:
            why.append(f"moved-def ({h.moved_def.base} -> {h.moved_def.target})")
        if why:
            out.append(f"{label}{name}: {path}: hunk {h.index} (line {h.line}): {', '.join(why)}")
    return out


def needs_review(diffs: Iterable[DiffResult]) -> bool:
    """True when a hunk applied by fuzz, merge or an ambiguous match, or moved definition."""
    return any(h.status in REVIEW_OUTCOMES or h.moved_def for _, _, h in _hunks(diffs))


def identity_problems(report: BakeReport) -> list[str]:
    """``--strict`` also refuses a release's port taken for a tree that is not that
    pristine release (sources/identity.py): it was proven on another tree."""
    identity = report.identity
    if not report.port or identity is None or identity.pristine:
        return []
    return [
        f"{report.port}: a port of the pristine {identity.claims} taken for "
        f"{identity.label}, a tree that is not that release"
    ]
