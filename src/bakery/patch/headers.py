"""The names and timestamps of a file patch's header lines, as GNU patch and git write
them: a ``---``/``+++`` line's name and whether its timestamp is the epoch (``diff -N``'s
side that does not exist), git's C-style quoted names, and Linux's limits on a name.
The parser (:mod:`bakery.patch.parse`) reads every header through these.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

from bakery.errors import DiffError

#: Linux's PATH_MAX: a longer name is refused (``check_length``).
MAX_NAME = 4096
#: A header's trailing timestamp: ``2024-01-01 00:00:00.123456789 +0100`` (``diff -u``,
#: after a TAB or, rarely, a space), the offset optional.
STAMP_RE = re.compile(
    r"[\t ]+(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(\.\d+)?(?: ?([+-])(\d\d):?(\d\d))?$"
)


def unquote(path: Path, line: int, name: str) -> str:
    """Undo git's C-style quoting of names ("a\\tb", octal escapes)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return check_length(path, line, name)
    body = name[1:-1]
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "\\": 92, "a": 7, "b": 8, "f": 12, "v": 11}
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 >= len(body):
                raise DiffError(path, line, f"bad quoted name {name!r}")
            e = body[i + 1]
            if e in simple:
                out.append(simple[e])
                i += 2
            elif re.match(r"[0-7]{3}", body[i + 1 : i + 4]):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
            else:
                raise DiffError(path, line, f"bad escape in quoted name {name!r}")
        else:
            out.extend(c.encode("latin-1"))
            i += 1
    return check_length(path, line, out.decode("latin-1"))


def check_length(path: Path, line: int, name: str) -> str:
    # Linux's limits (PATH_MAX, NAME_MAX), checked here so that no later stat of the name
    # fails with ENAMETOOLONG.
    if len(name) >= MAX_NAME or any(len(part) > 255 for part in name.split("/")):
        raise DiffError(path, line, f"file name too long ({name[:60]!r}...)")
    return name


def shared_tail(a: str, b: str) -> int:
    """How many trailing ``/`` parts two names share (``b`` split from its end only as far
    as ``a``'s parts go: it may be the rest of a hostile megabyte line)."""
    xs = a.split("/")
    n = 0
    for x, y in zip(reversed(xs), reversed(b.rsplit("/", len(xs))), strict=False):
        if x != y:
            break
        n += 1
    return n


def header_name(path: Path, line: int, rest: str) -> tuple[str, bool]:
    """The name in a ``---``/``+++`` line, and whether its timestamp is the epoch."""
    rest = rest.rstrip("\r")
    # "--- name<TAB>timestamp": the timestamp is optional and dropped.
    stamp = STAMP_RE.search(rest)
    epoch = stamp is not None and is_epoch(stamp)
    name = rest.split("\t", 1)[0]
    tail = ""
    if name.startswith('"'):
        end = name.rfind('"')
        if end <= 0:
            raise DiffError(path, line, f"unterminated quoted name {name[:80]!r}")
        # '"a/"sub/x': a quoted part and the rest of the name, as git reads it
        tail = name[end + 1 :].split(" ", 1)[0] if not name[end + 1 :].startswith(" ") else ""
        name = name[: end + 1]
    else:
        if stamp is not None and "\t" not in rest:
            name = rest[: stamp.start()]  # "--- a/x 2024-01-01 ...": a space before the time
        name = name.rstrip(" ")
    name = unquote(path, line, name) + tail
    if not name:
        raise DiffError(path, line, "empty file name in header")
    return name, epoch


def is_epoch(m: re.Match[str]) -> bool:
    """Whether a header's timestamp is 1970-01-01 00:00:00 UTC, the time ``diff -N`` gives
    a side that does not exist (its offset applied, as GNU patch does; none is UTC)."""
    year, month, day, hour, minute, sec = (int(g) for g in m.groups()[:6])
    if m.group(7) and int(m.group(7)[1:] or 0):
        return False
    try:
        local = datetime(year, month, day, hour, minute, sec)
    except ValueError:
        return False
    offset = timedelta(0)
    if m.group(8):
        offset = timedelta(hours=int(m.group(9)), minutes=int(m.group(10)))
        offset = offset if m.group(8) == "+" else -offset
    return local - offset == datetime(1970, 1, 1)
