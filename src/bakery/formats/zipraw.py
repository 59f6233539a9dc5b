"""A zip archive's central directory, read raw: each entry's bytes as the archive holds
them, with the fields the wheel writer needs (APPNOTE 4.3.12-4.3.16, zip64 included).

Hand-written instead of ``zipfile`` because the baked wheel copies the upstream's entries
as they are (wheel.py): it needs each central directory entry's own bytes, which
``zipfile.ZipInfo`` does not keep, and it must be cheap. Reading vLLM's 6,190 entries
into ZipInfo objects costs about as much as ``cp`` takes to copy the whole 239 MB wheel,
this reader a tenth of that. Members are decompressed here only for the two small text
files the writer reads (METADATA, RECORD), with their CRC and size checked.

The archive is data (the index's): every entry is checked as an installer will see it.
A name must decode (UTF-8 where the entry says so) and be a normalised relative path
(no ``.``, ``..``, empty part, backslash, leading ``/`` or control character), so that
``vllm/./x.py`` cannot stand beside ``vllm/x.py`` and be the one pip installs; members
must not overlap or lie past the central directory (zip64 fields included); a member is
inflated in a stream, stopped at its stated size and at ``MAX_MEMBER`` (a deflate bomb in
RECORD never asks for more memory than that).
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

from bakery.errors import SourceError

#: The most bytes one member read whole (METADATA, RECORD) may inflate to.
MAX_MEMBER = 64 << 20

CENTRAL = struct.Struct("<IBBBBHHHHIIIHHHHHII")
LOCAL = struct.Struct("<IHHHHHIIIHH")
END = struct.Struct("<IHHHHIIH")
END64 = struct.Struct("<IQHHIIQQQQ")
LOCATOR64 = struct.Struct("<IIQI")
SIG_LOCAL, SIG_CENTRAL, SIG_END = 0x04034B50, 0x02014B50, 0x06054B50
SIG_END64, SIG_LOCATOR64 = 0x06064B50, 0x07064B50
UTF8, DESCRIPTOR, ENCRYPTED = 0x800, 0x8, 0x1
_MAX_COMMENT = 0xFFFF


class Entry(NamedTuple):
    """One central directory entry: its bytes and its decoded fields."""

    raw: bytes
    raw_name: bytes
    name: str
    flags: int
    method: int
    dostime: int
    dosdate: int
    crc: int
    csize: int
    usize: int
    offset: int  # of the local header
    create_version: int
    create_system: int
    extract_version: int
    internal_attr: int
    external_attr: int
    #: A size or the offset is in a zip64 extra field (the raw entry cannot just be
    #: given a new offset).
    zip64: bool


class Directory(NamedTuple):
    entries: list[Entry]  # in the order of their local headers in the archive
    start: int  # offset of the central directory: where the last member's bytes end


def read_directory(fd: int, label: str) -> Directory:
    size = os.fstat(fd).st_size
    tail_at = max(0, size - END.size - _MAX_COMMENT)
    tail = os.pread(fd, size - tail_at, tail_at)
    at = tail.rfind(b"PK\x05\x06")
    while at >= 0 and at + END.size + END.unpack_from(tail, at)[-1] != len(tail):
        at = tail.rfind(b"PK\x05\x06", 0, at)
    if at < 0:
        raise SourceError(f"{label}: not a zip archive (no end of central directory)")
    _, disk, cd_disk, _, count, cd_size, cd_offset, _ = END.unpack_from(tail, at)
    end_at = tail_at + at
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        count, cd_size, cd_offset = _zip64_end(fd, end_at, label)
    if disk or cd_disk or cd_offset + cd_size > end_at:
        raise SourceError(f"{label}: a damaged or multi-part zip archive")
    buf = os.pread(fd, cd_size, cd_offset)
    if count > len(buf) // CENTRAL.size + 1:
        raise SourceError(f"{label}: the central directory is cut short")
    entries = _entries(buf, count, label)
    if not entries:
        return Directory([], cd_offset)
    entries.sort(key=lambda e: e.offset)
    ends = [e.offset for e in entries[1:]] + [cd_offset]
    for a, end in zip(entries, ends, strict=True):
        # its local header (at least) and its compressed bytes, before the next member
        if a.offset + LOCAL.size + len(a.raw_name) + a.csize > end:
            raise SourceError(
                f"{label}: {a.name!r} overlaps the next member or the central directory "
                "(its sizes or offset lie)"
            )
    return Directory(entries, cd_offset)


def _name(raw: bytes, flags: int, label: str) -> str:
    """A member's name, decoded and checked as an installer would use it (see above)."""
    try:
        text = raw.decode("utf-8" if flags & UTF8 else "cp437")
    except UnicodeDecodeError:
        raise SourceError(f"{label}: a member name is not valid UTF-8 ({raw[:60]!r})") from None
    body = text[:-1] if text.endswith("/") else text
    parts = body.split("/")
    if (
        not body
        or "\\" in text
        or any(ord(c) < 32 or ord(c) == 127 for c in text)
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise SourceError(f"{label}: the member name {text[:100]!r} is not a normalised path")
    return text


def _zip64_end(fd: int, end_at: int, label: str) -> tuple[int, int, int]:
    """count, size and offset of the central directory from the zip64 end record, whose
    place the locator states: a place that is no place in the archive before the locator
    is a lie (read there, it would end in an OverflowError or EINVAL)."""
    at = end_at - LOCATOR64.size
    loc = os.pread(fd, LOCATOR64.size, at) if at >= 0 else b""
    if len(loc) != LOCATOR64.size or LOCATOR64.unpack(loc)[0] != SIG_LOCATOR64:
        raise SourceError(f"{label}: zip64 archive without its locator")
    rec_at = LOCATOR64.unpack(loc)[2]
    if rec_at > at - END64.size:
        raise SourceError(f"{label}: the zip64 locator points past the archive (it lies)")
    rec = os.pread(fd, END64.size, rec_at)
    if len(rec) != END64.size or END64.unpack(rec)[0] != SIG_END64:
        raise SourceError(f"{label}: zip64 end record missing")
    _, _, _, _, _, _, _, count, cd_size, cd_offset = END64.unpack(rec)
    return count, cd_size, cd_offset


def _entries(buf: bytes, count: int, label: str) -> list[Entry]:
    entries = []
    pos, unpack, size = 0, CENTRAL.unpack_from, CENTRAL.size
    for _ in range(count):
        try:
            (sig, create, system, extract, _, flags, method, dostime, dosdate, crc, csize,
             usize, nlen, xlen, clen, _, internal, external, offset) = unpack(buf, pos)  # fmt: skip
        except struct.error:
            raise SourceError(f"{label}: the central directory is cut short") from None
        if sig != SIG_CENTRAL:
            raise SourceError(f"{label}: a damaged central directory")
        end = pos + size + nlen + xlen + clen
        raw = buf[pos:end]
        name = raw[size : size + nlen]
        zip64 = 0xFFFFFFFF in (usize, csize, offset)
        if zip64:
            extra = raw[size + nlen : size + nlen + xlen]
            usize, csize, offset = _zip64_fields(extra, usize, csize, offset, label)
        text = _name(name, flags, label)
        entries.append(
            Entry(
                raw,
                name,
                text,
                flags,
                method,
                dostime,
                dosdate,
                crc,
                csize,
                usize,
                offset,
                create,
                system,
                extract,
                internal,
                external,
                zip64,
            )  # fmt: skip
        )
        pos = end
    return entries


def _zip64_fields(
    extra: bytes, usize: int, csize: int, offset: int, label: str
) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            if pos + 4 + length > len(extra):
                break  # a length that runs past the extra field: a lie
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            out = []
            for v in (usize, csize, offset):
                out.append(values.pop(0) if v == 0xFFFFFFFF and values else v)
            if 0xFFFFFFFF in out:
                break
            return out[0], out[1], out[2]
        pos += 4 + length
    raise SourceError(f"{label}: a zip64 entry without its zip64 fields")


def data_offset(fd: int, entry: Entry, label: str) -> int:
    """Where the member's compressed bytes begin; its local header must name it as the
    central directory does."""
    raw_name = entry.raw_name
    head = os.pread(fd, LOCAL.size + len(raw_name), entry.offset)
    if len(head) < LOCAL.size:
        raise SourceError(f"{label}: {entry.name} is cut short")
    sig, *_, nlen, xlen = LOCAL.unpack_from(head)
    if sig != SIG_LOCAL or nlen != len(raw_name) or head[LOCAL.size :] != raw_name:
        raise SourceError(f"{label}: {entry.name}: its local header and the directory differ")
    return int(entry.offset + LOCAL.size + nlen + xlen)


def read_member(fd: int, entry: Entry, label: str, limit: int = MAX_MEMBER) -> bytes:
    """A (small) member's bytes, decompressed in a stream, CRC and size checked: never
    more than its stated size, nor than limit, is inflated."""
    if entry.usize > limit or (entry.method == 0 and entry.csize > limit):
        raise SourceError(f"{label}: {entry.name}: larger than {limit} bytes")
    data = os.pread(fd, entry.csize, data_offset(fd, entry, label))
    if entry.method == 8:
        try:
            inflate = zlib.decompressobj(-15)
            data = inflate.decompress(data, entry.usize + 1)  # one byte more: a lie shows
        except zlib.error as e:
            raise SourceError(f"{label}: {entry.name}: {e}") from None
    elif entry.method != 0:
        raise SourceError(f"{label}: {entry.name}: compression method {entry.method}")
    if len(data) != entry.usize or zlib.crc32(data) != entry.crc:
        raise SourceError(f"{label}: {entry.name}: CRC or size does not match")
    return data
