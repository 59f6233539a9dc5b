"""Unpack a source archive (a release's sdist, a ``git archive``) into a new pristine tree
and its git repository, in one pass over the archive.

One thread inflates the gzip stream while this one reads the tar members from it, writes
each file once, and hands its bytes to a pack (gitobjects.py): the commit, the pack and the
index come out of the same pass, so the tree is never read back, hashed or deflated by git.

Safety, as tarfile's "data" filter and stricter: a member's path stays inside the tree
(no absolute path, no ``..``, no ``.git``), files are written with O_NOFOLLOW into folders
bakery made, links are made last and only when every link resolves inside the tree (with
the other links of the archive followed), a hard link becomes a copy of an earlier file,
devices and fifos are refused, and modes are 644 or 755 (no setuid, no world-write).
Any refusal is one SourceError line naming the archive and the member.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from bakery.errors import SourceError
from bakery.formats import tarstream
from bakery.git import cmd as gitutil
from bakery.git import index as gitindex
from bakery.git import objects as go
from bakery.git import repo as gitrepo
from bakery.safety import limits

_CHUNK = 1 << 20  # compressed bytes inflated at a time
_OUT_CHUNK = 16 << 20  # inflated bytes handed on at a time (a bomb never lands whole)
#: Bytes of files read from the archive and waiting for a writer thread.
_PENDING = 64 << 20
_WRITERS = min(os.cpu_count() or 1, 4)  # threads writing files


class _TarStream:
    """A read-only stream of the archive's tar bytes. A .tar.gz is inflated by a thread
    (zlib releases the GIL) while the caller parses what came before."""

    def __init__(self, data: bytes) -> None:
        # at most 8 x _OUT_CHUNK inflated bytes wait for the reader (a bomb never piles up)
        self._chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
        self._pos = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        if data[:2] != b"\x1f\x8b":  # a plain tar (git archive)
            if len(data) > limits.MAX_UNPACKED:
                raise SourceError(f"larger than {limits.MAX_UNPACKED} bytes")
            self._cur, self._done = memoryview(data), True
            return
        self._cur, self._done = memoryview(b""), False
        self._thread = threading.Thread(
            target=self._inflate, args=(data,), daemon=True, name="bakery-inflate"
        )
        self._thread.start()

    def _inflate(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            total = 0
            # gzip members one after another; what follows the last is ignored, as gzip
            # and tar do (the archive's sha256 was checked before this)
            while view[:2].tobytes() == b"\x1f\x8b":
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                chunk: bytes | memoryview = b""
                while not inflate.eof:
                    if not chunk and view:
                        chunk, view = view[:_CHUNK], view[_CHUNK:]
                    # at most _OUT_CHUNK at a time: a bomb is stopped, never held whole
                    out = inflate.decompress(chunk, _OUT_CHUNK)
                    chunk = inflate.unconsumed_tail
                    if not out and not chunk and not view and not inflate.eof:
                        raise SourceError("the archive is cut short")
                    total += len(out)
                    if total > limits.MAX_UNPACKED:
                        raise SourceError(
                            f"it inflates to more than {limits.MAX_UNPACKED} bytes (a gzip bomb?)"
                        )
                    if out and not self._put(out):
                        return
                if inflate.unused_data:
                    view = memoryview(inflate.unused_data + bytes(view))
            self._put(None)
        except BaseException as e:  # handed to the reading thread
            self._put(e)

    def _put(self, item: bytes | BaseException | None) -> bool:
        while not self._stop:
            try:
                self._chunks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read(self, n: int = -1) -> bytes:
        out: list[bytes | memoryview] = []
        want = n if n >= 0 else 1 << 62
        while want > 0:
            if self._pos >= len(self._cur):
                if self._done:
                    break
                item = self._chunks.get()
                if item is None:
                    self._done = True
                    break
                if isinstance(item, BaseException):
                    self._done = True
                    raise item
                self._cur, self._pos = memoryview(item), 0
            piece = self._cur[self._pos : self._pos + want]
            self._pos += len(piece)
            want -= len(piece)
            out.append(piece)
        return b"".join(out)

    def close(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join()


def _member_path(name: str, strip_top: bool, top: list[str]) -> str:
    """The member's path inside the tree ("" for the top folder itself)."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise ValueError("a path outside the tree")
    if any(p.lower() == ".git" for p in parts):
        raise ValueError("a .git folder inside the archive")
    if strip_top:
        if not parts:
            raise ValueError("an empty name")
        if not top:
            top.append(parts[0])
        elif parts[0] != top[0]:
            raise ValueError(f"a second top folder (the first is {top[0]!r})")
        parts = parts[1:]
    return "/".join(parts)


