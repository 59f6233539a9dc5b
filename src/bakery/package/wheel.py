"""A baked wheel: the release's upstream wheel with the files the bake changed.

``vllm-X-TAGS.whl`` becomes ``vllm-X+SERIES.HASH-TAGS.whl`` (same tags): the baked ``.py``
files replace theirs, ``vllm-X.dist-info/`` is renamed for the new version, METADATA
states it, RECORD gets every hash and size again, and ``bakery.json`` in the dist-info
records the series (diff hashes, port, pristine and baked commits). A series that changes
what the wheel compiles, or anything the wheel does not ship as the source has it, is
refused (:class:`CannotCarry`): only ``bakery sdist`` and a source build can carry it.
A new pure-Python file (``.py``) under a package the wheel ships (``vllm/``) is one more
member and RECORD row (after the upstream's members, before the dist-info); a deleted one
is one member and row fewer.

Why a zip writer of its own, instead of ``zipfile``:

- Fast and lean. All but a handful of the members (among them 283 MiB of ``.so`` in
  vLLM 0.34.0) are the upstream's, and are copied as they are: local header and
  compressed bytes, each run of consecutive unchanged members in one
  ``os.copy_file_range`` (the kernel copies, nothing passes through Python), never
  decompressed, recompressed or held in memory; their local headers are not even read
  (a run ends where the next member begins). ``zipfile`` cannot write a member's
  compressed bytes: ``write``, ``writestr`` and ``open("w")`` always compress, and the
  private state a raw write would need (``fp``, ``start_dir``, ``_writecheck``) is no API.
- Every byte fixed by the inputs. The upstream members keep their local headers, so their
  timestamps are the upstream's (part of the input); every member bakery writes
  (the baked files, METADATA, bakery.json, RECORD) has the fixed time 1980-01-01 00:00,
  mode 644 or 755, no extra fields, and is *stored*: its bytes do not depend on the zlib
  (or zlib-ng) the machine has. Members keep the upstream's order; bakery.json and RECORD
  come last. The central directory is written anew (offsets move), zip64 where needed.

The upstream's central directory is read raw by zipraw.py (why there, too); the entry of
an unchanged member is copied with only its offset changed.
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import os
import re
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bakery import outputs
from bakery.errors import BakeryError, SourceError
from bakery.formats import zipraw
from bakery.formats.zipraw import Entry
from bakery.package.baked import Baked, Change, local_version
from bakery.package.metadata import bakery_json, metadata, parse_version, version_module

_LOCAL, _CENTRAL, _END = zipraw.LOCAL, zipraw.CENTRAL, zipraw.END
_END64, _LOCATOR64 = zipraw.END64, zipraw.LOCATOR64
_SIG_LOCAL, _SIG_CENTRAL, _SIG_END = zipraw.SIG_LOCAL, zipraw.SIG_CENTRAL, zipraw.SIG_END
_SIG_END64, _SIG_LOCATOR64 = zipraw.SIG_END64, zipraw.SIG_LOCATOR64
#: Field limits past which zip64 records take over (module constants: tests lower them).
LIMIT32 = 0xFFFFFFFF
LIMIT16 = 0xFFFF
#: 1980-01-01 00:00:00 as DOS date and time: the time of every member bakery writes.
FIXED_DATE, FIXED_TIME = (1 << 5) | 1, 0
_UNIX = 3
_UTF8, _DESCRIPTOR = zipraw.UTF8, zipraw.DESCRIPTOR
#: A wheel file name of PEP 427's characters only (no control character from the index).
_FILE_NAME = re.compile(r"[A-Za-z0-9_.+!]+(?:-[A-Za-z0-9_.+!]+){4,5}\.whl")
_STORED = 0
_CHUNK = 1 << 20

#: Paths a build compiles or runs (the wheel holds their output, not them).
_BUILD_DIRS = ("csrc/", "cmake/")
_BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", "MANIFEST.in")
_BUILD_SUFFIXES = (".cmake", ".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hpp")
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
#: What the build writes from the version it builds (setuptools-scm's version file).
_VERSION_FILES = ("vllm/_version.py",)


class CannotCarry(BakeryError):
    """The series changes something a wheel cannot carry (exit 2, with the file named)."""

    def __init__(self, path: str, why: str, series: str, vllm: str) -> None:
        super().__init__(
            f"{path}: a wheel cannot carry this change ({why}); bake a source distribution "
            f"for a source build instead: bakery sdist {series} --vllm {vllm}"
        )
        self.path, self.why, self.vllm = path, why, vllm

    def naming(self, series: str) -> CannotCarry:
        """The same refusal, its suggestion naming the series as the user gave it."""
        return CannotCarry(self.path, self.why, series, self.vllm)


class _Out:
    """A member of the new wheel: where its bytes come from, and its RECORD row."""

    __slots__ = ("entry", "name", "content", "record", "external_attr", "verbatim", "end", "offset")

    def __init__(
        self,
        entry: Entry | None,
        name: str,
        content: bytes | None,
        record: tuple[str, str] | None,
        external_attr: int,
        verbatim: bool = False,
        end: int = 0,
    ) -> None:
        #: The upstream entry whose bytes it copies, or None for what bakery writes.
        self.entry = entry
        self.name = name
        #: None: the upstream member's bytes; else the content to store.
        self.content = content
        #: (hash, size), or None for RECORD itself and folders.
        self.record = record
        self.external_attr = external_attr
        #: Copy the upstream local header too (name, flags and descriptor unchanged), up
        #: to where the next upstream member begins (end).
        self.verbatim = verbatim
        self.end = end
        self.offset = 0


def wheel_name(upstream_filename: str, version: str) -> str:
    """The new wheel's file name: the upstream's with the version replaced (same tags)."""
    dist, _, rest = upstream_filename.partition("-")
    tags = rest[: -len(".whl")].split("-", 1)[-1]
    name = f"{dist}-{version.replace('-', '_')}-{tags}.whl"
    if not _FILE_NAME.fullmatch(name):  # only validated parts name a file in dist/
        raise SourceError(f"{upstream_filename[:100]!r}: not a wheel file name bakery writes")
    return name


def write_wheel(
    upstream: Path, baked: Baked, out_dir: Path, *, upstream_sha256: str | None = None
) -> Path:
    """Write the baked wheel into out_dir (atomically); returns its path. Raises
    CannotCarry, before writing anything, when the series changes what the wheel cannot
    carry."""
    version = local_version(baked.vllm, baked.series, baked.digest)
    try:
        src = open(upstream, "rb")  # noqa: SIM115 - closed below, after the write
    except OSError as e:
        raise SourceError(f"{upstream}: {e.strerror}") from None
    with src:
        fd = src.fileno()
        members = _plan(fd, upstream, baked, version, upstream_sha256)
        target = out_dir / wheel_name(upstream.name, version)
        with _atomic(target) as dst:
            _write(fd, dst, members, upstream.name)
    return target


# --- what goes in --------------------------------------------------------------------------------


def _plan(fd: int, upstream: Path, baked: Baked, version: str, sha256: str | None) -> list[_Out]:
    label = upstream.name
    directory = zipraw.read_directory(fd, label)
    entries = directory.entries
    names = {e.name: e for e in entries}
    if len(names) != len(entries):
        raise SourceError(f"{label}: a member name appears twice")
    dist_info = _dist_info(names, label)
    dist, _, old_version = dist_info[: -len(".dist-info")].rpartition("-")
    if parse_version(old_version) != parse_version(baked.vllm):
        raise SourceError(
            f"{label}: a wheel of {dist} {old_version}, the tree is baked on {baked.vllm}"
        )
    record = _read_record(fd, f"{dist_info}/RECORD", names, label)
    new_info = f"{dist}-{version}.dist-info"
    renames = {
        f"{dist_info}/": f"{new_info}/",
        f"{dist}-{old_version}.data/": f"{dist}-{version}.data/",
    }
    replaced = _replacements(baked, names, record)
    added = [
        _new(c.path, baked.content(c.path), _new_mode(c))
        for c in baked.changes
        if c.path not in names and c.status != "D"
    ]
    rewritten = {f"{dist_info}/{n}" for n in ("RECORD", "bakery.json", *_SIGNATURES)}
    out: list[_Out] = []
    ends = [e.offset for e in entries[1:]] + [directory.start]
    for e, end in zip(entries, ends, strict=True):
        if added and e.name.startswith(f"{dist_info}/"):
            out += added  # the new files: after the package's members, before the dist-info
            added = []
        if e.flags & zipraw.ENCRYPTED:
            raise SourceError(f"{label}: {e.name} is encrypted")
        if e.name in rewritten:
            continue  # written anew; a signature of the old RECORD would be a lie
        if e.name in replaced:
            content = replaced[e.name]
            if content is not None:
                out.append(_new(e.name, content, _mode(baked, e)))
            continue
        new_name = _renamed(e.name, renames)
        changed = _stated_version(fd, e, new_name, (new_info, dist, baked.vllm, version), label)
        if changed is not None:
            out.append(changed)
            continue
        row = None if e.name.endswith("/") else record[e.name]
        verbatim = new_name == e.name and not e.flags & _DESCRIPTOR
        out.append(_Out(e, new_name, None, row, e.external_attr, verbatim, end))
    out += added
    out.append(_new(f"{new_info}/bakery.json", bakery_json(baked, version, label, sha256)))
    record_name = f"{new_info}/RECORD"
    out.append(_new(record_name, _record_bytes(out, record_name)))
    return out


def _stated_version(
    fd: int, e: Entry, new_name: str, names: tuple[str, str, str, str], label: str
) -> _Out | None:
    """The members that state the wheel's version, stating the new one: METADATA's
    Version header, and ``vllm/_version.py`` (what ``vllm.__version__`` reads), so that
    the baked package says the same local version as its file name. None for the rest."""
    new_info, dist, old, new = names
    if new_name == f"{new_info}/METADATA":
        meta = metadata(zipraw.read_member(fd, e, label), old, new, label)
        return _new(new_name, meta, e.external_attr)
    if e.name == f"{dist}/_version.py":
        text = version_module(zipraw.read_member(fd, e, label), old, new)
        return _new(e.name, text, e.external_attr) if text is not None else None
    return None


def _dist_info(names: dict[str, Entry], label: str) -> str:
    tops = {n.split("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA")}
    tops = {t for t in tops if f"{t}/METADATA" in names}
    if len(tops) != 1:
        raise SourceError(f"{label}: expected one .dist-info folder, found {len(tops)}")
    return tops.pop()


def _renamed(name: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def _read_record(
    fd: int, name: str, names: dict[str, Entry], label: str
) -> dict[str, tuple[str, str]]:
    """The upstream RECORD as path -> (hash, size); every member (but RECORD, signatures
    and folders) must be listed with a sha256 and its size."""
    if name not in names:
        raise SourceError(f"{label}: no {name}")
    try:
        text = zipraw.read_member(fd, names[name], label).decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{label}: {name} is not UTF-8 text") from None
    rows = {}
    for line in text.splitlines():
        fields = line.split(",") if '"' not in line else next(csv.reader([line]), [])
        if len(fields) == 3:
            rows[fields[0]] = (fields[1], fields[2])
    dist_info = name.rsplit("/", 1)[0]
    skip = {name, *(f"{dist_info}/{s}" for s in _SIGNATURES)}
    for member, e in names.items():
        if member in skip or member.endswith("/"):
            continue
        hash_, size = rows.get(member, ("", ""))
        if not hash_.startswith("sha256=") or size != str(e.usize):
            raise SourceError(f"{label}: RECORD gives no sha256 and size of {member}")
    return rows


# --- the baked files ------------------------------------------------------------------------


def refuse_built(baked: Baked) -> None:
    """Raise CannotCarry for the first change (in path order) of a file the build
    compiles or runs: decided from the bake alone, before any wheel is downloaded."""
    for change in baked.changes:
        if _built(change.path):
            raise _cannot(baked, change.path, _BUILT)


_BUILT = "the build compiles or runs it; the wheel holds its output"


def _built(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return path.startswith(_BUILD_DIRS) or base in _BUILD_FILES or base.endswith(_BUILD_SUFFIXES)


def _cannot(baked: Baked, path: str, why: str) -> CannotCarry:
    return CannotCarry(path, why, baked.series, baked.vllm)


def _replacements(
    baked: Baked, names: dict[str, Entry], record: dict[str, tuple[str, str]]
) -> dict[str, bytes | None]:
    """Member -> baked bytes (None: the bake deleted it). Raises CannotCarry for the first
    change (in path order) the wheel cannot carry."""
    out: dict[str, bytes | None] = {}
    for change in baked.changes:
        why = _cannot_carry(change, baked, names, record)
        if why:
            raise _cannot(baked, change.path, why)
        out[change.path] = None if change.status == "D" else baked.content(change.path)
    return out


def _cannot_carry(
    change: Change,
    baked: Baked,
    names: dict[str, Entry],
    record: dict[str, tuple[str, str]],
) -> str | None:
    path = change.path
    if _built(path):
        return _BUILT
    if (change.new_mode and change.new_mode & 0o170000 != 0o100000) or change.status == "T":
        return "a wheel holds regular files only"
    if path in _VERSION_FILES:  # the sdist's copy may match the wheel's: the hash check passes
        return "the build generates it (the version the wheel states): a series never replaces it"
    if change.status == "A":
        if path in names:
            return "the wheel has a file the source lacks: the build generates it"
        return _new_file_problem(path, names)
    if path not in names:
        return "the upstream wheel has no such file"
    wheel_hash = record[path][0].partition("=")[2]
    pristine = base64.urlsafe_b64encode(hashlib.sha256(baked.pristine(change)).digest())
    if wheel_hash != pristine.rstrip(b"=").decode():
        return "the wheel's copy is not the source's: the build generates or changes it"
    return None


def _new_file_problem(path: str, names: dict[str, Entry]) -> str | None:
    """Why the wheel cannot carry a file the bake added, or None: a ``.py`` file under a
    package the wheel ships is a member like the others; anything else may need the
    build (package data it would not include, a module outside any package)."""
    top = path.split("/", 1)[0]
    if "/" not in path or top.endswith((".dist-info", ".data")):
        return "the upstream wheel has no such file, and it is in no package the wheel ships"
    if not any(n.startswith(f"{top}/") for n in names):
        return f"the upstream wheel has no such file, and no package {top}/"
    if not path.endswith(".py"):
        return "the upstream wheel has no such file; a wheel takes new .py files only"
    return None


def _new_mode(change: Change) -> int:
    return (0o100755 if change.new_mode & 0o111 else 0o100644) << 16


def _mode(baked: Baked, entry: Entry) -> int:
    """The upstream member's attributes, unless the bake changed the file's mode."""
    change = next(c for c in baked.changes if c.path == entry.name)
    if change.old_mode == change.new_mode:
        return entry.external_attr
    return (0o100755 if change.new_mode & 0o111 else 0o100644) << 16


# --- the dist-info -----------------------------------------------------------------------------


def _record_bytes(members: list[_Out], record_name: str) -> bytes:
    """RECORD as the csv module writes it (a name is quoted only where it must be), built
    as plain lines where no quoting is needed: 6,000 csv rows cost more than the rest of
    the plan."""
    lines = []
    for m in members:
        if m.record is not None:
            lines.append(_row(m.name, *m.record))
    lines.append(_row(record_name, "", ""))
    return "".join(lines).encode()


def _row(name: str, hash_: str, size: str) -> str:
    if not _NEEDS_QUOTES.search(name):
        return f"{name},{hash_},{size}\n"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([name, hash_, size])
    return buf.getvalue()


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def _new(name: str, content: bytes, external_attr: int = 0o100644 << 16) -> _Out:
    """A member bakery writes: stored, fixed time; its RECORD row from its bytes."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=")
    return _Out(
        None,
        name,
        content,
        (f"sha256={digest.decode()}", str(len(content))),
        external_attr or (0o100644 << 16),
    )


