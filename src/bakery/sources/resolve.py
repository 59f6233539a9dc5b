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
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
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


def _fetch_json(url: str) -> dict[str, object]:
    import urllib.error  # here, not above: urllib and tarfile slow every start
    import urllib.request

    req = urllib.request.Request(url, headers={"Accept": _JSON_ACCEPT})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise SourceError(f"cannot read the package index at {url}: {e}") from None


def index_files(project: str = "vllm") -> list[dict[str, object]]:
    data = _fetch_json(f"{index_url()}/{project}/")
    files = data.get("files")
    if not isinstance(files, list):
        raise SourceError(f"{index_url()}/{project}/: unexpected answer from the index")
    return files


def release_versions(include_pre: bool = False) -> list[Version]:
    """Every release of vLLM on the index with a source distribution, oldest first."""
    out: set[Version] = set()
    for f in index_files():
        m = re.fullmatch(r"vllm-(.+)\.tar\.gz", str(f.get("filename", "")))
        if not m or f.get("yanked"):
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
    for f in index_files():
        if f.get("filename") == want:
            hashes = f.get("hashes") or {}
            sha = hashes.get("sha256") if isinstance(hashes, dict) else None
            if not sha:
                raise SourceError(f"{want}: the index gives no sha256")
            size = f.get("size")
            return str(f["url"]), str(sha), int(size) if isinstance(size, int) else None
    raise SourceError(f"vLLM {version} has no source distribution on {index_url()}")


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
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, part.open("wb") as out:
            total = size or int(resp.headers.get("Content-Length") or 0) or None
            while chunk := resp.read(1 << 20):
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        if h.hexdigest() != sha256:
            raise SourceError(f"{url}: sha256 {h.hexdigest()} does not match the index's {sha256}")
        os.replace(part, dest)
    except (urllib.error.URLError, OSError) as e:
        raise SourceError(f"cannot download {url}: {e}") from None
    finally:
        part.unlink(missing_ok=True)


def _unpack(archive: Path | bytes, dest: Path, label: str, *, strip_top: bool = True) -> str:
    """The archive unpacked into dest with its one commit (see unpack.py); the commit id."""
    from bakery.sources import unpack  # tarfile and threading: only a cold bake needs them

    if isinstance(archive, Path):
        name = archive.name
        try:
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
            entry = cache.commit_tree(key, top, {"source": url, "sha256": sha, "version": version})
        return Pristine(entry.tree, version, url, sha, True)


# --- local paths and git ---------------------------------------------------------------------


def _local_version(root: Path) -> str | None:
    pkg = root / "PKG-INFO"
    if pkg.is_file():
        for line in pkg.read_text(errors="replace").splitlines()[:20]:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
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
            version = m.group(1) if m else None
        return Pristine(path.parent, version, str(path), None, package_dir=path)
    if (path / ".git").exists():
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
        raise SourceError(f"git+{spec}: expected git+URL@REF")
    import git as gitpython  # GitPython, imported lazily: it is slow to import

    mirror_key = "git-" + hashlib.sha256(url.encode()).hexdigest()[:16]
    with cache.lock(mirror_key):
        mirror = cache.path("git") / mirror_key
        try:
            if mirror.exists():
                repo = gitpython.Repo(mirror)
                repo.git.fetch(
                    "--quiet",
                    "--tags",
                    "origin",
                    "+refs/heads/*:refs/heads/*",
                    env=gitutil.clean_env(),
                )
            else:
                tmp = Path(tempfile.mkdtemp(dir=cache.path("git"), prefix=".clone-"))
                try:
                    gitpython.Repo.clone_from(url, tmp, bare=True, env=gitutil.clean_env())
                    os.replace(tmp, mirror)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                repo = gitpython.Repo(mirror)
            commit = repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
        except gitpython.GitCommandError as e:
            detail = (e.stderr or str(e)).strip().splitlines()
            raise SourceError(f"git+{spec}: {detail[-1] if detail else 'git failed'}") from None
        except gitpython.exc.GitError as e:  # NoSuchPath, InvalidGitRepository...
            raise SourceError(f"git+{spec}: {e}") from None
    key = f"{mirror_key}-{commit[:16]}"
    with cache.lock(key):
        entry = cache.tree_entry(key, defer=defer_check)
        if entry is None:
            with cache.building(key) as tmp:
                top = tmp / "tree"
                top.mkdir()
                archive = subprocess.run(
                    ["git", "-c", "safe.directory=*", "archive", "--format=tar", commit],
                    cwd=mirror,
                    capture_output=True,
                    env=gitutil.clean_env(),
                    check=False,
                )
                if archive.returncode:
                    raise SourceError(f"git+{spec}: git archive failed")
                _unpack(archive.stdout, top, f"vLLM {url}@{commit}", strip_top=False)
                version = _local_version(top)
                entry = cache.commit_tree(
                    key,
                    top,
                    {
                        "source": f"{url}@{commit}",
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


def git_mirror(url: str, cache: Cache) -> Path:
    """The cached bare mirror that ``git+URL@REF`` sources are read from (the same key as
    _git_source's), for reading history (bakery upstream); None of it is written here."""
    return cache.path("git") / ("git-" + hashlib.sha256(url.encode()).hexdigest()[:16])
