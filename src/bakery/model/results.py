"""What applying a diff gives, as data: each hunk's outcome (``Outcome``, worst first by
``worst``), and the result for a hunk and for a file.

The hunk engine (:mod:`bakery.patch.engine`) makes these and re-exports them; they live
here, below it, because the report (:mod:`bakery.model.report`) is made of them and the
model imports nothing above itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol

import msgspec

#: What a bake (or check) came to: the report's ``status``.
BakeStatus = Literal["baked", "conflict", "error", "checked"]
#: What a verify of a baked tree came to (matrix): a known defect is neither a pass nor a
#: failure; "error" is a verify asked for that could not run.
VerifyState = Literal["passed", "known-defects", "failed", "error"]


class RenderedHunk(Protocol):
    """A hunk that can be shown as ``diff -u`` text (``bakery.patch.parse.Hunk``)."""

    def render(self) -> str: ...


class Outcome(str, Enum):
    APPLIED = "applied"
    OFFSET = "offset"
    FUZZ = "fuzz"
    #: Applied (exactly or at an offset), but its old text matches in more than one place.
    AMBIGUOUS = "ambiguous"
    MERGED = "merged"
    #: resolved by a merge of Python syntax where the lines conflicted (``bakery port``)
    MERGED_SYNTAX = "merged-syntax"
    ALREADY = "already-applied"
    FAILED = "failed"

    @property
    def ok(self) -> bool:
        return self not in (Outcome.FAILED, Outcome.ALREADY)


#: Worst first: a file's status is its worst hunk's.
_SEVERITY = [
    Outcome.FAILED,
    Outcome.ALREADY,
    Outcome.MERGED_SYNTAX,
    Outcome.MERGED,
    Outcome.AMBIGUOUS,
    Outcome.FUZZ,
    Outcome.OFFSET,
    Outcome.APPLIED,
]


def worst(outcomes: list[Outcome]) -> Outcome:
    return min(outcomes, key=_SEVERITY.index) if outcomes else Outcome.APPLIED


class Moved(msgspec.Struct, frozen=True):
    """The definitions that enclose a hunk on the series' base release and where it lands
    (JSON ``"moved_def": {"base", "target"}``)."""

    base: str
    target: str


class HunkResult(msgspec.Struct, omit_defaults=True):
    """One hunk's outcome, and its JSON record (``records.plain``/``records.load``): the
    keys after ``fuzz`` are left out when empty."""

    index: int
    status: Outcome
    line: int
    #: always in the JSON (no default: the contract lists them for every hunk)
    offset: int
    fuzz: int
    reason: str | None = None
    #: What to do about a hunk that did not apply (set by merge.diagnose).
    action: str | None = None
    #: For an ambiguous hunk: the other lines where its old text matches (1-based, in the
    #: file before the diff).
    also_matches: list[int] = []
    #: the definitions that enclose the hunk on the series' base release and where it
    #: lands, when they differ (set by bake.placement).
    moved_def: Moved | None = None
    #: The vLLM names the hunk's new code uses (its contract; set by checks.guard).
    uses: list[str] = []


@dataclass
class FileResult:
    path: str
    hunks: list[HunkResult]
    #: The patched content; None when the file is deleted (or nothing could be applied).
    content: bytes | None
    mode: int | None = None
    deleted: bool = False
    failed_hunks: Sequence[RenderedHunk] = field(default_factory=list)
    reason: str | None = None
    #: The file with conflict markers, where a three-way merge left conflicts.
    conflict: bytes | None = None
    #: With conflict: (base, ours, theirs) of the merge, for git's index stages 1, 2, 3.
    sides: tuple[bytes, bytes, bytes] | None = None

    @property
    def status(self) -> Outcome:
        return worst([h.status for h in self.hunks])

    @property
    def ok(self) -> bool:
        return all(h.status.ok for h in self.hunks)