def _resolve(path: list[str], links: dict[str, str]) -> list[str]:
    """path (components from the tree's root) with every link of the archive followed;
    raises ValueError if it leaves the tree. Components are taken from one stack, as the
    kernel does, and at most MAX_LINK_STEPS links are followed in all: the work is linear
    in the path and the links followed (a recursive walk re-resolves what a link's target
    shares with others, exponential in a chain of links)."""
    todo = list(reversed(path))
    out: list[str] = []
    steps = 0
    while todo:
        comp = todo.pop()
        if comp in ("", "."):
            continue
        if comp == "..":
            if not out:
                raise ValueError("a link that leads outside the tree")
            out.pop()
            continue
        out.append(comp)
        target = links.get("/".join(out))
        if target is not None:
            steps += 1
            if steps > limits.MAX_LINK_STEPS:
                raise ValueError(f"more than {limits.MAX_LINK_STEPS} links in a row (or a loop)")
            if target.startswith("/"):
                raise ValueError("a link to an absolute path")
            out.pop()
            todo.extend(reversed(target.split("/")))
    return out


class _Tree:
    """The tree being written, and what the repository needs of it. This thread checks
    each member and makes the folders; writer threads write the files and hash them (the
    kernel's work of making 7,000 files runs on every core)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pack = go.Pack()
        self.entries: dict[str, gitindex.IndexEntry] = {}
        self.dirs: set[str] = {""}
        self.links: dict[str, str] = {}
        #: file -> (executable, its write); the content is not kept (read back from the
        #: file for a hard link): the tree is never held in memory
        self.files: dict[str, tuple[bool, Future[gitindex.IndexEntry]]] = {}
        self._pending: deque[tuple[Future[gitindex.IndexEntry], int]] = deque()
        self._pending_bytes = 0
        self._pool = ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="bakery-write")

    def mkdir(self, rel: str) -> None:
        if rel in self.dirs:
            return
        if rel in self.files or rel in self.links:
            raise ValueError("a folder where the archive has a file")
        parent = rel.rpartition("/")[0]
        self.mkdir(parent)
        os.mkdir(self.root / rel, 0o755)
        self.dirs.add(rel)

    def write(self, rel: str, data: bytes, executable: bool, mtime: int) -> None:
        if rel in self.dirs or rel in self.links:
            raise ValueError("a file where the archive has a folder or a link")
        self.mkdir(rel.rpartition("/")[0])
        earlier = self.files.get(rel)
        if earlier is not None:  # a later member of the same name wins, as with tar
            earlier[1].result()
            os.unlink(self.root / rel)
        job = self._pool.submit(self._write, rel, data, executable, mtime)
        self.files[rel] = (executable, job)
        # at most _PENDING bytes wait for a writer: the archive is never held whole
        self._pending.append((job, len(data)))
        self._pending_bytes += len(data)
        while self._pending_bytes > _PENDING and self._pending:
            done, size = self._pending.popleft()
            done.result()
            self._pending_bytes -= size

    def content(self, rel: str) -> tuple[bytes, bool] | None:
        """An earlier file's bytes and executable bit (a hard link's), read back."""
        found = self.files.get(rel)
        if found is None:
            return None
        found[1].result()
        fd = os.open(self.root / rel, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limits.MAX_FILE + 1), found[0]

    def _write(self, rel: str, data: bytes, executable: bool, mtime: int) -> gitindex.IndexEntry:
        path = self.root / rel
        fd = os.open(
            path,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            0o755 if executable else 0o644,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mtime >= 0:  # the archive's times: git's index then never sees a racy file
                os.utime(fd, ns=(mtime * 10**9, mtime * 10**9))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        oid = self.pack.add(go.OBJ_BLOB, data)
        return gitindex.IndexEntry(
            os.fsencode(rel), go.MODE_EXEC if executable else go.MODE_FILE, oid, st
        )

    def finish_files(self) -> None:
        """Wait for every write; the first failure is raised (OSError)."""
        for rel, (_, job) in self.files.items():
            self.entries[rel] = job.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def make_links(self) -> None:
        for rel, target in sorted(self.links.items()):
            _resolve(rel.split("/")[:-1] + target.split("/"), self.links)  # ValueError
            if rel in self.dirs or rel in self.files:
                raise ValueError(f"{rel!r}: a link where the archive has a file or folder")
            self.mkdir(rel.rpartition("/")[0])
            path = self.root / rel
            os.symlink(target, path)
            oid = self.pack.add(go.OBJ_BLOB, os.fsencode(target))
            link = gitindex.IndexEntry(os.fsencode(rel), go.MODE_LINK, oid, os.lstat(path))
            self.entries[rel] = link


def _counted(found: Iterator[tarstream.Member]) -> Iterator[tarstream.Member]:
    """The members, refused past limits.MAX_MEMBERS."""
    for count, m in enumerate(found, 1):
        if count > limits.MAX_MEMBERS:
            raise ValueError(f"more than {limits.MAX_MEMBERS} members")
        yield m


def unpack(archive: bytes, dest: Path, *, name: str, message: str, strip_top: bool = True) -> str:
    """Unpack archive (.tar.gz or .tar bytes, ``name`` in errors) into dest, an empty
    folder, without its top folder (strip_top): a repository whose one commit (bakery's
    identity and date, ``message``) holds every file, with an index true to the files.
    Returns the commit id."""
    tree = _Tree(dest)
    gitutil.git(dest, "init", "-q")
    gitrepo.write_new_config(dest / ".git")
    stream = _TarStream(archive)
    top: list[str] = []
    member = "?"
    try:
        for m in _counted(tarstream.members(stream.read)):
            member = m.name
            rel = _member_path(m.name, strip_top, top)
            if m.kind == tarstream.DIR:
                if rel:
                    tree.mkdir(rel)
            elif m.kind == tarstream.FILE:
                if not rel:
                    raise ValueError("a file at the top")
                tree.write(rel, m.data, bool(m.mode & 0o100), m.mtime)
            elif m.kind == tarstream.SYMLINK:
                if not rel:
                    raise ValueError("a link at the top")
                if m.linkname.startswith("/") or not m.linkname:
                    raise ValueError("a link to an absolute path")
                if rel in tree.links or rel in tree.files or rel in tree.dirs:
                    raise ValueError("a link where the archive has a file or folder")
                tree.links[rel] = m.linkname
            elif m.kind == tarstream.HARDLINK:
                first = tree.content(_member_path(m.linkname, strip_top, top))
                if first is None:
                    raise ValueError("a hard link to no earlier file of the archive")
                tree.write(rel, first[0], first[1], m.mtime)
            else:
                raise ValueError("a device, fifo or other special file")
        member = "?"
        tree.finish_files()
        tree.make_links()
    except (tarstream.TarError, zlib.error) as e:
        raise SourceError(f"{name}: cannot extract: {e}") from None
    except ValueError as e:
        raise SourceError(f"{name}: member {member!r}: {e}") from None
    except SourceError as e:
        raise SourceError(
            f"{name}: cannot extract: {e}" if not e.message.startswith(name) else e.message
        ) from None
    except OSError as e:
        raise SourceError(f"{name}: cannot extract {member!r}: {e.strerror}") from None
    finally:
        stream.close()
        tree.close()
    if strip_top and not top:
        raise SourceError(f"{name}: an empty archive")
    return _commit(tree, dest, message)


def _commit(tree: _Tree, dest: Path, message: str) -> str:
    entries = list(tree.entries.values())
    root = go.add_trees(tree.pack, ((e.path, e.mode, e.oid) for e in entries))
    commit = go.add_commit(
        tree.pack, root, message, gitutil.identity("AUTHOR"), gitutil.identity("COMMITTER")
    )
    git_dir = dest / ".git"
    tree.pack.write(git_dir / "objects")
    head = (git_dir / "HEAD").read_text().strip()
    ref = head[5:] if head.startswith("ref: ") else "refs/heads/main"
    (git_dir / ref).parent.mkdir(parents=True, exist_ok=True)
    (git_dir / ref).write_text(commit.hex() + "\n")
    gitindex.write_index(git_dir / "index", entries)
    return commit.hex()
