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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.safety import cachepolicy, limits, paths
from bakery.safety.urls import redact, redact_url
from bakery.sources import bounded, versions
from bakery.sources.cache import Cache, Entry, Hold

if TYPE_CHECKING:
    from bakery.model.identity import Identity
    from bakery.sources.bounded import IndexFile

#: (bytes done, bytes total or None) while downloading.
Progress = Callable[[int, int | None], None]


@dataclass
class Pristine:
    """A pristine tree to bake from. ``repo`` is true when ``tree`` holds a .git whose HEAD
    is the pristine commit (cached releases and refs): bakes clone it instead of committing
    the whole tree again."""

    tree: Path
    version: str | None
    source: str
    sha256: str | None
    repo: bool = False
    #: Set for an installed package folder: it is copied to <tree>/vllm.
    package_dir: Path | None = None
    #: The upstream commit of a git+ source or a local checkout (the manifest records it).
    commit: str | None = None
    #: ``git describe --tags --long`` of a git+ source's commit, where it has a release tag.
    describe: str | None = None
    #: What the tree is (sources/identity.py), once commands ask; None until then.
    identity: Identity | None = field(default=None, compare=False)
    #: resolve(defer_check=True) of a cached tree: its look for changed files, running.
    pending: tuple[Cache, str, Entry] | None = field(default=None, repr=False, compare=False)
    #: A cached tree's entry, held in use until close() (cache clean leaves it alone).
    hold: Hold | None = field(default=None, repr=False, compare=False)

    def confirm(self) -> None:
        """Wait for the cached tree's look for changed files (a no-op for other trees);
        raises cache.CacheChanged if the tree had been changed."""
        if self.pending is not None:
            cache, key, entry = self.pending
            self.pending = None
            cache.confirm(key, entry)

    def close(self) -> None:
        """Stop a look that nobody waited for (the bake failed before its copy), and let
        the cache entry go."""
        if self.pending is not None and self.pending[2].check is not None:
            self.pending[2].check.cancel()
        self.pending = None
        if self.hold is not None:
            self.hold.release()
            self.hold = None

    def file(self, rel: str) -> Path:
        if self.package_dir is not None:
            head, _, rest = rel.partition("/")
            if head == "vllm":
                return self.package_dir / rest
        return self.tree / rel


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
    """The pristine tree spec names. defer_check: a cached tree's look for changed files
    runs on while the caller copies it (Pristine.confirm, then Pristine.close)."""
    if spec.startswith("git+"):
        from bakery.sources.gitsource import git_source

        return git_source(spec[4:], cache, defer_check)
    path = Path(spec).expanduser()
    if path.exists():
        return _local_source(path, allow_dirty)
    if spec == versions.LATEST:
        spec = latest()
    if is_version(spec):
        return release(versions.normalize(spec), cache, progress, defer_check)
    raise SourceError(
        f"--vllm {spec!r}: not a release version, {versions.LATEST!r}, an existing path, "
        "or git+URL@REF"
    )


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


def _unpack(archive: Path | bytes, dest: Path, label: str, *, strip_top: bool = True) -> str:
    """The archive unpacked into dest with its one commit (see unpack.py); the commit id."""
    from bakery.formats import unpack  # tarfile and threading: only a cold bake needs them

    if isinstance(archive, Path):
        name = archive.name
        try:
            data = cachepolicy.read_bytes(archive, limits.MAX_ARCHIVE, "archive")
        except OSError as e:
            raise SourceError(f"{name}: {e.strerror}") from None
    else:
        name, data = "git archive", archive
    try:
        return unpack.unpack(
            data, dest, name=name, message=f"pristine {label}\n", strip_top=strip_top
        )
    except MemoryError:  # one line, never a traceback (the limits should stop it first)
        raise SourceError(f"{name}: cannot extract: out of memory") from None


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
            _unpack(sdist, top, f"vLLM {version}")
            entry = cache.commit_tree(
                key, top, {"source": redact(url), "sha256": sha, "version": version}
            )
        return Pristine(entry.tree, version, redact(url), sha, True, hold=cache.hold(key))


# --- local paths and git ---------------------------------------------------------------------


def _local_version(root: Path) -> str | None:
    """PKG-INFO's Version; it names folders (build/<series>-<version>, a port), so it
    must be a plain name (refused otherwise)."""
    pkg = root / "PKG-INFO"
    if pkg.is_file() and not pkg.is_symlink():
        with pkg.open("rb") as fh:
            head = fh.read(64 * 1024).decode(errors="replace")
        for line in head.splitlines()[:20]:
            if line.startswith("Version:"):
                return paths.name(line.split(":", 1)[1].strip(), f"{pkg}: Version")
    return None


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
        path, _local_version(path), str(path), None, commit=commit, describe=describe or None
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
