"""What a tree is, not only what it says it is.

A local tree or a ``git+`` commit declares a version (its PKG-INFO, or for a git source
the release tag ``git describe`` finds). That is a claim: a checkout of main between two
releases still says the older one, and a tree someone edited says the release it started
from. This module compares the tree's files with the pristine release it claims (the
cached release tree, downloaded once when it is not cached) and gives a tree that differs
its own identity:

- a local tree: ``0.31.0+local.<12 hex>``, the hash of its file listing;
- a git source: ``0.31.0+g<12 hex>``, ``git describe``-like, with the commit beside it.

Files are compared by git blob id (sha1 of ``blob <size>\\0<content>``): a cached tree's
ids are read from its own commit (``git ls-tree``, nothing is hashed again), a local tree's
regular files are hashed here, each after an ``lstat`` (never through a link, never a FIFO
or a device, never more than :data:`bakery.safety.limits.MAX_TREE_FILE` bytes), in a hand
walk because no library hashes a tree the way git names blobs. A file the release has must
be in the tree unchanged; files only the sdist has (PKG-INFO, ``*.egg-info``,
``vllm/_version.py``: written by the sdist build) are not asked of a checkout, and of the
files only the tree has, those under the ``vllm/`` package count (a checkout also carries
tests, docs and CI that the sdist leaves out: they never run in the package).
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from bakery.errors import BakeryError
from bakery.git import cmd as gitutil
from bakery.model.identity import Identity
from bakery.safety import limits

if TYPE_CHECKING:
    from bakery.sources.cache import Cache
    from bakery.sources.pristine import Pristine

log = logging.getLogger(__name__)

#: Folders never part of a tree's identity (bytecode, bakery's own record, git's store).
_SKIP_DIRS = frozenset({".git", "__pycache__", ".bakery"})
#: How many differing paths a report lists (the count is always whole).
SHOWN = 20


def release_identity(version: str) -> Identity:
    return Identity(version, version, True, compared_with=version)


def _is_release(version: str | None) -> bool:
    if version is None:
        return False
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return not (v.is_devrelease or v.local is not None)


#: What a version file may hold besides literals: setuptools-scm's typing names.
_VERSION_IMPORTS = ("__future__", "typing")
_VERSION_NODES_REFUSED = (
    ast.Call,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.With,
    ast.AsyncWith,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Try,
    ast.Global,
    ast.Nonlocal,
    ast.Delete,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,
    ast.NamedExpr,
    ast.comprehension,
)


def version_data_only(path: Path) -> bool:
    """Whether ``vllm/_version.py`` is data, as the sdist build (setuptools-scm) writes it:
    names given literals and typing names, no call, definition or loop, no import but
    ``__future__`` and ``typing``. It counts on neither side of a comparison (the build
    writes it), so one that would run code when vLLM imports it makes the tree no release."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 64 * 1024:
            return False
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, _VERSION_NODES_REFUSED):
            return False
        if isinstance(node, ast.Import) or (
            isinstance(node, ast.ImportFrom) and node.module not in _VERSION_IMPORTS
        ):
            return False
    return True


