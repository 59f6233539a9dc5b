"""A baked wheel: the release's upstream wheel with the files the bake changed.

``vllm-X-TAGS.whl`` becomes ``vllm-X+SERIES.HASH-TAGS.whl`` (same tags): the baked ``.py``
files replace theirs, ``vllm-X.dist-info/`` is renamed for the new version, METADATA
states it, RECORD gets every hash and size again, and ``bakery.json`` in the dist-info
records the series (diff hashes, port, pristine and baked commits). A series that changes
what the wheel compiles, or anything the wheel does not ship as the source has it, is
refused (:class:`CannotCarry`): only ``bakery sdist`` and a source build can carry it.

Why a zip writer of its own, instead of ``zipfile``:

- Fast and lean. All but a handful of the members (among them 283 MiB of ``.so`` in
  vLLM 0.34.0) are the upstream's, and are copied as they are: local header and
  compressed bytes, each run of consecutive unchanged members in one
  ``os.copy_file_range`` (the kernel copies, nothing passes through Python), never
  decompressed, recompressed or held in memory. ``zipfile`` cannot write a member's
  compressed bytes: ``write``, ``writestr`` and ``open("w")`` always compress, and the
  private state a raw write would need (``fp``, ``start_dir``, ``_writecheck``) is no API.
- Every byte fixed by the inputs. The upstream members keep their local headers, so their
  timestamps are the upstream's (part of the input); every member bakery writes
  (the baked files, METADATA, bakery.json, RECORD) has the fixed time 1980-01-01 00:00,
  mode 644 or 755, no extra fields, and is *stored*: its bytes do not depend on the zlib
  (or zlib-ng) the machine has. Members keep the upstream's order; bakery.json and RECORD
  come last. The central directory is written anew (offsets move), zip64 where needed.

``zipfile`` still reads the upstream's central directory (zip64 and name encodings
included), and METADATA and RECORD (small, CRC-checked).
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import json
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bakery import __version__
from bakery.bake.baked import Baked, Change, local_version
from bakery.errors import BakeryError, SourceError

#: Local file header, central directory entry, end of central directory (APPNOTE 4.3).
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IBBBBHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_END64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_SIG_LOCAL, _SIG_CENTRAL, _SIG_END = 0x04034B50, 0x02014B50, 0x06054B50
_SIG_END64, _SIG_LOCATOR64 = 0x06064B50, 0x07064B50
#: Field limits past which zip64 records take over (module constants: tests lower them).
LIMIT32 = 0xFFFFFFFF
LIMIT16 = 0xFFFF
#: 1980-01-01 00:00:00 as DOS date and time: the time of every member bakery writes.
FIXED_DATE, FIXED_TIME = (1 << 5) | 1, 0
_UNIX = 3
_UTF8 = 0x800
_DESCRIPTOR = 0x8
_CHUNK = 1 << 20

#: Paths a build compiles or runs (the wheel holds their output, not them).
_BUILD_DIRS = ("csrc/", "cmake/")
_BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", "MANIFEST.in")
_BUILD_SUFFIXES = (".cmake", ".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hpp")
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")


class CannotCarry(BakeryError):
    """The series changes something a wheel cannot carry (exit 2, with the file named)."""


@dataclass
class _Out:
    """A member of the new wheel: where its bytes come from, and its RECORD row."""

    info: zipfile.ZipInfo
    name: str
    #: None: the upstream member's bytes; else the content to store.
    content: bytes | None
    record: tuple[str, str] | None  # (hash, size) or None for RECORD itself / folders
    external_attr: int
    #: Copy the upstream local header too (name, flags and descriptor unchanged).
    verbatim: bool = False
    offset: int = 0


def wheel_name(upstream_filename: str, version: str) -> str:
    """The new wheel's file name: the upstream's with the version replaced (same tags)."""
    dist, _, rest = upstream_filename.partition("-")
    tags = rest[: -len(".whl")].split("-", 1)[1]
    return f"{dist}-{version.replace('-', '_')}-{tags}.whl"


def write_wheel(
    upstream: Path, baked: Baked, out_dir: Path, *, upstream_sha256: str | None = None
) -> Path:
    """Write the baked wheel into out_dir (atomically); returns its path. Raises
    CannotCarry, before writing anything, when the series changes what the wheel cannot
    carry."""
    version = local_version(baked.vllm, baked.series, baked.digest)
    try:
        zf = zipfile.ZipFile(upstream)
    except (OSError, zipfile.BadZipFile) as e:
        raise SourceError(f"{upstream}: not a readable wheel ({e})") from None
    with zf:
        members = _plan(zf, upstream, baked, version, upstream_sha256)
        target = out_dir / wheel_name(upstream.name, version)
        with open(upstream, "rb") as src, _atomic(target) as dst:
            _write(src.fileno(), dst, members)
    return target


# --- what goes in --------------------------------------------------------------------------------


def _plan(
    zf: zipfile.ZipFile, upstream: Path, baked: Baked, version: str, sha256: str | None
) -> list[_Out]:
    infos = sorted(zf.infolist(), key=lambda i: i.header_offset)
    names = {i.orig_filename: i for i in infos}
    dist_info = _dist_info(names, upstream)
    dist, _, old_version = dist_info[: -len(".dist-info")].rpartition("-")
    if _version(old_version) != _version(baked.vllm):
        raise SourceError(
            f"{upstream.name}: a wheel of {dist} {old_version}, the tree is baked on {baked.vllm}"
        )
    record = _read_record(zf, f"{dist_info}/RECORD", names)
    new_info = f"{dist}-{version}.dist-info"
    renames = {
        f"{dist_info}/": f"{new_info}/",
        f"{dist}-{old_version}.data/": f"{dist}-{version}.data/",
    }
    replaced = _replacements(baked, names, record, version)
    out: list[_Out] = []
    for info in infos:
        name = info.orig_filename
        if info.flag_bits & 0x1:
            raise SourceError(f"{upstream.name}: {name} is encrypted")
        if name in (f"{dist_info}/RECORD", *(f"{dist_info}/{s}" for s in _SIGNATURES)):
            continue  # written anew; a signature of the old RECORD would be a lie
        if name in replaced:
            content = replaced[name]
            if content is not None:
                out.append(_new(name, content, _mode(baked, name, info)))
            continue
        new_name = _renamed(name, renames)
        row = None if name.endswith("/") else record.get(name)
        if new_name == f"{new_info}/METADATA":
            meta = _metadata(zf.read(info), baked.vllm, version, upstream.name)
            out.append(_new(new_name, meta, info.external_attr))
            continue
        verbatim = new_name == name and not info.flag_bits & _DESCRIPTOR
        out.append(_Out(info, new_name, None, row, info.external_attr, verbatim))
    bake_json = _bakery_json(baked, version, upstream.name, sha256)
    out.append(_new(f"{new_info}/bakery.json", bake_json))
    record_name = f"{new_info}/RECORD"
    out.append(_new(record_name, _record_bytes(out, record_name)))
    return out


def _version(text: str) -> Version | str:
    try:
        return Version(text)
    except InvalidVersion:
        return text


def _dist_info(names: dict[str, zipfile.ZipInfo], upstream: Path) -> str:
    tops = {n.split("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA")}
    tops = {t for t in tops if f"{t}/METADATA" in names}
    if len(tops) != 1:
        raise SourceError(f"{upstream.name}: expected one .dist-info folder, found {len(tops)}")
    return tops.pop()


def _renamed(name: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def _read_record(
    zf: zipfile.ZipFile, name: str, names: dict[str, zipfile.ZipInfo]
) -> dict[str, tuple[str, str]]:
    """The upstream RECORD as path -> (hash, size); every member (but RECORD, signatures
    and folders) must be listed with a sha256 and its size."""
    if name not in names:
        raise SourceError(f"{zf.filename}: no {name}")
    rows: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(zf.read(name).decode("utf-8"))):
        if len(row) == 3:
            rows[row[0]] = (row[1], row[2])
    dist_info = name.rsplit("/", 1)[0]
    skip = {name, *(f"{dist_info}/{s}" for s in _SIGNATURES)}
    for member, info in names.items():
        if member in skip or member.endswith("/"):
            continue
        hash_, size = rows.get(member, ("", ""))
        if not hash_.startswith("sha256=") or size != str(info.file_size):
            raise SourceError(f"{zf.filename}: RECORD gives no sha256 and size of {member}")
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
    return CannotCarry(
        f"{path}: a wheel cannot carry this change ({why}); bake a source distribution "
        f"for a source build instead: bakery sdist {baked.series} --vllm {baked.vllm}"
    )


def _replacements(
    baked: Baked, names: dict[str, zipfile.ZipInfo], record: dict[str, tuple[str, str]], v: str
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
    names: dict[str, zipfile.ZipInfo],
    record: dict[str, tuple[str, str]],
) -> str | None:
    path = change.path
    if _built(path):
        return _BUILT
    if change.status == "A" or path not in names:
        return "the upstream wheel has no such file"
    if (change.new_mode and change.new_mode & 0o170000 != 0o100000) or change.status == "T":
        return "a wheel holds regular files only"
    wheel_hash = record[path][0].partition("=")[2]
    pristine = base64.urlsafe_b64encode(hashlib.sha256(baked.pristine(change)).digest())
    if wheel_hash != pristine.rstrip(b"=").decode():
        return "the wheel's copy is not the source's: the build generates or changes it"
    return None


def _mode(baked: Baked, name: str, info: zipfile.ZipInfo) -> int:
    """The upstream member's attributes, unless the bake changed the file's mode."""
    change = next(c for c in baked.changes if c.path == name)
    if change.old_mode == change.new_mode:
        return info.external_attr
    return (0o100755 if change.new_mode & 0o111 else 0o100644) << 16


# --- the dist-info -----------------------------------------------------------------------------


def _metadata(data: bytes, old: str, new: str, wheel: str) -> bytes:
    """METADATA with its Version header set to new (the headers end at the first blank line)."""
    head, sep, body = data.partition(b"\n\n")
    pattern = re.compile(rb"^Version:[ \t]*(\S*)[ \t]*(\r?)$", re.MULTILINE)
    found = pattern.findall(head)
    if len(found) != 1 or _version(found[0][0].decode()) != _version(old):
        raise SourceError(f"{wheel}: METADATA does not state Version: {old} once")
    head = pattern.sub(lambda m: b"Version: " + new.encode() + m.group(2), head)
    return head + sep + body


def _bakery_json(baked: Baked, version: str, upstream: str, sha256: str | None) -> bytes:
    data = {
        "bakery": __version__,
        "series": baked.series,
        "series_sha256": baked.digest,
        "version": version,
        "vllm": baked.vllm,
        "upstream": {"filename": upstream, "sha256": sha256},
        "port": baked.port,
        "diffs": baked.diffs,
        "pristine_commit": baked.pristine_commit,
        "head": baked.head,
        "changed": {c.path: c.status for c in baked.changes},
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _record_bytes(members: list[_Out], record_name: str) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for m in members:
        if m.record is not None:
            writer.writerow([m.name, *m.record])
    writer.writerow([record_name, "", ""])
    return buf.getvalue().encode()


def _new(name: str, content: bytes, external_attr: int = 0o100644 << 16) -> _Out:
    """A member bakery writes: stored, fixed time; its RECORD row from its bytes."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=")
    return _Out(
        zipfile.ZipInfo(name),
        name,
        content,
        (f"sha256={digest.decode()}", str(len(content))),
        external_attr or (0o100644 << 16),
    )


