"""A baked tree read back for packaging: what the bake changed against its pristine commit,
with the baked bytes, and the local version label its wheel and sdist carry.

The change list comes from the tree's own commits (``git diff --raw`` from the pristine
commit to the manifest's head), the bytes from the tree's files, each checked against the
sha256 the bake recorded in ``.bakery/manifest.json``: a wheel or sdist holds exactly the
bytes of the bake, or is not written.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import NamedTuple

from packaging.version import Version

from bakery.errors import BakeryError
from bakery.git import cmd as gitutil


class Change(NamedTuple):
    """One path the bake changed (tree-relative, ``/``-separated)."""

    path: str
    status: str  # A added, M modified (content or mode), D deleted, T type changed
    old_mode: int  # 0 where the pristine tree had no such file
    new_mode: int  # 0 where the bake deleted it
    old_blob: str


class Baked(NamedTuple):
    """A baked tree's series, release and changes, as its manifest and commits say."""

    tree: Path
    series: str
    vllm: str
    #: The release whose port the bake used (``patches/<series>/<release>/``), or None.
    port: str | None
    diffs: list[dict[str, object]]
    pristine_commit: str
    head: str
    changes: list[Change]
    #: tree path -> sha256 of each file the bake wrote (the manifest's "files")
    sha256: dict[str, str]
    #: what is known of the tree, as its packages' metadata says it (issue 45:
    #: ``{"state", "reason"}``; ``unverified`` only where ``--unverified`` published it)
    proof: dict[str, str] | None = None

    @property
    def digest(self) -> str:
        """The sha256 of the applied diffs' ``sha256sum`` listing, in series order."""
        listing = "".join(f"{d['sha256']}  {d['name']}\n" for d in self.diffs)
        return hashlib.sha256(listing.encode()).hexdigest()

    def content(self, path: str) -> bytes:
        """The baked bytes of path, as the bake wrote them (checked against the manifest)."""
        file = self.tree / path
        if file.is_symlink():
            raise BakeryError(
                f"{path}: the bake made it a symbolic link; a package cannot hold one"
            )
        try:
            data = file.read_bytes()
        except OSError as e:
            raise BakeryError(f"{file}: {e.strerror}") from None
        if hashlib.sha256(data).hexdigest() != self.sha256.get(path):
            raise BakeryError(
                f"{file}: changed since the bake (bake again, or move the edit into a port)"
            )
        return data

    def pristine(self, change: Change) -> bytes:
        """The file as the release had it (from the tree's pristine commit)."""
        text = gitutil.git(self.tree, "cat-file", "blob", change.old_blob)
        return text.encode("utf-8", "surrogateescape")


def local_version(upstream: str, series: str, digest: str) -> str:
    """``X+SERIES.<8 hex of digest>``, normalized as PEP 440 does (a series name's other
    characters become dots; a label that is all digits loses its leading zeros, as pip
    would print it)."""
    label = re.sub(r"[^a-z0-9]+", ".", series.lower()).strip(".") or "series"
    v = Version(upstream)
    return str(Version(f"{v}{'.' if v.local else '+'}{label}.{digest[:8]}"))


def read_baked(tree: Path) -> Baked:
    from bakery.model import manifest as manifests

    try:
        m = manifests.read(tree)
    except manifests.ManifestError:
        m = None
    if m is None or m.status != "baked" or not (m.pristine_commit and m.head and m.series_name):
        raise BakeryError(f"{tree}: not a baked tree (no .bakery/manifest.json of a bake)")
    if not m.version:
        raise BakeryError(f"{tree}: baked from a tree without a release version")
    return Baked(
        tree=tree,
        series=m.series_name,
        vllm=m.version,
        port=Path(m.port).name if m.port else None,
        diffs=[d.to_json() for d in m.diffs],
        pristine_commit=m.pristine_commit,
        head=m.head,
        changes=_changes(tree, m.pristine_commit, m.head),
        sha256=dict(m.files),
    )


def _changes(tree: Path, old: str, new: str) -> list[Change]:
    """``git diff --raw`` from the pristine commit to the bake's head: each path with its
    modes and the pristine blob."""
    out = gitutil.git(tree, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", old, new)
    fields = out.split("\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta:
            continue
        old_mode, new_mode, old_blob, _new_blob, status = meta.lstrip(":").split(" ")
        changes.append(Change(path, status[0], int(old_mode, 8), int(new_mode, 8), old_blob))
    return sorted(changes, key=lambda c: c.path)
