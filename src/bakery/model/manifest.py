"""A baked tree's ``.bakery/manifest.json`` read back as checked data.

The manifest sits in a tree the user edits and may come from anyone (a tree in a CI
artifact, a ``.failed`` folder): every field bakery acts on is checked here, once. Paths
go through the one path validator (a manifest listing ``/home/u/.ssh/id_rsa`` must not make
``refresh`` copy that file into a port), commit ids must be 40 hex digits (never an option
git would read, such as ``--output=...``), the version must be a plain name (it names
``patches/<series>/<version>``). A manifest that breaks a rule is one line, exit 2.
This is the one reader: every command that acts on a manifest reads it here, as a
:class:`Manifest`, never as a dict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast, get_args

from bakery.errors import UsageError
from bakery.model.report import MANIFEST, Proof, read_proof
from bakery.model.results import BakeStatus
from bakery.safety import limits, paths

_COMMIT = re.compile(r"[0-9a-f]{40}")
#: The key of a ``port --update`` tree's manifest that names the series' diffs (name ->
#: sha256) it carries (bakery.patch.provenance).
CARRIES = "carries_series"
#: The key of a ``port --update`` conflict tree's manifest that names the files it left.
UPDATE_FILES = "update_files"


@dataclass(frozen=True)
class BakedDiff:
    """One diff the tree was baked from, in the order baked."""

    name: str
    #: the files it touches
    files: list[str]
    #: its commit in the tree (trees baked before per-diff commits have none)
    commit: str | None = None
    #: the sha256 of the diff's bytes, and how it applied (an ``Outcome``'s value), as
    #: the report says: a wheel's ``bakery.json`` carries them
    sha256: str | None = None
    status: str | None = None

    def to_json(self) -> dict[str, object]:
        """The diff as a wheel's ``bakery.json`` lists it."""
        return {
            "name": self.name,
            "sha256": self.sha256,
            "status": self.status,
            "commit": self.commit,
        }


@dataclass
class Manifest:
    #: what the bake came to: "baked", or "conflict" for a ``.failed`` attempt; None for a
    #: status bakery does not write (such a tree is neither)
    status: BakeStatus | None
    version: str | None
    pristine_commit: str | None
    head: str | None
    strip: int
    root: str
    port: str | None
    #: the diffs in the order baked
    diffs: list[BakedDiff] = field(default_factory=list)
    #: path -> sha256 of every file the bake wrote
    files: dict[str, str] = field(default_factory=dict)
    #: the series the tree was baked from: its name, and the folder it was read from
    series_name: str | None = None
    series_path: str | None = None
    #: the diff a conflicted bake stopped at (a ``.failed`` attempt)
    stopped_at: str | None = None
    #: a ``port --update`` tree: the series' diffs (name -> sha256) it carries
    carries: dict[str, str] | None = None
    #: what was known of the tree when it was baked (issue 45; None in older manifests):
    #: ``unverified`` or ``stale``; a verify's verdict is kept in the cache, by content
    #: (commands.proof), never written into the tree
    proof: Proof | None = None
    #: what the tree baked was (``vllm.identity``): its name (``0.34.0+g<commit>``), and
    #: whether its files are the release it claims (None: not recorded, a release)
    identity: str | None = None
    pristine: bool | None = None
    #: the release a tree that is not one says it is (``vllm.identity.claims``)
    claims: str | None = None
    #: a ``port --update`` conflict tree: path -> sha256 of each file update left there
    update_files: dict[str, str] | None = None
    #: the upstream commit of a git+ source or a local checkout
    commit: str | None = None


class ManifestError(UsageError):
    """A manifest that is not what bakery writes."""


