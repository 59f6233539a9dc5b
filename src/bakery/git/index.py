"""git's index file (gitformat-index(5)), the one codec bakery has for it.

``write_index`` makes a new version 2 index with stat data (a release unpacked into the
cache); ``restat_index`` copies a cached repository's index onto a copy of its files with
the copies' stat data, so that ``git status`` in a baked tree trusts the files without
reading them. Written by hand because git has no command that sets stat data from another
tree without reading every file (``git update-index --refresh`` hashes them all).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IndexEntry:
    path: bytes
    mode: int
    oid: bytes
    stat: os.stat_result


def write_index(path: Path, entries: Iterable[IndexEntry]) -> None:
    """A version 2 index of the entries (no extensions), with their stat data."""
    ordered = sorted(entries, key=lambda e: e.path)
    parts = [b"DIRC", struct.pack(">II", 2, len(ordered))]
    pack_stat = struct.Struct(">10I").pack
    for e in ordered:
        st = e.stat
        entry = (
            pack_stat(
                st.st_ctime_ns // 10**9 & 0xFFFFFFFF,
                st.st_ctime_ns % 10**9,
                st.st_mtime_ns // 10**9 & 0xFFFFFFFF,
                st.st_mtime_ns % 10**9,
                st.st_dev & 0xFFFFFFFF,
                st.st_ino & 0xFFFFFFFF,
                e.mode,
                st.st_uid & 0xFFFFFFFF,
                st.st_gid & 0xFFFFFFFF,
                st.st_size & 0xFFFFFFFF,
            )
            + e.oid
            + struct.pack(">H", min(len(e.path), 0xFFF))
            + e.path
        )
        parts.append(entry + b"\0" * (8 - len(entry) % 8))
    body = b"".join(parts)
    tmp = path.with_name(f"{path.name}.bakery-{os.getpid()}")
    tmp.write_bytes(body + hashlib.sha1(body).digest())
    os.replace(tmp, path)


_STAT = struct.Struct(">10I")  # an index entry's ctime s/ns, mtime s/ns, dev, ino, mode, uid,
#                                gid, size; then the object id (20), flags (2), the path


def restat_index(tree: Path, source: Path) -> bool:
    """Write tree's .git/index as a copy of source (the cached repository's index, which git
    keeps true to the cached files) with the stat data of tree's copies. A copy is trusted
    only where its type, size and mtime are those source recorded (cp -a keeps mtimes);
    any other keeps no stat data, so git reads it. False where the index is in a form this
    does not handle (not version 2 or 3, conflicts, a split index): use read-tree then."""
    try:
        data = bytearray(source.read_bytes())
    except OSError:
        return False
    if len(data) < 32 or data[:4] != b"DIRC":
        return False
    version, count = struct.unpack_from(">II", data, 4)
    end = len(data) - 20
    trailer = bytes(data[end:])
    if version not in (2, 3) or trailer not in (bytes(20), hashlib.sha1(data[:end]).digest()):
        return False
    base = os.fsencode(tree) + b"/"
    off = 12
    for _ in range(count):
        fields = _STAT.unpack_from(data, off)
        mode, size = fields[6], fields[9]
        flags = int.from_bytes(data[off + 60 : off + 62], "big")
        if flags & 0x3000 or (flags & 0x4000 and version < 3):
            return False
        name = off + 62 + (2 if flags & 0x4000 else 0)
        nul = data.index(0, name)
        try:
            st = os.lstat(base + bytes(data[name:nul]))
        except OSError:
            st = None
        if (
            st is not None
            and stat.S_IFMT(st.st_mode) == stat.S_IFMT(mode)
            and st.st_size & 0xFFFFFFFF == size
            and st.st_mtime_ns // 10**9 == fields[2]
            and fields[3] in (0, st.st_mtime_ns % 10**9)
        ):
            ctime = divmod(st.st_ctime_ns, 10**9)
            _STAT.pack_into(
                data,
                off,
                ctime[0] & 0xFFFFFFFF,
                ctime[1],
                fields[2],
                st.st_mtime_ns % 10**9,
                st.st_dev & 0xFFFFFFFF,
                st.st_ino & 0xFFFFFFFF,
                mode,
                st.st_uid & 0xFFFFFFFF,
                st.st_gid & 0xFFFFFFFF,
                size,
            )
        elif stat.S_IFMT(mode) != 0o160000:  # a submodule's entry has no file to stat
            _STAT.pack_into(data, off, 0, 0, 0, 0, 0, 0, mode, 0, 0, 0)
        off = (nul + 8 - off) // 8 * 8 + off
    while off < end:  # extensions: a split index points at another file
        if data[off : off + 4] == b"link":
            return False
        off += 8 + int.from_bytes(data[off + 4 : off + 8], "big")
    if trailer != bytes(20):
        data[end:] = hashlib.sha1(data[:end]).digest()
    index = tree / ".git" / "index"
    tmp = index.with_name("index.bakery-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, index)
    return True