# --- the zip -----------------------------------------------------------------------------------


@contextmanager
def _atomic(target: Path) -> Iterator[int]:
    """An unbuffered file beside target, renamed over it when complete, removed if not."""
    if target.is_symlink() or target.is_dir():
        raise BakeryError(f"{target}: exists and is not a file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise BakeryError(f"cannot write {target}: {e.strerror}") from None
    try:
        try:
            yield fd
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise BakeryError(f"cannot write {target}: {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write(sfd: int, dfd: int, members: list[_Out]) -> None:
    pos = 0
    run: tuple[int, int] | None = None  # a range of the upstream not yet copied
    for m in members:
        start, data, end = _extent(sfd, m)
        if m.verbatim:
            if run is not None and run[1] == start:
                run = (run[0], end)
            else:
                pos += _flush(sfd, dfd, run)
                run = (start, end)
            m.offset = pos + (start - run[0])
            continue
        pos += _flush(sfd, dfd, run)
        run = None
        m.offset = pos
        if m.content is None:
            pos += _write_all(dfd, _local_header(m, m.info.CRC, m.info.compress_size))
            pos += _copy(sfd, dfd, data, m.info.compress_size)
        else:
            pos += _write_all(dfd, _local_header(m, zlib.crc32(m.content), len(m.content)))
            pos += _write_all(dfd, m.content)
    pos += _flush(sfd, dfd, run)
    central = b"".join(_central(m) for m in members)
    _write_all(dfd, central + _end(len(members), len(central), pos))


def _extent(sfd: int, m: _Out) -> tuple[int, int, int]:
    """(local header, data, end of data) offsets of an upstream member; its local header
    must name it as the central directory does."""
    if m.content is not None:
        return 0, 0, 0
    info = m.info
    raw = info.orig_filename.encode("utf-8" if info.flag_bits & _UTF8 else "cp437")
    head = os.pread(sfd, _LOCAL.size + len(raw), info.header_offset)
    if len(head) < _LOCAL.size:
        raise SourceError(f"{info.orig_filename}: the wheel is cut short")
    sig, *_, nlen, xlen = _LOCAL.unpack_from(head)
    if sig != _SIG_LOCAL or head[_LOCAL.size :] != raw or nlen != len(raw):
        raise SourceError(
            f"{info.orig_filename}: its local header does not match the wheel's index"
        )
    data = info.header_offset + _LOCAL.size + nlen + xlen
    return info.header_offset, data, data + info.compress_size


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
    if m.content is not None:
        return FIXED_TIME, FIXED_DATE
    y, mo, d, h, mi, s = m.info.date_time
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


def _flags(m: _Out) -> tuple[int, bytes]:
    raw = m.name.encode("utf-8")
    utf8 = _UTF8 if not m.name.isascii() else 0
    if m.content is not None:
        return utf8, raw
    return (m.info.flag_bits & ~(_DESCRIPTOR | _UTF8)) | utf8, raw


def _method(m: _Out) -> int:
    return zipfile.ZIP_STORED if m.content is not None else m.info.compress_type


def _local_header(m: _Out, crc: int, csize: int) -> bytes:
    usize = len(m.content) if m.content is not None else m.info.file_size
    flags, raw = _flags(m)
    time_, date = _dos(m)
    extra = b""
    if csize >= LIMIT32 or usize >= LIMIT32:
        extra = struct.pack("<HHQQ", 1, 16, usize, csize)
        csize = usize = 0xFFFFFFFF
    version = 45 if extra else 20
    if m.content is None:
        version = max(version, m.info.extract_version)
    head = _LOCAL.pack(
        _SIG_LOCAL, version, flags, _method(m), time_, date, crc, csize, usize, len(raw), len(extra)
    )
    return head + raw + extra


def _central(m: _Out) -> bytes:
    if m.verbatim:
        flags = m.info.flag_bits
        raw = m.info.orig_filename.encode("utf-8" if flags & _UTF8 else "cp437")
    else:
        flags, raw = _flags(m)
    if m.content is not None:
        crc, csize, usize = zlib.crc32(m.content), len(m.content), len(m.content)
        create, system, extract, internal = 20, _UNIX, 20, 0
    else:
        crc, csize, usize = m.info.CRC, m.info.compress_size, m.info.file_size
        create, system, extract = (
            m.info.create_version,
            m.info.create_system,
            m.info.extract_version,
        )
        internal = m.info.internal_attr
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
