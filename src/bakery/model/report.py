"""The outcome of a bake (or check) as data: the contract's JSON report, and the manifest
that a baked tree carries in ``.bakery/manifest.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakery import __version__
from bakery.patch.engine import FileResult, Outcome, worst

MANIFEST = Path(".bakery") / "manifest.json"


@dataclass
class DiffResult:
    name: str
    sha256: str
    files: list[FileResult] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> Outcome:
        return worst([f.status for f in self.files])

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {
            "name": self.name,
            "sha256": self.sha256,
            "status": self.status.value,
            "files": [
                {"path": f.path, "status": f.status.value, "hunks": [h.to_json() for h in f.hunks]}
                for f in self.files
            ],
        }
        if self.commit:
            d["commit"] = self.commit
        if self.warnings:
            d["warnings"] = self.warnings
        return d


@dataclass
class BakeReport:
    series_name: str
    series_path: str | None
    status: str = "error"  # baked | conflict | error | checked
    error: str | None = None
    version: str | None = None
    source: str | None = None
    sha256: str | None = None
    #: the upstream commit of a git+ source or a local checkout
    commit: str | None = None
    port: str | None = None
    out: str | None = None
    failed_out: str | None = None
    layout: dict[str, object] = field(default_factory=dict)
    diffs: list[DiffResult] = field(default_factory=list)
    pristine_commit: str | None = None
    head: str | None = None
    files_sha256: dict[str, str] = field(default_factory=dict)

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
            "out": self.out,
            "failed_out": self.failed_out,
            "layout": self.layout,
            "bakery": __version__,
            "diffs": [d.to_json() for d in self.diffs],
        }

    def _vllm(self) -> dict[str, object]:
        vllm: dict[str, object] = {
            "version": self.version,
            "source": self.source,
            "sha256": self.sha256,
        }
        if self.commit:  # a git+ source or a local checkout
            vllm["commit"] = self.commit
        return vllm

    def manifest(self) -> dict[str, object]:
        d = self.to_json()
        d.update(pristine_commit=self.pristine_commit, head=self.head, files=self.files_sha256)
        return d


def write_json(path: Path, data: dict[str, object]) -> None:
    """Write JSON atomically (a reader never sees half a report)."""
    from bakery.outputs import replace_bytes

    replace_bytes(path, (json.dumps(data, indent=2) + "\n").encode())


def read_manifest(tree: Path) -> dict[str, Any] | None:
    try:
        return json.loads((tree / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
