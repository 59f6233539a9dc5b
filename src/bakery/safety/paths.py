"""The one validator for paths and names that come from data: manifest file lists and
versions, ``series.toml``'s ``name``, a tree's ``PKG-INFO`` ``Version``, the entries of a
local checkout's git index, a ``.git`` that is a link.

A path from data is accepted only when it is relative, already normalised (no ``.``,
``..`` or empty component, no backslash), free of control characters, does not enter
``.git``, and, where a folder is given, reaches its file through no symlink of that
folder. A name (a series name, a version used as a folder name) is one such component.
Anything else is refused with one line (``UnsafeDataError``, exit 2), never repaired:
a repaired path would be a different file from the one the data meant.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bakery.errors import BakeryError


class UnsafeDataError(BakeryError):
    """A path or name taken from data that would leave its folder (or is malformed)."""


def _problem(text: str) -> str | None:
    if not text:
        return "is empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "has a control character"
    if "\\" in text:
        return "has a backslash"
    if text.startswith("/") or text.startswith("~"):
        return "is not relative"
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "is not a normalised path (., .. or an empty part)"
    if any(p.lower() == ".git" for p in parts):
        return "enters .git"
    try:
        os.fsencode(text)
    except UnicodeError:
        return "is not a valid file name"
    return None


def unsafe(text: str) -> str | None:
    """Why text is not a safe relative path, or None."""
    return _problem(text)


def rel_path(text: object, what: str) -> str:
    """text, if it is a safe relative path; else UnsafeDataError naming ``what``."""
    if not isinstance(text, str):
        raise UnsafeDataError(f"{what}: expected a path, got {type(text).__name__}")
    problem = _problem(text)
    if problem:
        raise UnsafeDataError(f"{what}: the path {text!r} {problem}")
    return text


def name(text: object, what: str) -> str:
    """text, if it can be used as one folder or file name; else UnsafeDataError."""
    rel = rel_path(text, what)
    if "/" in rel or rel.startswith("."):
        raise UnsafeDataError(f"{what}: {rel!r} is not a plain name (no '/', no leading '.')")
    return rel


def inside(root: Path, text: object, what: str) -> Path:
    """root / text, for a safe relative path whose folders under root are no symlinks
    (the file itself may be one: callers read links with lstat, never through them)."""
    rel = rel_path(text, what)
    cur = root
    for part in rel.split("/")[:-1]:
        cur = cur / part
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            break  # nothing further exists: nothing to follow
        except OSError as e:
            raise UnsafeDataError(f"{what}: {rel!r}: {e.strerror}") from None
        if stat.S_ISLNK(mode):
            raise UnsafeDataError(f"{what}: {rel!r} goes through the symlink {cur.name!r}")
    return root / rel


def git_link(tree: Path, what: str) -> None:
    """Refuse a tree whose ``.git`` is a symlink that leads nowhere (git would create the
    repository at the link's target, outside every folder bakery owns)."""
    dotgit = tree / ".git"
    if dotgit.is_symlink() and not dotgit.exists():
        raise UnsafeDataError(f"{what}: {dotgit} is a symlink to nothing; refusing to use it")


def regular_file(path: Path, what: str) -> None:
    """Refuse anything but a regular file (a FIFO would block the read for ever, a
    folder named like a file would be skipped without a word)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as e:
        raise UnsafeDataError(f"{what}: {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a folder"
            if stat.S_ISDIR(mode)
            else "a symlink"
            if stat.S_ISLNK(mode)
            else "a special file"
        )
        raise UnsafeDataError(f"{what}: {path} is {kind}, not a regular file")
