"""The outcome of a bake (or check) as data: the contract's JSON report, and the manifest
that a baked tree carries in ``.bakery/manifest.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from bakery import __version__
from bakery.model import records
from bakery.model.identity import Identity
from bakery.model.results import BakeStatus, FileResult, HunkResult, Outcome, worst

MANIFEST = Path(".bakery") / "manifest.json"

#: What is known of a tree's content (issue 45): ``verified``, the series' tests passed on
#: exactly this content; ``unverified``, baked, not yet tested; ``stale``, made from a port
#: older than the series it stands for; ``failed``, the tests failed on this content.
ProofState = Literal["verified", "unverified", "stale", "failed"]


class Proof(msgspec.Struct, frozen=True):
    """A tree's proof state with its reason: one value, in the manifest and every report
    (JSON ``"proof": {"state", "reason"}``, by ``records.plain``)."""

    state: ProofState
    reason: str

    @property
    def verified(self) -> bool:
        return self.state == "verified"

    def line(self) -> str:
        return f"{self.state}: {self.reason}"


def read_proof(d: object) -> Proof | None:
    """A report's ``"proof"`` read back; None for anything else (an older report has none)."""
    try:
        return records.load(d, Proof)
    except records.RecordError:
        return None


def bake_proof(report: BakeReport) -> Proof | None:
    """The proof state a bake (or check) leaves: none for one that does not apply; ``stale``
    where the port it took is older than the series (and its change was not carried);
    else ``unverified``, with the hunks that were not applied as written counted."""
    if report.status not in ("baked", "checked"):
        return None
    if report.port_stale and not report.carried:
        return Proof("stale", f"{report.port}: {report.port_stale[0]}")
    merged = sum(
        1
        for d in report.diffs
        for f in d.files
        for h in f.hunks
        if h.status.value in ("merged", "merged-syntax")
    )
    carried = f"; {report.carried}" if report.carried else ""
    return Proof("unverified", f"{merged} hunks merged; not yet tested{carried}")


@dataclass
class DiffResult:
    name: str
    sha256: str
    files: list[FileResult] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: How bakery read the diff where it read it as GNU patch would, not as written
    #: (a CRLF copy, its own strip): never a problem, said once.
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> Outcome:
        return worst([f.status for f in self.files])

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)

    def to_json(self) -> dict[str, object]:
        """The report's view of the diff: its status and each file's, worked out."""
        d: dict[str, object] = {
            "name": self.name,
            "sha256": self.sha256,
            "status": self.status.value,
            "files": [
                {"path": f.path, "status": f.status.value, "hunks": records.plain(f.hunks)}
                for f in self.files
            ],
        }
        if self.commit:
            d["commit"] = self.commit
        if self.warnings:
            d["warnings"] = self.warnings
        if self.notes:
            d["notes"] = self.notes
        return d

    @classmethod
    def from_json(cls, d: object) -> DiffResult:
        """A diff of a JSON report (``to_json``'s form; the files without their content);
        :class:`~bakery.model.records.RecordError` for one of another shape."""
        r = records.load(d, _DiffRecord)
        files = [FileResult(f.path, f.hunks, content=None) for f in r.files]
        return cls(r.name, r.sha256, files, r.commit, r.warnings, r.notes)


class _FileRecord(msgspec.Struct):
    """A file of a report's diff as read back (its status is worked out again)."""

    path: str
    hunks: list[HunkResult]


class _DiffRecord(msgspec.Struct):
    """A report's diff as read back."""

    name: str
    sha256: str = ""
    files: list[_FileRecord] = []
    commit: str | None = None
    warnings: list[str] = []
    notes: list[str] = []


@dataclass
class BakeReport:
    series_name: str
    series_path: str | None
    status: BakeStatus = "error"
    error: str | None = None
    version: str | None = None
    source: str | None = None
    sha256: str | None = None
    #: the upstream commit of a git+ source or a local checkout
    commit: str | None = None
    port: str | None = None
    #: why the port is not in step with the series (patch.provenance.stale_lines)
    port_stale: list[str] = field(default_factory=list)
    out: str | None = None
    failed_out: str | None = None
    layout: dict[str, object] = field(default_factory=dict)
    diffs: list[DiffResult] = field(default_factory=list)
    pristine_commit: str | None = None
    head: str | None = None
    files_sha256: dict[str, str] = field(default_factory=dict)
    #: What the tree is (made by sources/identity.py); None when not known
    identity: Identity | None = None
    #: What is known of the tree's content (None: a bake that did not apply)
    proof: Proof | None = None
    #: where the port was stale and the series' change was carried onto it: how
    carried: str | None = None

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.diffs)

    def failed_hunks(self) -> list[tuple[str, str, int, int, str]]:
        """(diff, path, hunk index, line, status) of each hunk that did not apply."""
        return [
            (d.name, f.path, h.index, h.line, h.status.value)
            for d in self.diffs
            for f in d.files
            for h in f.hunks
            if not h.status.ok
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "error": self.error,
            "series": {"name": self.series_name, "path": self.series_path},
            "vllm": self._vllm(),
            "port": self.port,
            "port_stale": self.port_stale,
            "carried": self.carried,
            "out": self.out,
            "failed_out": self.failed_out,
            "layout": self.layout,
            "bakery": __version__,
            "proof": records.plain(self.proof),
            "diffs": [d.to_json() for d in self.diffs],
        }

    def _vllm(self) -> dict[str, object]:
        sha = self.sha256
        if sha is None and self.identity:  # a local tree or git source: its files' hash
            sha = self.identity.tree_sha256 or None
        vllm: dict[str, object] = {
            "version": self.version,
            "source": self.source,
            "sha256": sha,
        }
        if self.commit:  # a git+ source or a local checkout
            vllm["commit"] = self.commit
        if self.identity is not None:
            vllm["identity"] = self.identity.to_json()
        return vllm

    def manifest(self) -> dict[str, object]:
        d = self.to_json()
        d.update(pristine_commit=self.pristine_commit, head=self.head, files=self.files_sha256)
        return d


def write_json(path: Path, data: dict[str, object]) -> None:
    """Write JSON atomically (a reader never sees half a report)."""
    from bakery.outputs import replace_bytes

    replace_bytes(path, (json.dumps(data, indent=2) + "\n").encode())
