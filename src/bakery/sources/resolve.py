"""Pristine vLLM trees: a release from the package index, a local path, or ``git+URL@REF``.

Releases and git refs are cached (see cache.py) as an extracted tree holding a git repo
with one deterministic commit, both written in one pass over the archive (unpack.py), so a
bake copies files and clones history without extracting, adding or hashing the tree
again. Local paths are read and never changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.safety import limits, paths
from bakery.safety.urls import redact, redact_text
from bakery.sources import bounded
from bakery.sources.cache import Cache, Entry

#: (bytes done, bytes total or None) while downloading.
Progress = Callable[[int, int | None], None]

DEFAULT_INDEX = "https://pypi.org/simple"
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"


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
    #: resolve(defer_check=True) of a cached tree: its look for changed files, running.
    pending: tuple[Cache, str, Entry] | None = field(default=None, repr=False, compare=False)

    def confirm(self) -> None:
        """Wait for the cached tree's look for changed files (a no-op for other trees);
        raises cache.CacheChanged if the tree had been changed."""
        if self.pending is not None:
            cache, key, entry = self.pending
            self.pending = None
            cache.confirm(key, entry)

    def close(self) -> None:
        """Stop a look that nobody waited for (the bake failed before its copy)."""
        if self.pending is not None and self.pending[2].check is not None:
            self.pending[2].check.cancel()
        self.pending = None

    def file(self, rel: str) -> Path:
        if self.package_dir is not None:
            head, _, rest = rel.partition("/")
            if head == "vllm":
                return self.package_dir / rest
        return self.tree / rel


def index_url() -> str:
    return os.environ.get("BAKERY_INDEX_URL", DEFAULT_INDEX).rstrip("/")


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
        return _git_source(spec[4:], cache, defer_check)
    path = Path(spec).expanduser()
    if path.exists():
        return _local_source(path, allow_dirty)
    if is_version(spec):
        return release(spec, cache, progress, defer_check)
    raise SourceError(f"--vllm {spec!r}: not a release version, an existing path, or git+URL@REF")


# --- the package index -----------------------------------------------------------------------


def _fetch_json(url: str) -> object:
    import urllib.error  # here, not above: urllib and tarfile slow every start
    import urllib.request

    req = bounded.request(url, _JSON_ACCEPT)
    try:
        with urllib.request.urlopen(req, timeout=limits.NET_TIMEOUT) as resp:
            return json.loads(bounded.read_bounded(resp, limits.MAX_INDEX_ANSWER, url))
    except RecursionError:
        raise SourceError(f"{redact(url)}: the index's answer is nested too deeply") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise SourceError(
            f"cannot read the package index at {redact(url)}: {redact_text(str(e))}"
        ) from None


def index_files(project: str = "vllm") -> list[bounded.IndexFile]:
    page = f"{index_url()}/{project}/"
    return bounded.checked_files(_fetch_json(page), page)


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


def _sdist_entry(version: str) -> tuple[str, str, int | None]:
    want = f"vllm-{version}.tar.gz"
    page = f"{index_url()}/vllm/"
    for f in index_files():
        if f.filename == want:
            if not f.sha256:
                raise SourceError(f"{want}: the index gives no sha256")
            return bounded.file_url(f.url, page), f.sha256, f.size
    raise SourceError(f"vLLM {version} has no source distribution on {redact(index_url())}")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(
    url: str, dest: Path, sha256: str, size: int | None, progress: Progress | None
) -> None:
    import urllib.error
    import urllib.request

    # Called under the entry's lock: another .part of dest was left by a killed download.
    for stale in dest.parent.iterdir():
        if re.fullmatch(re.escape(dest.name) + r"\.\d+\.part", stale.name):
            stale.unlink(missing_ok=True)
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    h = hashlib.sha256()
    done = 0
    most = bounded.download_limit(size)
    try:
        with (
            urllib.request.urlopen(bounded.request(url), timeout=limits.NET_TIMEOUT) as resp,
            part.open("wb") as out,
        ):
            total = size or _content_length(resp) or None
            while chunk := resp.read(1 << 20):
                done += len(chunk)
                if done > most:  # never more than the index said, nor than the limit
                    raise SourceError(
                        f"{redact(url)}: the download is larger than "
                        + (
                            f"the index's size ({size} bytes)"
                            if size is not None
                            else f"{most} bytes"
                        )
                    )
                out.write(chunk)
                h.update(chunk)
                if progress:
                    progress(done, total)
        if h.hexdigest() != sha256:
            raise SourceError(
                f"{redact(url)}: sha256 {h.hexdigest()} does not match the index's {sha256}"
            )
        os.replace(part, dest)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise SourceError(f"cannot download {redact(url)}: {redact_text(str(e))}") from None
    finally:
        part.unlink(missing_ok=True)


def _content_length(resp: object) -> int:
    try:
        return int(resp.headers.get("Content-Length") or 0)  # type: ignore[attr-defined]
    except ValueError:
        return 0


def _unpack(archive: Path | bytes, dest: Path, label: str, *, strip_top: bool = True) -> str:
    """The archive unpacked into dest with its one commit (see unpack.py); the commit id."""
    from bakery.sources import unpack  # tarfile and threading: only a cold bake needs them

    if isinstance(archive, Path):
        name = archive.name
        try:
            if archive.stat().st_size > limits.MAX_ARCHIVE:
                raise SourceError(f"{name}: larger than {limits.MAX_ARCHIVE} bytes")
            data = archive.read_bytes()
        except OSError as e:
            raise SourceError(f"{name}: {e.strerror}") from None
    else:
        name, data = "git archive", archive
    return unpack.unpack(data, dest, name=name, message=f"pristine {label}\n", strip_top=strip_top)


def release(
    version: str, cache: Cache, progress: Progress | None = None, defer_check: bool = False
) -> Pristine:
    """A release's source distribution, downloaded once, hash-checked and extracted once."""
    key = f"vllm-{version}"
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
            )
        url, sha, size = _sdist_entry(version)
        sdist = cache.path("sdists") / f"vllm-{version}.tar.gz"
        if not sdist.exists() or _sha256_file(sdist) != sha:
            _download(url, sdist, sha, size, progress)
        with cache.building(key) as tmp:
            top = tmp / "tree"
            top.mkdir()
            _unpack(sdist, top, f"vLLM {version}")
            entry = cache.commit_tree(
                key, top, {"source": redact(url), "sha256": sha, "version": version}
            )
        return Pristine(entry.tree, version, redact(url), sha, True)


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
    if (path / ".git").exists():
        gitutil.check_foreign(path, f"--vllm {path}")
        changes = gitutil.dirty(path)
        if changes and not allow_dirty:
            raise SourceError(
                f"--vllm {path}: the checkout has {len(changes)} uncommitted "
                "changes (commit them, or pass --allow-dirty)"
            )
    return Pristine(path, _local_version(path), str(path), None)