def sdist_only(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    return rel == "PKG-INFO" or top.endswith(".egg-info") or rel == "vllm/_version.py"


# --- listings: path -> (mode, blob id) --------------------------------------------------------

Listing = dict[str, tuple[str, str]]


def committed_listing(tree: Path) -> Listing:
    """A cached tree's files as its own commit records them (no file is read)."""
    text = gitutil.git(tree, "ls-tree", "-r", "-z", "--full-tree", "HEAD")
    out = text.encode("utf-8", "surrogateescape")
    listing: Listing = {}
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, kind, sha = meta.decode().split(" ")
        if kind == "blob":
            listing[path.decode("utf-8", "surrogateescape")] = (mode, sha)
    return listing


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _entry(path: Path, budget: list[int]) -> tuple[str, str] | None:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "120000", _blob_id(os.fsencode(os.readlink(path)))
    if not stat.S_ISREG(st.st_mode):
        return None  # a FIFO, a socket, a device: never opened
    if st.st_size > limits.MAX_TREE_FILE or st.st_size > budget[0]:
        # never read: its id says only that it is too large to compare
        return "100644", f"too-large-{st.st_size}"
    with path.open("rb") as fh:
        data = fh.read(st.st_size + 1)
    if len(data) != st.st_size:
        return "100644", f"changed-while-read-{len(data)}"
    budget[0] -= len(data)
    return ("100755" if st.st_mode & 0o111 else "100644"), _blob_id(data)


def worktree_listing(root: Path) -> Listing:
    """A local tree's files, hashed as git would name them."""
    listing: Listing = {}
    budget = [limits.MAX_UNPACKED]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        for name in sorted(filenames + links):
            if name.endswith((".pyc", ".pyo")):
                continue
            p = here / name
            try:
                got = _entry(p, budget)
            except OSError:
                continue
            if got is not None:
                listing[p.relative_to(root).as_posix()] = got
    return listing


def digest(listing: Listing) -> str:
    h = hashlib.sha256()
    for rel in sorted(listing):
        mode, sha = listing[rel]
        h.update(f"{mode} {sha} {rel}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def differences(tree: Listing, release: Listing) -> list[str]:
    """Paths where the tree is not the release (sorted)."""
    out = []
    for rel, (mode, sha) in release.items():
        if sdist_only(rel):
            continue
        have = tree.get(rel)
        if have is None or have[1] != sha or (have[0] == "120000") != (mode == "120000"):
            out.append(rel)
    # sdist-only files count on neither side: a checkout's _version.py (a local build wrote
    # it) is no module of the release's, whether the release's copy is cached or not
    out += [r for r in tree if r not in release and r.startswith("vllm/") and not sdist_only(r)]
    return sorted(out)


# --- the identity of a Pristine -----------------------------------------------------------------


def _label(claims: str | None, pristine: Pristine, tree_sha: str) -> str:
    base = claims or "0"
    sep = "." if "+" in base else "+"
    if pristine.commit and pristine.repo:  # a git+ source: describe-like, the commit
        return f"{base}{sep}g{pristine.commit[:12]}"
    return f"{base}{sep}local.{tree_sha[:12]}"


def _release_listing(version: str, cache: Cache) -> tuple[Listing | None, str | None]:
    """The claimed release's listing (cached, else downloaded once); or why not."""
    from bakery.sources import resolve

    try:
        rel = resolve.release(version, cache)
    except BakeryError as e:
        return None, f"could not compare with the release {version}: {e.message}"
    try:
        return committed_listing(rel.tree), None
    finally:
        rel.close()


def identify(pristine: Pristine, cache: Cache) -> Identity:
    """The identity of a resolved tree. A release from the index is itself; a local tree or
    a git source is compared with the release it claims."""
    if pristine.sha256 is not None and pristine.version:  # a release, hash-checked
        return release_identity(pristine.version)
    claims = pristine.version or _described(pristine.describe)
    try:
        if pristine.repo:
            listing = committed_listing(pristine.tree)
        elif pristine.package_dir is not None:
            listing = {f"vllm/{k}": v for k, v in worktree_listing(pristine.package_dir).items()}
        else:
            listing = worktree_listing(pristine.tree)
    except (OSError, gitutil.GitError) as e:
        raise BakeryError(f"{pristine.source}: cannot read the tree's files: {e}") from None
    base = Identity(
        claims,
        _label(claims, pristine, digest(listing)),
        False,
        tree_sha256=digest(listing),
        describe=pristine.describe,
    )
    if not _is_release(claims):
        note = (
            f"{claims} is not a release: nothing to compare with"
            if claims
            else "the tree declares no version (no PKG-INFO, no release tag)"
        )
        return replace(base, note=note)
    assert claims is not None
    release, why = _release_listing(claims, cache)
    if release is None:
        log.debug("%s", why)
        return replace(base, note=why)
    diff = differences(listing, release)
    version_file = (pristine.package_dir or pristine.tree / "vllm") / "_version.py"
    if "vllm/_version.py" in listing and not version_data_only(version_file):
        diff = sorted([*diff, "vllm/_version.py"])  # sdist-only, unless it runs code
    if not diff:
        return replace(base, label=claims, pristine=True, compared_with=claims)
    return replace(base, compared_with=claims, differs=tuple(diff[:SHOWN]), count=len(diff))


def _described(describe: str | None) -> str | None:
    """The release a ``git describe --tags --long`` names (v0.31.0-12-gabc -> 0.31.0)."""
    if not describe:
        return None
    tag = describe.rsplit("-", 2)[0]
    tag = tag[1:] if tag.startswith("v") else tag
    try:
        return str(Version(tag))
    except InvalidVersion:
        return None
