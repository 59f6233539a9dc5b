"""The one writer of outputs the user names (``--json``, ``--markdown``, ``--junit``).

It writes to what the user named, and never replaces it with something else:

- ``-`` is standard output; so are ``/dev/stdout``, ``/dev/fd/1`` and ``/proc/self/fd/1``
  (and likewise for standard error): bakery writes to its own descriptor, so a shell's
  ``>`` or ``>>`` redirection, a pipe or a terminal gets the report where it expects it;
- an existing FIFO, character device or other non-regular file is opened and written
  (a reader waiting on a FIFO receives the report; it is never turned into a file);
- a symlink is followed: its target receives the report (the link stays a link);
- a regular file, or a new one, is written beside itself and renamed over it (a reader
  never sees half a report), keeping an existing file's mode.

Files bakery makes itself (wheels, sdists, manifests and reports in a tree, ports, cache
markers and listings) go through :func:`replacing`, the one temp-file writer: a new file
in the target's own folder, opened ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name
(a link or file planted at any name is never written through), renamed over the target
when complete (a link at the target is replaced, not followed), removed if not.

``check()`` is called before the work starts, so a report path that cannot be written
(an empty name, a folder, a parent that is a file, a read-only folder) fails at once with
one line instead of after a whole matrix has run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from bakery.errors import UsageError

_STD_FD = re.compile(r"^/(?:dev/(?:fd/(\d+)|(stdout|stderr))|proc/self/fd/(\d+))$")


class OutputError(UsageError):
    """An output the user named that cannot be written."""


def _std_fd(target: str) -> int | None:
    if target == "-":
        return 1
    m = _STD_FD.match(os.path.abspath(target))
    if not m:
        return None
    if m.group(2):
        return 1 if m.group(2) == "stdout" else 2
    fd = int(m.group(1) or m.group(3))
    return fd if fd in (1, 2) else None


def is_stdout(target: Path | str | None) -> bool:
    return target is not None and _std_fd(str(target)) == 1


def _existing_ancestor(path: Path) -> Path:
    cur = path
    while not os.path.lexists(cur) and cur != cur.parent:
        cur = cur.parent
    return cur


def check(target: Path | str | None, what: str) -> None:
    """Refuse, before any work, an output that cannot be written (one line, exit 2)."""
    if target is None:
        return
    text = str(target)
    if text in ("", "."):
        raise OutputError(f"{what}: an empty file name")
    if _std_fd(text) is not None:
        return
    path = Path(text)
    try:
        st = os.stat(path)  # through links: what would be written
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{what} {text}: {e.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        _check_special(path, st, f"{what} {text}")
        return  # a FIFO or device: opened when the report is ready
    _check_folder(path, st is not None, f"{what} {text}")


def _check_special(path: Path, st: os.stat_result, shown: str) -> None:
    """An existing output that is not a regular file: a FIFO or a device is written."""
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{shown}: is a folder, not a file")
    if stat.S_ISSOCK(st.st_mode):
        raise OutputError(f"{shown}: is a socket")
    if not os.access(path, os.W_OK):
        raise OutputError(f"{shown}: not writable")


def _check_folder(path: Path, exists: bool, shown: str) -> None:
    """A regular file (or a new one) is replaced in its folder, or written in place."""
    real = Path(os.path.realpath(path))
    anc = _existing_ancestor(real.parent)
    if not anc.is_dir():
        raise OutputError(f"{shown}: {anc} is not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        if exists and os.access(real, os.W_OK):
            return  # written in place (see write)
        raise OutputError(f"{shown}: cannot write in {anc} (permission denied)")


def write(target: Path | str, data: bytes, what: str = "output") -> None:
    """Write data to the output the user named (see the module docstring)."""
    text = str(target)
    check(text, what)
    fd = _std_fd(text)
    if fd is not None:
        stream = sys.stdout if fd == 1 else sys.stderr  # as the CLI's own output goes
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            stream.flush()
            buffer.write(data)
            buffer.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()
        return
    path = Path(text)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{what} {text}: {e.strerror}") from None
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            out = os.open(path, os.O_WRONLY | os.O_NOCTTY)
            try:
                _write_fd(out, data)
            finally:
                os.close(out)
            return
        _replace(Path(os.path.realpath(path)), data, st)
    except OSError as e:
        raise OutputError(f"{what} {text}: {e.strerror}") from None


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace(real: Path, data: bytes, st: os.stat_result | None) -> None:
    real.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(real.parent, os.W_OK | os.X_OK) and st is not None:
        with real.open("r+b") as fh:  # a writable file in a read-only folder: in place
            fh.truncate(0)
            fh.write(data)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        if st is not None:
            mode = stat.S_IMODE(st.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        _write_fd(fd, data)
        os.close(fd)
        fd = -1
        os.replace(tmp, real)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_json(target: Path | str, data: object, what: str = "--json") -> None:
    write(target, (json.dumps(data, indent=2) + "\n").encode(), what)


def write_text(target: Path | str, text: str, what: str) -> None:
    write(target, text.encode(), what)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _new_temp(target: Path, mode: int) -> tuple[int, Path]:
    """A new file beside target that nobody else made (O_EXCL) and no link leads to."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, _NEW, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{target}: no free temporary name")


@contextmanager
def replacing(target: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """The one temp-file writer of files bakery makes (see the module docstring): yields
    a file beside target, renamed over target once the block ends, removed if it raises.
    OutputError (one line) where it cannot be written; a folder at target is refused."""
    if os.path.isdir(target) and not os.path.islink(target):
        raise OutputError(f"{target}: exists and is a folder, not a file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _new_temp(target, mode)
    except OSError as e:
        raise OutputError(f"cannot write {target}: {e.strerror or e}") from None
    fh = os.fdopen(fd, "wb")
    try:
        with fh:
            yield fh
        os.replace(tmp, target)
    except OSError as e:
        _unlink(tmp)
        raise OutputError(f"cannot write {target}: {e.strerror or e}") from None
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


def replace_bytes(target: Path, data: bytes, mode: int = 0o644) -> None:
    """data as the whole of target, through :func:`replacing`."""
    with replacing(target, mode) as fh:
        fh.write(data)