def _git_source(spec: str, cache: Cache, defer_check: bool = False) -> Pristine:
    url, sep, ref = spec.rpartition("@")
    if not sep or not url or "/" in ref and ref.startswith("/"):
        url, ref = spec, "HEAD"
    if not url:
        raise SourceError(f"git+{redact(spec)}: expected git+URL@REF")
    from bakery.git import remote

    mirror_key = "git-" + hashlib.sha256(url.encode()).hexdigest()[:16]
    with cache.lock(mirror_key):
        mirror = cache.path("git") / mirror_key
        try:
            remote.fetch(url, mirror)
            commit = remote.commit_of(mirror, ref)
        except SourceError as e:
            raise SourceError(f"git+{redact(spec)}: {e.message}") from None
        except gitutil.GitError as e:
            raise SourceError(
                f"git+{redact(spec)}: {e.message.rpartition(': ')[2] or 'git failed'}"
            ) from None
    key = f"{mirror_key}-{commit[:16]}"
    with cache.lock(key):
        entry = cache.tree_entry(key, defer=defer_check)
        if entry is None:
            with cache.building(key) as tmp:
                top = tmp / "tree"
                top.mkdir()
                try:
                    archive = remote.archive(mirror, commit)
                except SourceError as e:
                    raise SourceError(f"git+{redact(spec)}: {e.message}") from None
                _unpack(archive, top, f"vLLM {redact(url)}@{commit}", strip_top=False)
                version = _local_version(top)
                entry = cache.commit_tree(
                    key,
                    top,
                    {
                        "source": f"{redact(url)}@{commit}",
                        "sha256": None,
                        "version": version,
                        "commit": commit,
                    },
                )
    return Pristine(
        entry.tree,
        entry.meta.get("version"),
        entry.meta["source"],
        None,
        True,
        pending=(cache, key, entry) if entry.check else None,
    )
