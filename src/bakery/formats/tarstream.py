"""A streaming reader of tar archives: the members of a release's sdist, in order.

Python's tarfile spends ~0.1 ms a member on its header (0.9 s of a 3 s cold bake for the
8,000 members of a vLLM sdist); this reads the same formats at a fraction of it: POSIX
ustar (with its name prefix), pax extended headers (path, linkpath, size, mtime; global
headers too), GNU long names and links (``L``, ``K``) and base-256 numbers, with header
checksums checked. tests/formats/test_unpack.py holds it to tarfile's reading of the same archives.

It only reads: what is safe to write is unpack.py's decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bakery.safety import limits

#: The most bytes of one pax or GNU long-name header (their text is read whole).
_MAX_HEADER = 1 << 20

FILE, DIR, SYMLINK, HARDLINK, OTHER = "file", "dir", "symlink", "hardlink", "other"
_KINDS = {b"0": FILE, b"\0": FILE, b"7": FILE, b"5": DIR, b"2": SYMLINK, b"1": HARDLINK}
_BLOCK = 512


class TarError(ValueError):
    """A damaged or cut-short archive."""


@dataclass(frozen=True)
class Member:
    name: str
    kind: str
    mode: int
    mtime: int
    linkname: str
    data: bytes  # a file's content; empty for the other kinds


def _number(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # GNU base-256
        n = int.from_bytes(field[1:], "big")
        return n - (1 << (8 * len(field) - 1)) if field[0] == 0xFF else n
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarError(f"a header field is not a number: {text[:20]!r}") from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """Records "LENGTH KEY=VALUE\\n"; values are UTF-8."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise TarError("a damaged pax header") from None
        record = data[space + 1 : pos + length]
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise TarError("a damaged pax header")
        key, _, value = record[:-1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


#: The latest time kept from an archive (year 2514); later ones are not kept.
_MAX_MTIME = 1 << 34


def _pax_int(text: str, key: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TarError(f"a pax {key} that is not a number: {text[:20]!r}") from None


def _mtime(text: str) -> int:
    """A pax mtime ("1700000000.5"); inf, nan and numbers past any real date are refused."""
    try:
        value = float(text)
    except ValueError:
        raise TarError(f"a pax mtime that is not a number: {text[:20]!r}") from None
    if not math.isfinite(value) or abs(value) > 1e12:
        raise TarError(f"a pax mtime out of range: {text[:20]!r}")
    return int(value)


def _size(fields: dict[str, str], size: int) -> int:
    """A member's size: the pax header's, else the block's; never negative."""
    if "size" in fields:
        size = _pax_int(fields["size"], "size")
    if size < 0:
        raise TarError("a negative member size")
    if size > limits.MAX_FILE:  # refused at its header, before any of it is read
        raise TarError(f"a member larger than {limits.MAX_FILE} bytes")
    return size


def _member_mtime(fields: dict[str, str], block: bytes) -> int:
    """A member's mtime; -1 where out of range (before 1970, or far beyond): the file
    then gets the time it is written."""
    mtime = _mtime(fields["mtime"]) if "mtime" in fields else _number(block[136:148])
    return mtime if 0 <= mtime <= _MAX_MTIME else -1


def _check_sum(block: bytes) -> None:
    """A header's checksum (POSIX: unsigned bytes, the field as spaces; some old tars
    summed signed chars)."""
    stored = _number(block[148:156])
    if stored != sum(block[:148]) + sum(block[156:]) + 8 * 32:
        signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 256
        if stored != signed:
            raise TarError("a header with a bad checksum (not a tar archive?)")


def members(read: Callable[[int], bytes]) -> Iterator[Member]:
    """The archive's members, read(n) giving its bytes in order."""
    global_pax: dict[str, str] = {}
    pax: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None

    def exactly(n: int) -> bytes:
        data = read(n)
        if len(data) != n:
            raise TarError("the archive is cut short")
        return data

    while True:
        block = read(_BLOCK)
        if not block or block == bytes(_BLOCK):
            return  # the end (the zero blocks, or none as some writers leave it)
        if len(block) != _BLOCK:
            raise TarError("the archive is cut short")
        _check_sum(block)
        kind = block[156:157]
        size = _number(block[124:136])
        if kind in (b"x", b"g", b"L", b"K"):
            if size > _MAX_HEADER:
                raise TarError(f"an extended header larger than {_MAX_HEADER} bytes")
            data = exactly(size)
            exactly(-size % _BLOCK)
            if kind == b"x":
                pax.update(_pax(data))
            elif kind == b"g":
                global_pax.update(_pax(data))
            elif kind == b"L":
                long_name = _text(data)
            else:
                long_link = _text(data)
            continue
        fields = {**global_pax, **pax}
        what = _KINDS.get(kind, OTHER)
        name = fields.get("path") or long_name or _text(block[0:100])
        if "path" not in fields and long_name is None and block[257:263] == b"ustar\x00":
            prefix = _text(block[345:500])
            if prefix:
                name = f"{prefix}/{name}"
        if what == FILE and kind != b"0" and name.endswith("/"):
            what = DIR  # an old tar's folder
        if what == DIR:
            name = name.rstrip("/")
        size = _size(fields, size)
        data = b""
        if what in (FILE, OTHER) and size:
            data = exactly(size)
            exactly(-size % _BLOCK)
        mtime = _member_mtime(fields, block)
        linkname = fields.get("linkpath") or long_link or _text(block[157:257])
        yield Member(name, what, _number(block[100:108]), mtime, linkname, data)
        pax, long_name, long_link = {}, None, None
