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
    trees/KEY.json    written last: the entry is complete (source, sha256, commit, format,
                      the file list made at extraction, and its seal)

Every entry (a release: its tree, marker and sdist; a git tree; a git mirror) has the lock
of its key, held while it is built, read or removed (``bakery cache clean``, see
housekeeping.py); the marker's mtime (a mirror's own) is the time it was last used.

Entries are built in a temporary folder beside their final place and renamed into it.
A tree's marker holds its *file list*, made at extraction (from the sdist whose sha256 the
index stated, or a ``git archive``): the sha256 of every file of the tree, a link's
target, every file under ``.git/objects`` (the pristine commit and its files) and the
index's entries (path, mode, object). The marker is sealed (:mod:`bakery.safety.seal`:
an HMAC under the user's key, kept outside the cache), and before a cached tree is used
the seal is checked and the tree hashed again against the list: a tree whose files,
objects or commit were changed and committed in its own ``.git``, with its marker
rewritten to match, is not this machine's extraction, and is extracted again. (``git
status`` alone cannot tell: it trusts the index's stat data, which the cache also holds.)
Hashing vLLM 0.34.0's tree (10,300 entries, objects included) takes about 0.43 s of CPU
(/tmp script over ``file_list``, 2026-12-06); a bake runs it in a thread beside its copy.
A damaged entry (files changed since extraction: ``git status`` is not clean, or its
HEAD is not the recorded commit, or its ``.git`` holds configuration or hooks bakery did
not write: a cache restored from another CI run is not trusted) is removed and built
again, and so is an entry of an older ``FORMAT`` (the same release must give the same
pristine commit on every machine).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.git import repo as gitrepo
from bakery.outputs import OutputError, replace_bytes
from bakery.safety import cachepolicy, paths, seal

#: The way entries are built. 3: the marker holds the sealed file list; 2: unpack.py
#: (every file of the archive in the commit, one pack); 1 was `git add` (files the
#: archive's .gitignore names were left out).
FORMAT = "3"
#: The seal's kind of a tree's marker.
SEAL_KIND = "pristine-tree"

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
    #: tree_entry(defer=True): the file list's check still running; see Cache.confirm.
    files: _Background | None = None


class _Background:
    """A check running in a thread while the bake copies the tree (hashing releases the
    GIL); result() waits for it. A bake that fails first leaves it to finish alone."""

    def __init__(self, check: Callable[[], bool]) -> None:
        self._ok = False
        self._thread = threading.Thread(target=self._run, args=(check,), daemon=True)
        self._thread.start()

    def _run(self, check: Callable[[], bool]) -> None:
        try:
            self._ok = check()
        except Exception:  # any failure to hash is a tree not as listed
            self._ok = False

    def result(self) -> bool:
        self._thread.join()
        return self._ok