# --- the zip -----------------------------------------------------------------------------------


@contextmanager
def _atomic(target: Path) -> Iterator[int]:
    """An unbuffered file beside target, renamed over it when complete, removed if not:
    the one temp-file writer (outputs.replacing: O_EXCL | O_NOFOLLOW, a random name)."""
    if target.is_symlink() or target.is_dir():
        raise BakeryError(f"{target}: exists and is not a file")
    with outputs.replacing(target) as fh:
        yield fh.fileno()


def _write(sfd: int, dfd: int, members: list[_Out], label: str) -> None:
    pos = 0
    run: tuple[int, int] | None = None  # a range of the upstream not yet copied
    for m in members:
        e = m.entry
        if m.verbatim and e is not None:
            if run is not None and run[1] == e.offset:
                run = (run[0], m.end)
            else:
                pos += _flush(sfd, dfd, run)
                run = (e.offset, m.end)
            m.offset = pos + (e.offset - run[0])
            continue
        pos += _flush(sfd, dfd, run)
        run = None
        m.offset = pos
        if e is not None:
            pos += _write_all(dfd, _local_header(m, e.crc, e.csize))
            pos += _copy(sfd, dfd, zipraw.data_offset(sfd, e, label), e.csize)
        else:
            assert m.content is not None
            pos += _write_all(dfd, _local_header(m, zlib.crc32(m.content), len(m.content)))
            pos += _write_all(dfd, m.content)
    pos += _flush(sfd, dfd, run)
    central = b"".join(_central(m) for m in members)
    _write_all(dfd, central + _end(len(members), len(central), pos))


