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

#: What a bake (or check) came to: the report's ``status``.
BakeStatus = Literal["baked", "conflict", "error", "checked"]
#: What a verify of a baked tree came to (matrix): a known defect is neither a pass nor a
#: failure; "error" is a verify asked for that could not run.
VerifyState = Literal["passed", "known-defects", "failed", "error"]


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"not a number: {value!r}")
    return value


def _text(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"not text: {value!r}")
    return value


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


@dataclass
class HunkResult:
    index: int
    status: Outcome
    line: int
    offset: int = 0
    fuzz: int = 0
    reason: str | None = None
    #: What to do about a hunk that did not apply (set by merge.diagnose).
    action: str | None = None
    #: For an ambiguous hunk: the other lines where its old text matches (1-based, in the
    #: file before the diff).
    also_matches: list[int] = field(default_factory=list)
    #: (base, target): the definitions that enclose the hunk on the series' base release
    #: and where it lands, when they differ (set by bake.placement).
    moved_def: tuple[str, str] | None = None
    #: The vLLM names the hunk's new code uses (its contract; set by checks.guard).
    uses: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {
            "index": self.index,
            "status": self.status.value,
            "line": self.line,
            "offset": self.offset,
            "fuzz": self.fuzz,
        }
        if self.reason:
            d["reason"] = self.reason
        if self.action:
            d["action"] = self.action
        if self.also_matches:
            d["also_matches"] = self.also_matches
        if self.moved_def:
            d["moved_def"] = {"base": self.moved_def[0], "target": self.moved_def[1]}
        if self.uses:
            d["uses"] = self.uses
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> HunkResult:
        """The hunk of a JSON report (``to_json``'s form); TypeError, KeyError or
        ValueError for one of another shape."""
        also = d.get("also_matches", [])
        uses = d.get("uses", [])
        if not isinstance(also, list) or not isinstance(uses, list):
            raise TypeError("also_matches, uses")
        return cls(
            index=_int(d["index"]),
            status=Outcome(d["status"]),
            line=_int(d["line"]),
            offset=_int(d.get("offset", 0)),
            fuzz=_int(d.get("fuzz", 0)),
            reason=_text(d.get("reason")),
            action=_text(d.get("action")),
            also_matches=[_int(n) for n in also],
            moved_def=_moved(d.get("moved_def")),
            uses=[str(_text(u)) for u in uses],
        )


def _moved(value: object) -> tuple[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("moved_def")
    return str(_text(value["base"])), str(_text(value["target"]))


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