def read(tree: Path) -> Manifest | None:
    """The tree's manifest, checked; None when there is none (not a baked tree)."""
    path = tree / MANIFEST
    try:
        if path.is_symlink() or not path.is_file():
            return None
        if path.stat().st_size > limits.MAX_REPORT:
            raise ManifestError(f"{path}: larger than {limits.MAX_REPORT} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        raise ManifestError(f"{path}: not a bakery manifest ({type(e).__name__})") from None
    return parse(data, str(path))


def _get(d: object, key: str, types: type | tuple[type, ...], where: str) -> object:
    if not isinstance(d, dict):
        raise ManifestError(f"{where}: not a bakery manifest (expected an object)")
    value = d.get(key)
    if value is not None and not isinstance(value, types):
        raise ManifestError(f"{where}: {key} has the wrong type")
    return value


def _list(d: object, key: str, where: str) -> list[object]:
    value = _get(d, key, list, where)
    return value if isinstance(value, list) else []


def _dict(d: object, key: str, where: str) -> dict[str, object]:
    value = _get(d, key, dict, where)
    return value if isinstance(value, dict) else {}


def _str(d: object, key: str, where: str) -> str | None:
    value = _get(d, key, str, where)
    return value if isinstance(value, str) else None


def _commit(value: object, key: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _COMMIT.fullmatch(value):
        raise ManifestError(f"{where}: {key} is not a commit id")
    return value


def parse(data: object, where: str) -> Manifest:
    version = _str(_dict(data, "vllm", where), "version", where)
    layout = _dict(data, "layout", where)
    strip = _get(layout, "strip", int, where)
    root = _str(layout, "root", where) or ""
    if root:
        paths.rel_path(root, f"{where}: layout.root")
    port = _str(data, "port", where)
    if port is not None:
        paths.rel_path(port, f"{where}: port")
    diffs = []
    for d in _list(data, "diffs", where):
        name = paths.name(_str(d, "name", where), f"{where}: diff name")
        listed = [
            paths.rel_path(_str(f, "path", where), f"{where}: {name}")
            for f in _list(d, "files", where)
        ]
        commit = _commit(_get(d, "commit", str, where), f"{name}: commit", where)
        digest, status = _str(d, "sha256", where), _str(d, "status", where)
        diffs.append(BakedDiff(name, listed, commit, digest, status))
    files: dict[str, str] = {}
    for rel, sha in _dict(data, "files", where).items():
        files[paths.rel_path(rel, f"{where}: files")] = str(sha)
    series = _dict(data, "series", where)
    ident = _dict(_dict(data, "vllm", where), "identity", where)
    pristine = _get(ident, "pristine", bool, where)
    return Manifest(
        status=_status(_str(data, "status", where)),
        version=paths.name(version, f"{where}: vllm.version") if version is not None else None,
        pristine_commit=_commit(
            _get(data, "pristine_commit", str, where), "pristine_commit", where
        ),
        head=_commit(_get(data, "head", str, where), "head", where),
        strip=strip if isinstance(strip, int) and 0 <= strip <= 16 else 1,
        root=root,
        port=port,
        diffs=diffs,
        files=files,
        series_name=_str(series, "name", where),
        series_path=_str(series, "path", where),
        stopped_at=_str(data, "stopped_at", where),
        carries=_carries(data, where),
        proof=read_proof(_get(data, "proof", dict, where)),
        identity=_str(ident, "version", where),
        claims=_str(ident, "claims", where),
        update_files=_sha_map(data, UPDATE_FILES, where),
        pristine=pristine if isinstance(pristine, bool) else None,
        commit=_commit(_get(_dict(data, "vllm", where), "commit", str, where), "commit", where),
    )


def _status(value: str | None) -> BakeStatus | None:
    return cast("BakeStatus", value) if value in get_args(BakeStatus) else None


def _carries(data: object, where: str) -> dict[str, str] | None:
    return _sha_map(data, CARRIES, where)


def _sha_map(data: object, key: str, where: str) -> dict[str, str] | None:
    if _get(data, key, dict, where) is None:
        return None
    return {str(name): str(sha) for name, sha in _dict(data, key, where).items()}
