"""The cache's one policy: what bakery trusts the cache folder for, and how every reader
and ``bakery cache list|clean`` reach into it.

The cache is data (a CI cache restored from another job, a folder anyone with the user's
rights can write), so:

- nothing in it is followed out of it: the top folders (``trees/``, ``sdists/``, ``git/``,
  ``wheels/``, ``locks/``, ``envs/``, ``verify/``), an entry, a marker, a listing, a
  verify record are used only when they are what they claim (a real folder, a regular
  file), never through a symlink at any level below
  the cache root (the root itself is the user's choice: ``BAKERY_CACHE_DIR``);
- a FIFO, socket or device is never opened (``O_NOFOLLOW | O_NONBLOCK``, then ``fstat``
  before the first read), and a read is bounded (``MAX_REPORT``, ``MAX_ARCHIVE``);
- what fails this is damaged: removed (the link, never what it names) and built again by
  the caller, or refused with one line (:class:`CacheRefused`).

Hand-written over ``pathlib``: ``Path.is_file``/``read_text`` follow links and block on a
FIFO, which is what this module exists to stop. The git side of the policy (a mirror or
an entry's ``.git`` as git reads it: ``commondir``, a gitfile, alternates, includes) is
:func:`bakery.git.remote.mirror_intact` and :func:`bakery.git.repo.intact`; they use
:func:`real_dir` and :func:`regular` from here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path

from bakery.errors import BakeryError
from bakery.safety import limits

#: The cache's top folders: each must be a real folder of the cache.
TOPS = ("trees", "sdists", "git", "wheels", "locks", "envs", "verify")


class CacheRefused(BakeryError):
    """A cache file or folder that is not what it claims (a link, a FIFO, too large)."""


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def is_real_dir(path: Path) -> bool:
    """path is a folder, not a link to one."""
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def regular(path: Path) -> os.stat_result | None:
    """path's lstat when it is a regular file (not a link, FIFO or device), else None."""
    st = _lstat(path)
    return st if st is not None and stat.S_ISREG(st.st_mode) else None


def real_dir(root: Path, path: Path) -> bool:
    """path lies under root and every folder from root down to path (path included) is a
    real folder: nothing between them is a link. root itself is not looked at."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    here = root
    for part in rel.parts:
        if part in ("", ".", ".."):
            return False
        here = here / part
        if not is_real_dir(here):
            return False
    return True


def contained(root: Path, path: Path) -> bool:
    """path's folder is a real folder under root (real_dir), and path is not a link: what
    is at path is the cache's own (a file or folder, or nothing yet)."""
    st = _lstat(path)
    if st is not None and stat.S_ISLNK(st.st_mode):
        return False
    return real_dir(root, path.parent)


def remove(path: Path) -> None:
    """Remove a cache file, link or folder without following a link: a link is unlinked
    (what it names is left alone), a real folder removed with what is in it."""
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)  # rmtree never follows links inside
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def top(root: Path, name: str, *, repair: bool) -> Path | None:
    """The cache's top folder ``name``: a real folder. One that is a link or a file is
    damage: with repair it is removed (the link itself) and made again as a folder, else
    None is returned (``cache list`` lists nothing behind it)."""
    p = root / name
    st = _lstat(p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return p
    if not repair:
        return None
    if st is not None:
        remove(p)
    p.mkdir(parents=True, exist_ok=True)
    return p if is_real_dir(p) else None


def _open(path: Path, limit: int, what: str) -> tuple[int, int]:
    """(fd, size) of a regular file at most limit bytes, opened without following a link
    and without blocking on a FIFO; CacheRefused otherwise (OSError where it is missing)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link (O_NOFOLLOW)
            raise CacheRefused(
                f"{what} {path} is a symbolic link; bakery does not follow it"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CacheRefused(f"{what} {path} is not a regular file (a FIFO or device?)")
    if st.st_size > limit:
        os.close(fd)
        raise CacheRefused(f"{what} {path} is larger than {limit} bytes")
    return fd, st.st_size


def read_bytes(path: Path, limit: int = limits.MAX_REPORT, what: str = "cache file") -> bytes:
    """The bytes of a regular file, bounded; never a link, FIFO or device (CacheRefused)."""
    fd, size = _open(path, limit, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise CacheRefused(f"{what} {path} is larger than {limit} bytes")
    return data


def read_text(path: Path, limit: int = limits.MAX_REPORT, what: str = "cache file") -> str:
    """read_bytes decoded as UTF-8 (ValueError where it is not)."""
    return read_bytes(path, limit, what).decode()


def sha256(path: Path, limit: int = limits.MAX_ARCHIVE, what: str = "cached file") -> str:
    """The sha256 of a regular file of at most limit bytes: a link to ``/dev/zero`` or a
    FIFO is refused before it is read, a file growing while read is stopped at limit."""
    fd, size = _open(path, limit, what)
    h = hashlib.sha256()
    done = 0
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(1 << 20):
            done += len(chunk)
            if done > limit:
                raise CacheRefused(f"{what} {path} is larger than {limit} bytes")
            h.update(chunk)
    return h.hexdigest()
