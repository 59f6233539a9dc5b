"""Pristine vLLM trees: a release from the package index, a local path, or ``git+URL@REF``.

Which index, and how it is read, are pipconf.py and index.py; ``git+`` is gitsource.py.

Releases and git refs are cached (see cache.py) as an extracted tree holding a git repo
with one deterministic commit, both written in one pass over the archive (unpack.py), so a
bake copies files and clones history without extracting, adding or hashing the tree
again. Local paths are read and never changed.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.safety import cachepolicy, limits, paths
from bakery.safety.urls import redact, redact_url
from bakery.sources import bounded, versions
from bakery.sources import spec as sources
from bakery.sources.cache import Cache
from bakery.sources.pristine import Pristine, Progress, local_version, unpack_archive

if TYPE_CHECKING:
    from bakery.sources.bounded import IndexFile


def is_version(spec: str) -> bool:
    if os.sep in spec or spec.startswith("."):
        return False
    try:
        Version(spec)
    except InvalidVersion:
        return False
    return True


def resolve(
    spec: str,
    cache: Cache,
    *,
    allow_dirty: bool = False,
    progress: Progress | None = None,
    defer_check: bool = False,
) -> Pristine:
    """The pristine tree spec names (:mod:`bakery.sources.spec`). defer_check: a cached
    tree's look for changed files runs on while the caller copies it (Pristine.confirm,
    then Pristine.close)."""
    source = sources.parse(spec)
    if isinstance(source, sources.Git):
        from bakery.sources.gitsource import git_source

        return git_source(source.raw, cache, defer_check)
    if isinstance(source, sources.Local):
        return _local_source(source.path, allow_dirty)
    version = latest() if source.version == versions.LATEST else source.version
    return release(version, cache, progress, defer_check)


# --- the package index -----------------------------------------------------------------------


def index_files(project: str = "vllm") -> list[IndexFile]:
    from bakery.sources.index import Session

    return Session().project_files(project)


def release_versions(include_pre: bool = False) -> list[Version]:
    """Every release of vLLM on the index with a source distribution, oldest first."""
    out: set[Version] = set()
    for f in index_files():
        m = re.fullmatch(r"vllm-(.+)\.tar\.gz", f.filename)
        if not m or f.yanked:
            continue
        try:
            v = Version(m.group(1))
        except InvalidVersion:
            continue
        if include_pre or not (v.is_prerelease or v.is_devrelease):
            out.add(v)
    return sorted(out)


def _sdist_entry(version: str) -> IndexFile:
    from bakery.sources.index import Session

    want = f"vllm-{version}.tar.gz"
    session = Session()
    for f in session.project_files("vllm"):
        if f.filename == want:
            bounded.checked_sha256(f, session.shown)
            return f
    raise SourceError(f"vLLM {version} has no source distribution on {session.shown}")


def cached_sha256(path: Path) -> str | None:
    """The sha256 of a cached download, or None where there is none to trust: missing,
    or not a regular file of at most MAX_ARCHIVE bytes (a link to ``/dev/zero``, a FIFO:
    never opened; removed, the link itself, so that it is downloaded again)."""
    if cachepolicy.regular(path) is None:
        cachepolicy.remove(path)
        return None
    try:
        return cachepolicy.sha256(path, limits.MAX_ARCHIVE)
    except (OSError, cachepolicy.CacheRefused):
        cachepolicy.remove(path)
        return None


def _download(f: IndexFile, dest: Path, progress: Progress | None) -> None:
    import http.client
    import urllib.error  # here, not above: urllib and tarfile slow every start

    from bakery.sources.index import Session

    # Called under the entry's lock: another .part of dest was left by a killed download.
    for stale in dest.parent.iterdir():
        if re.fullmatch(re.escape(dest.name) + r"\.\d+\.part", stale.name):
            stale.unlink(missing_ok=True)
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    session = Session()
    h = hashlib.sha256()
    done = 0
    most = bounded.download_limit(f.size)
    try:
        new = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW  # never through a link
        with (
            session.open(f.url, timeout=limits.NET_TIMEOUT) as resp,
            os.fdopen(os.open(part, new, 0o644), "wb") as out,
        ):
            total = f.size or _content_length(resp) or None
            while chunk := resp.read(1 << 20):
                done += len(chunk)
                if done > most:  # never more than the index said, nor than the limit
                    raise SourceError(
                        f"{redact(f.url)}: the download is larger than "
                        + (
                            f"the index's size ({f.size} bytes)"
                            if f.size is not None
                            else f"{most} bytes"
                        )
                    )
                out.write(chunk)
                h.update(chunk)
                if progress:
                    progress(done, total)
        if h.hexdigest() != f.sha256:
            raise SourceError(
                f"{redact(f.url)}: sha256 {h.hexdigest()} does not match the index's {f.sha256}"
            )
        os.replace(part, dest)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        raise session.error(f.url, e) from None
    finally:
        part.unlink(missing_ok=True)


def _content_length(resp: object) -> int:
    try:
        return int(resp.headers.get("Content-Length") or 0)  # type: ignore[attr-defined]
    except ValueError:
        return 0


def release(
    version: str, cache: Cache, progress: Progress | None = None, defer_check: bool = False
) -> Pristine:
    """A release's source distribution, downloaded once, hash-checked and extracted once."""
    key = f"vllm-{version}"
    found = None
    if not (cache.path("trees") / f"{key}.json").is_file():
        # asked before the lock: a release the index lacks (0.32.9) leaves no lock file
        found = _sdist_entry(version)
    with cache.lock(key):
        entry = cache.tree_entry(key, defer=defer_check)
        if entry is not None:
            return Pristine(
                entry.tree,
                version,
                entry.meta["source"],
                entry.meta["sha256"],
                True,
                pending=(cache, key, entry) if entry.check else None,
                hold=cache.hold(key),
            )
        found = found or _sdist_entry(version)
        sha, url = str(found.sha256), redact(found.url)
        sdist = cache.path("sdists") / f"vllm-{version}.tar.gz"
        if cached_sha256(sdist) != sha:
            _download(found, sdist, progress)
        with cache.building(key) as tmp:
            top = tmp / "tree"
            top.mkdir()
            unpack_archive(sdist, top, f"vLLM {version}")
            entry = cache.commit_tree(
                key, top, {"source": redact(url), "sha256": sha, "version": version}
            )
        return Pristine(entry.tree, version, redact(url), sha, True, hold=cache.hold(key))