def _walk(root: Path, rel_dir: str, out: dict[str, str], *, skip_git: bool) -> None:
    """Every entry under root/rel_dir into out (see file_list), never following a link
    and never opening anything but a regular file."""
    with os.scandir(root / rel_dir if rel_dir else root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        if entry.is_symlink():
            out[rel] = "link:" + os.readlink(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            if not (skip_git and rel == ".git"):
                out[rel + "/"] = "dir"
                _walk(root, rel, out, skip_git=skip_git)
        elif entry.is_file(follow_symlinks=False):
            out[rel] = cachepolicy.sha256(Path(entry.path), what="cached tree file")
        else:
            out[rel] = "special"


def _index_entries(index: Path) -> str:
    """sha256 over the (path, mode, object id) of every entry of a git index (version 2
    or 3): what a bake's commit takes from it; its stat data may change (``git status``
    refreshes it) and is left out."""
    data = cachepolicy.read_bytes(index, what="cached tree index")
    if len(data) < 32 or data[:4] != b"DIRC":
        raise ValueError("not a git index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        raise ValueError(f"git index version {version}")
    h = hashlib.sha256()
    off = 12
    for _ in range(count):
        mode = int.from_bytes(data[off + 24 : off + 28], "big")
        oid = data[off + 40 : off + 60]
        flags = int.from_bytes(data[off + 60 : off + 62], "big")
        name = off + 62 + (2 if flags & 0x4000 else 0)
        nul = data.index(0, name)
        h.update(data[name:nul] + b"\0" + f"{mode:o}".encode() + b"\0" + oid)
        off = (nul + 8 - off) // 8 * 8 + off
    return h.hexdigest()


def file_list(tree: Path) -> dict[str, str]:
    """The file list of a tree (see the module docstring): relative path -> the sha256
    of a file, ``link:TARGET``, ``dir`` (a folder's path ends in ``/``) or ``special``;
    ``.git/objects`` likewise, and ``.git/index`` as :func:`_index_entries`."""
    out: dict[str, str] = {}
    _walk(tree, "", out, skip_git=True)
    git = tree / ".git"
    if cachepolicy.is_real_dir(git / "objects"):
        _walk(tree, ".git/objects", out, skip_git=False)
    if cachepolicy.regular(git / "index") is not None:
        out[".git/index"] = _index_entries(git / "index")
    return out


def _as_listed(tree: Path, files: dict[str, str]) -> bool:
    try:
        return file_list(tree) == files
    except (OSError, ValueError, cachepolicy.CacheRefused):
        return False


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
    (build/<series>-<version>, a port), its commit is handed to git. The file list and
    the seal are taken out before (see _sealed)."""
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


def _sealed(data: object) -> tuple[dict[str, str], dict[str, str]] | None:
    """(meta, file list) of a marker that carries this machine's seal, else None."""
    if not isinstance(data, dict):
        return None
    data = dict(data)
    mac = data.pop("seal", None)
    files = data.get("files")
    if not isinstance(files, dict) or not seal.valid_json(SEAL_KIND, data, mac):
        return None
    meta = {k: v for k, v in data.items() if k != "files"}
    return meta, files


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
                replace_bytes(readme, _README.encode())
        except OSError as e:
            raise SourceError(f"cache folder {self.root}: {e.strerror}") from None
        except OutputError as e:
            raise SourceError(f"cache folder {self.root}: {e}") from None
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
        why = "was changed since bakery built it"
        try:
            data = json.loads(cachepolicy.read_text(marker, what="cache marker"))
            found = _sealed(data)
            if found is None and isinstance(data, dict) and data.get("format") == FORMAT:
                why = "does not carry this machine's seal (extracted elsewhere, or edited)"
            meta, files = found if found is not None else ({}, {})
            intact = (
                found is not None
                and _meta_ok(meta)
                and meta.get("format") == FORMAT
                and cachepolicy.is_real_dir(tree)
                and gitrepo.intact(tree / ".git")  # config, hooks: what bakery wrote
                and _head(tree) == meta["commit"]
            )
            if intact and defer:
                self.touch(marker)
                return Entry(
                    tree,
                    meta,
                    gitutil.Pending(tree, *gitutil.status_args(refresh=True)),
                    _Background(lambda: _as_listed(tree, files)),
                )
            intact = intact and _as_listed(tree, files)
            intact = intact and not gitutil.dirty(tree, refresh=True)
        except (OSError, ValueError, KeyError, RecursionError, gitutil.GitError):
            intact = False
        except cachepolicy.CacheRefused:
            intact = False
        if not intact:
            self.notes.append(f"the cached tree {tree} {why}; it is built again")
            cachepolicy.remove(marker)
            cachepolicy.remove(tree)
            return None
        self.touch(marker)
        return Entry(tree, meta)

    def confirm(self, key: str, entry: Entry) -> None:
        """Wait for a deferred entry's look for changed files; if the tree was changed
        (somebody edited the cache), the entry is removed and CacheChanged raised: what
        was read from it must be read again from a new entry."""
        if entry.check is None and entry.files is None:
            return
        code, out = entry.check.result() if entry.check is not None else (0, "")
        listed = entry.files.result() if entry.files is not None else True
        if code == 0 and not out.strip() and listed:
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
        files = file_list(built)  # made here, from the archive just extracted
        os.replace(built, final)
        meta = {**meta, "commit": gitutil.head(final), "format": FORMAT}
        data: dict[str, object] = {**meta, "files": files}
        try:
            data["seal"] = seal.seal_json(SEAL_KIND, data)
        except seal.SealUnavailable as e:  # the tree is used once, never trusted again
            self.notes.append(f"the cached tree {final} is not sealed: {e}")
        marker = trees / f"{key}.json"
        replace_bytes(marker, json.dumps(data, indent=1, sort_keys=True).encode())
        return Entry(final, {k: v for k, v in meta.items() if v is not None})