def _flush(sfd: int, dfd: int, run: tuple[int, int] | None) -> int:
    return 0 if run is None else _copy(sfd, dfd, run[0], run[1] - run[0])


def _copy(sfd: int, dfd: int, offset: int, length: int) -> int:
    """Copy length bytes at offset of sfd to dfd's position: in the kernel where it can
    (copy_file_range), else through a 1 MiB buffer."""
    done = 0
    fast = hasattr(os, "copy_file_range")
    while done < length:
        if fast:
            try:
                n = os.copy_file_range(sfd, dfd, length - done, offset + done)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                fast = False
                continue
        else:
            chunk = os.pread(sfd, min(_CHUNK, length - done), offset + done)
            n = _write_all(dfd, chunk) if chunk else 0
        if n == 0:
            raise SourceError("the upstream wheel is cut short")
        done += n
    return done


def _write_all(dfd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(dfd, view) :]
    return len(data)


def _dos(m: _Out) -> tuple[int, int]:
    if m.entry is None:
        return FIXED_TIME, FIXED_DATE
    return m.entry.dostime, m.entry.dosdate


def _flags(m: _Out) -> tuple[int, bytes]:
    raw = m.name.encode("utf-8")
    utf8 = _UTF8 if not m.name.isascii() else 0
    if m.entry is None:
        return utf8, raw
    return (m.entry.flags & ~(_DESCRIPTOR | _UTF8)) | utf8, raw