# --- local paths and git ---------------------------------------------------------------------


def _local_source(path: Path, allow_dirty: bool) -> Pristine:
    path = path.resolve()
    if not path.is_dir():
        raise SourceError(f"--vllm {path}: not a folder")
    if (path / "__init__.py").is_file() and path.name == "vllm" and not (path / "vllm").is_dir():
        # an installed package folder (site-packages/vllm)
        version = None
        vfile = path / "_version.py"
        if vfile.is_file():
            m = re.search(r"""version\s*=\s*['"]([^'"]+)""", vfile.read_text(errors="replace"))
            version = paths.name(m.group(1), f"{vfile}: version") if m else None
        return Pristine(path.parent, version, str(path), None, package_dir=path)
    paths.git_link(path, f"--vllm {path}")
    commit = None
    describe = ""
    if (path / ".git").exists():
        gitutil.check_foreign(path, f"--vllm {path}")
        changes = gitutil.dirty(path)
        if changes and not allow_dirty:
            raise SourceError(
                f"--vllm {path}: the checkout has {len(changes)} uncommitted "
                "changes (commit them, or pass --allow-dirty)"
            )
        head = gitutil.git(path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        commit = head.strip() or None
        if commit:  # the release it follows, for its identity (sources/identity.py)
            describe = gitutil.git(
                path, "describe", "--tags", "--long", "--match", "v[0-9]*", commit, check=False
            ).strip()
    return Pristine(
        path, local_version(path), str(path), None, commit=commit, describe=describe or None
    )


def releases(since: str | None = None, include_pre: bool = False) -> list[str]:
    """Every release with a source distribution on the index, from since on, oldest first."""
    versions.since([], since or "0")  # a --since that is no version: one line, before the index
    return versions.since(release_versions(include_pre), since or "0", include_pre)


def latest() -> str:
    """The newest final release on the index (``--vllm latest``)."""
    from bakery.sources.pipconf import configured_index

    found = release_versions(False)
    if not found:
        index = redact_url(configured_index().url)
        raise SourceError(f"no vLLM release with a source distribution on {index}")
    return str(found[-1])
