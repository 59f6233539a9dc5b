"""A baked source distribution: the release's sdist with the files the bake changed, for a
source build of what a wheel cannot carry (see wheel.py's CannotCarry).

``vllm-X.tar.gz`` becomes ``vllm-X+SERIES.HASH.tar.gz``: the top folder is renamed, the
``Version`` of PKG-INFO (and of ``*.egg-info/PKG-INFO``) is the local version, the baked
files replace theirs (the bake's bytes), files the bake added come after the upstream's in
path order, and files it deleted are left out. The upstream archive is streamed member by
member (tarfile's stream mode), so no member is held whole in memory but the baked ones.

Same inputs, same bytes: members keep the upstream's order and times; what bakery writes
has the time 1980-01-01; owners are 0/root-less; the archive is PAX (long names in
headers tarfile writes the same way each time) and the gzip header carries no name and
time 0.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from bakery import outputs
from bakery.errors import BakeryError, SourceError
from bakery.package.baked import Baked, Change, local_version

#: 1980-01-01 00:00:00 UTC: the time of every member bakery writes.
FIXED_MTIME = 315532800


def write_sdist(upstream: Path, baked: Baked, out_dir: Path) -> Path:
    """Write the baked sdist into out_dir (atomically); returns its path."""
    version = local_version(baked.vllm, baked.series, baked.digest)
    old_top, new_top = f"vllm-{baked.vllm}", f"vllm-{version}"
    target = out_dir / f"{new_top}.tar.gz"
    changes = {c.path: c for c in baked.changes}
    try:
        with tarfile.open(upstream, "r|gz") as src, _atomic(target) as fh:
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=6)
            with gz, tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as dst:
                seen: set[str] = set()
                for member in src:
                    rel = _relative(member.name, old_top, upstream)
                    seen.add(rel)
                    _copy_member(src, dst, member, (old_top, new_top), changes.get(rel), baked)
                for rel in sorted(c.path for c in baked.changes if c.status != "D"):
                    if rel not in seen:
                        mode = changes[rel].new_mode & 0o777
                        _add(dst, f"{new_top}/{rel}", baked.content(rel), mode)
                if baked.proof is not None:  # what is known of the tree (issue 45)
                    _add(dst, f"{new_top}/bakery.json", _bakery_json(baked, version), 0o644)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise SourceError(f"{upstream}: not a readable sdist ({e})") from None
    except OSError as e:
        raise BakeryError(f"cannot write {target}: {e.strerror or e}") from None
    return target


def _bakery_json(baked: Baked, version: str) -> bytes:
    """The sdist's record of its bake (as a wheel's dist-info ``bakery.json``, in short):
    the series, the release, the port, and the tree's proof."""
    data = {
        "series": baked.series,
        "series_sha256": baked.digest,
        "version": version,
        "vllm": baked.vllm,
        "port": baked.port,
        "head": baked.head,
        "proof": baked.proof,
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _relative(name: str, top: str, upstream: Path) -> str:
    head, _, rel = name.rstrip("/").partition("/")
    if head != top:
        raise SourceError(f"{upstream.name}: {name} is outside its top folder {top}/")
    return rel


def _copy_member(
    src: tarfile.TarFile,
    dst: tarfile.TarFile,
    member: tarfile.TarInfo,
    tops: tuple[str, str],
    change: Change | None,
    baked: Baked,
) -> None:
    """One upstream member into the new archive: as it is, or the bake's bytes."""
    old_top, top = tops
    rel = member.name.rstrip("/").partition("/")[2]
    name = f"{top}/{rel}" if rel else top
    if change is not None:
        if change.status != "D":
            _add(dst, name, baked.content(rel), change.new_mode & 0o777)
        return
    info = _info(name, member)
    if member.isfile():
        data = src.extractfile(member)
        if rel == "PKG-INFO" or re.fullmatch(r"[^/]+\.egg-info/PKG-INFO", rel):
            assert data is not None
            text = _pkg_info(data.read(), baked.vllm, top.split("-", 1)[1])
            _add(dst, name, text, member.mode & 0o777, int(member.mtime))
            return
        dst.addfile(info, data)
    elif member.isdir() or member.issym():
        dst.addfile(info)
    elif member.islnk():
        info.linkname = f"{top}/{_relative(member.linkname, old_top, Path(member.name))}"
        dst.addfile(info)
    else:
        raise SourceError(f"{member.name}: not a file, folder or link")


def _info(name: str, member: tarfile.TarInfo) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = member.type, member.size
    info.mode, info.mtime = member.mode & 0o7777, int(member.mtime)
    info.linkname = member.linkname
    return info


def _add(dst: tarfile.TarFile, name: str, data: bytes, mode: int, mtime: int = FIXED_MTIME) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode or 0o644, int(mtime)
    dst.addfile(info, io.BytesIO(data))


def _pkg_info(data: bytes, old: str, new: str) -> bytes:
    head, sep, body = data.partition(b"\n\n")
    pattern = re.compile(rb"^Version:[ \t]*" + re.escape(old.encode()) + rb"[ \t]*(\r?)$", re.M)
    if len(pattern.findall(head)) != 1:
        raise SourceError(f"PKG-INFO does not state Version: {old} once")
    return pattern.sub(lambda m: b"Version: " + new.encode() + m.group(1), head) + sep + body


@contextmanager
def _atomic(target: Path) -> Iterator[BinaryIO]:
    """The one temp-file writer (outputs.replacing): never through a planted link."""
    if target.is_symlink() or target.is_dir():
        raise BakeryError(f"{target}: exists and is not a file")
    with outputs.replacing(target) as fh:
        yield fh