def _method(m: _Out) -> int:
    return _STORED if m.entry is None else m.entry.method


def _local_header(m: _Out, crc: int, csize: int) -> bytes:
    e = m.entry
    usize = e.usize if e is not None else len(m.content or b"")
    flags, raw = _flags(m)
    time_, date = _dos(m)
    extra = b""
    if csize >= LIMIT32 or usize >= LIMIT32:
        extra = struct.pack("<HHQQ", 1, 16, usize, csize)
        csize = usize = 0xFFFFFFFF
    version = 45 if extra else 20
    if e is not None:
        version = max(version, e.extract_version)
    head = _LOCAL.pack(
        _SIG_LOCAL, version, flags, _method(m), time_, date, crc, csize, usize, len(raw), len(extra)
    )
    return head + raw + extra


def _central(m: _Out) -> bytes:
    e = m.entry
    if m.verbatim and e is not None and not e.zip64 and m.offset < LIMIT32:
        # the upstream's entry as it is, at its new offset
        return e.raw[:42] + struct.pack("<I", m.offset) + e.raw[46:]
    if m.verbatim and e is not None:
        flags, raw = e.flags, e.raw_name
    else:
        flags, raw = _flags(m)
    if e is None:
        content = m.content or b""
        crc, csize, usize = zlib.crc32(content), len(content), len(content)
        create, system, extract, internal = 20, _UNIX, 20, 0
    else:
        crc, csize, usize = e.crc, e.csize, e.usize
        create, system = e.create_version, e.create_system
        extract, internal = e.extract_version, e.internal_attr
    time_, date = _dos(m)
    big = [v for v in (usize, csize, m.offset) if v >= LIMIT32]
    extra = struct.pack(f"<HH{len(big)}Q", 1, 8 * len(big), *big) if big else b""
    if big:
        extract = max(extract, 45)
        usize, csize, offset = (v if v < LIMIT32 else 0xFFFFFFFF for v in (usize, csize, m.offset))
    else:
        offset = m.offset
    return (
        _CENTRAL.pack(
            _SIG_CENTRAL,
            create,
            system,
            extract,
            0,
            flags,
            _method(m),
            time_,
            date,
            crc,
            csize,
            usize,
            len(raw),
            len(extra),
            0,
            0,
            internal,
            m.external_attr,
            offset,
        )
        + raw
        + extra
    )


def _end(count: int, size: int, offset: int) -> bytes:
    if count < LIMIT16 and size < LIMIT32 and offset < LIMIT32:
        return _END.pack(_SIG_END, 0, 0, count, count, size, offset, 0)
    end64 = _END64.pack(_SIG_END64, 44, 45, 45, 0, 0, count, count, size, offset)
    locator = _LOCATOR64.pack(_SIG_LOCATOR64, 0, offset + size, 1)
    return (
        end64
        + locator
        + _END.pack(
            _SIG_END,
            0,
            0,
            min(count, 0xFFFF),
            min(count, 0xFFFF),
            min(size, 0xFFFFFFFF),
            min(offset, 0xFFFFFFFF),
            0,
        )
    )
