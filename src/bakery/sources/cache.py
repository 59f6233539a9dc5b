"""bakery's cache: downloaded source distributions and extracted pristine trees.

Layout under the user's cache folder (``BAKERY_CACHE_DIR`` overrides it)::

    README            what this folder is
    locks/KEY.lock    one lock per entry: concurrent bakes lock, then look again
    locks/KEY.use     held (shared) by each bake reading the entry, until its copy is done
    sdists/           vllm-X.tar.gz, sha256-checked against the index
    git/              bare mirrors of git+URL sources
    trees/KEY/        an extracted tree whose .git holds the pristine commit: one pack of
                      stored (uncompressed) objects and an index with the files' stat data,
                      written by unpack.py in the pass that extracts the files
    trees/KEY.json    written last: the entry is complete (source, sha256, commit, format)

Every entry (a release: its tree, marker and sdist; a git tree; a git mirror) has the lock
of its key, held while it is built, read or removed (``bakery cache clean``, see
housekeeping.py); the marker's mtime (a mirror's own) is the time it was last used.

Entries are built in a temporary folder beside their final place and renamed into it.
A damaged entry (files changed since extraction: ``git status`` is not clean, or its
HEAD is not the recorded commit, or its ``.git`` holds configuration or hooks bakery did
not write: a cache restored from another CI run is not trusted) is removed and built
again, and so is an entry of an older ``FORMAT`` (the same release must give the same
pristine commit on every machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.git import repo as gitrepo
from bakery.outputs import replace_bytes
from bakery.safety import cachepolicy, paths

#: The way entries are built. 2: unpack.py (every file of the archive in the commit, one
#: pack); 1 was `git add` (files the archive's .gitignore names were left out).
FORMAT = "2"

_README = """This folder is bakery's cache of vLLM source distributions and pristine trees.
It is safe to delete; bakery downloads and extracts again what it needs.
`bakery cache list` shows its entries, `bakery cache clean --keep N` removes all but
the N used last (without a bake in progress losing its tree).
"""


def discard(folder: Path) -> None:
    """Remove a folder being abandoned (a staging folder, a killed build). A child process
    of a bake that was interrupted or killed (cp, git) may write into it a moment longer:
    remove again until it is gone, for up to two seconds. A link is unlinked, never
    followed."""
    if os.path.islink(folder):
        cachepolicy.remove(folder)
        return
    for _ in range(100):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        time.sleep(0.02)


@dataclass
class Entry:
    tree: Path
    meta: dict[str, str]
    #: tree_entry(defer=True): the ``git status`` still running; see Cache.confirm.
    check: gitutil.Pending | None = None


class EntryBusy(SourceError):
    """Cache.lock(wait=False) of an entry that another process holds."""


class Hold:
    """An entry in use: a shared ``flock`` on ``locks/KEY.use``, from the bake's lookup of
    the entry to the end of its copy (Pristine.close, or the process's exit). ``bakery
    cache clean`` takes it exclusively, without waiting, before it removes the entry; the
    key's lock alone covers only the lookup and the build. Where there is no fcntl
    (Windows), no hold is taken."""

    def __init__(self, path: Path, *, exclusive: bool = False) -> None:
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            raise EntryBusy(f"cache entry {path.stem} is in use") from None
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class CacheChanged(SourceError):
    """A cache entry turned out damaged after a bake began reading it (see confirm)."""


def _head(tree: Path) -> str:
    read = gitutil.read_head(tree / ".git")
    return read[1] if read is not None else gitutil.head(tree)


def _meta_ok(meta: object) -> bool:
    """An entry's marker is data too (a restored cache): its version names folders
    (build/<series>-<version>, a port), its commit is handed to git."""
    if not isinstance(meta, dict):
        return False
    version, commit = meta.get("version"), meta.get("commit")
    if version is not None and (
        not isinstance(version, str)
        or paths.unsafe(version)
        or "/" in version
        or version.startswith(".")
    ):
        return False
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return False
    return all(isinstance(v, str) or v is None for v in meta.values())


class Cache:
    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            env = os.environ.get("BAKERY_CACHE_DIR")
            if env:
                root = Path(env)
            else:
                import platformdirs  # only here: it is slow to import

                root = platformdirs.user_cache_path("bakery")
        self.root = root
        #: what was found damaged and removed (the commands say it once)
        self.notes: list[str] = []

    def path(self, sub: str) -> Path:
        """The cache's top folder sub (``trees``, ``git``...), made if missing. One that is
        a link or a file (a planted cache) is removed, the link itself, and made again:
        nothing in the cache is followed out of it (safety.cachepolicy)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            p = self.root if sub == "." else cachepolicy.top(self.root, sub, repair=True)
            readme = self.root / "README"
            if not os.path.lexists(readme):
                readme.write_text(_README)
        except OSError as e:
            raise SourceError(f"cache folder {self.root}: {e.strerror}") from None
        if p is None:
            raise SourceError(f"cache folder {self.root}: {sub} is not a folder")
        return p

    @staticmethod
    def touch(path: Path) -> None:
        """Note that an entry was used now (its marker's, or a mirror's, mtime): ``bakery
        cache clean --keep N`` keeps the N used last."""
        with contextlib.suppress(OSError):  # a read-only cache still bakes; its ages are off
            os.utime(path)

    @contextmanager
    def lock(self, key: str, *, wait: bool = True) -> Iterator[None]:
        """key's lock (across processes). Without wait, EntryBusy at once where another
        process holds it (``bakery cache clean`` leaves a bake's entry alone)."""
        lock = FileLock(str(self.path("locks") / f"{key}.lock"), timeout=-1 if wait else 0)
        try:
            lock.acquire()
        except Timeout:
            raise EntryBusy(f"cache entry {key} is in use") from None
        try:
            yield
        finally:
            lock.release()

    def hold(self, key: str, *, exclusive: bool = False) -> Hold:
        """key's entry in use (see Hold); exclusive: EntryBusy at once while it is."""
        return Hold(self.path("locks") / f"{key}.use", exclusive=exclusive)

    def tree_entry(self, key: str, *, defer: bool = False) -> Entry | None:
        """The complete, intact entry for key, or None (a damaged one is removed). With
        defer, the look for changed files (``git status``, the slow part) is started and
        left running in entry.check: the caller reads the tree meanwhile, then calls
        confirm() before it trusts what it read."""
        trees = self.path("trees")
        marker = trees / f"{key}.json"
        tree = trees / key
        if cachepolicy.regular(marker) is None:
            if os.path.lexists(marker) or os.path.lexists(tree):
                self.notes.append(
                    f"the cached tree {tree} was incomplete or not bakery's; it is built again"
                )
            cachepolicy.remove(marker)  # a link, FIFO or folder named like a marker
            cachepolicy.remove(tree)  # a link is unlinked, never followed
            return None
        try:
            meta = json.loads(cachepolicy.read_text(marker, what="cache marker"))
            intact = (
                _meta_ok(meta)
                and meta.get("format") == FORMAT
                and cachepolicy.is_real_dir(tree)
                and gitrepo.intact(tree / ".git")  # config, hooks: what bakery wrote
                and _head(tree) == meta["commit"]
            )
            if intact and defer:
                self.touch(marker)
                return Entry(tree, meta, gitutil.Pending(tree, *gitutil.status_args(refresh=True)))
            intact = intact and not gitutil.dirty(tree, refresh=True)
        except (OSError, ValueError, KeyError, RecursionError, gitutil.GitError):
            intact = False
        except cachepolicy.CacheRefused:
            intact = False
        if not intact:
            self.notes.append(
                f"the cached tree {tree} was changed since bakery built it; it is built again"
            )
            cachepolicy.remove(marker)
            cachepolicy.remove(tree)
            return None
        self.touch(marker)
        return Entry(tree, meta)

    def confirm(self, key: str, entry: Entry) -> None:
        """Wait for a deferred entry's look for changed files; if the tree was changed
        (somebody edited the cache), the entry is removed and CacheChanged raised: what
        was read from it must be read again from a new entry."""
        if entry.check is None:
            return
        code, out = entry.check.result()
        if code == 0 and not out.strip():
            return
        with self.lock(key):
            self.tree_entry(key)  # looks again, now waiting: removes the damaged entry
        raise CacheChanged(f"the cached tree {entry.tree} had changed files; it is extracted again")

    @contextmanager
    def building(self, key: str) -> Iterator[Path]:
        """A temporary folder to build key's entry in. The caller holds key's lock, so any
        other build folder of key was left by a killed build: it is removed first."""
        trees = self.path("trees")
        stale = re.compile(re.escape(f".build-{key}-") + r"[a-z0-9_]{8}")  # mkdtemp's names
        for p in trees.iterdir():
            if stale.fullmatch(p.name):
                if cachepolicy.is_real_dir(p):
                    discard(p)
                else:
                    cachepolicy.remove(p)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=trees))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def commit_tree(self, key: str, built: Path, meta: dict[str, str | None]) -> Entry:
        """Move a built tree into place, then write its marker (the entry is complete)."""
        trees = self.path("trees")
        final = trees / key
        cachepolicy.remove(final)  # a link left there is unlinked, never followed
        cachepolicy.remove(trees / f"{key}.json")
        os.replace(built, final)
        meta = {**meta, "commit": gitutil.head(final), "format": FORMAT}
        marker = trees / f"{key}.json"
        replace_bytes(marker, json.dumps(meta, indent=2, sort_keys=True).encode())
        return Entry(final, {k: v for k, v in meta.items() if v is not None})
