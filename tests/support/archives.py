"""Archives built here: the one synthetic sdist (tarfile), zips made by hand whose members
may lie about their sizes, and the check of a wheel's RECORD against its members."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import struct
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from tests.support.series import X_PY


def sdist(
    version: str,
    files: int = 40,
    extra: list[tarfile.TarInfo] | None = None,
    extra_data: dict[str, bytes] | None = None,
    modules: Mapping[str, str] | None = None,
) -> bytes:
    """vllm-<version>.tar.gz with PKG-INFO, vllm/x.py and some filler modules; then
    ``modules`` (tree-relative path -> text), then the ``extra`` members as given (their
    bytes from ``extra_data``; a hostile member may have none)."""
    top = f"vllm-{version}"
    members = {
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{top}/vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{top}/vllm/x.py": X_PY.encode(),
    }
    for i in range(files):
        members[f"{top}/vllm/pkg/m{i:03d}.py"] = f"VALUE = {i}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_000_000_000
            tar.addfile(info, io.BytesIO(data))
        for rel, text in (modules or {}).items():
            raw = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(raw), 0o644, 1_000_000_000
            tar.addfile(info, io.BytesIO(raw))
        for info in extra or []:
            payload = (extra_data or {}).get(info.name)
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return buf.getvalue()


def raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip by hand: (name, stored bytes, method, crc, stated size) per member, so that
    a member's sizes may lie as a hostile archive's do."""
    body, central = b"", b""
    for name, data, method, crc, usize in members:
        raw = name.encode()
        local = struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), usize, len(raw), 0
        )
        central += struct.pack(
            "<IBBBBHHHHIIIHHHHHII",
            0x02014B50, 20, 3, 20, 0, 0, method, 0, 0x21, crc, len(data), usize,
            len(raw), 0, 0, 0, 0, 0o100644 << 16, len(body),
        ) + raw  # fmt: skip
        body += local + raw + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                      len(central), len(body), 0)  # fmt: skip
    return body + central + end


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def check_record(path: Path) -> dict[str, bytes]:
    """Every member's sha256 and size as RECORD states them; the members' contents."""
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        contents = {i.filename: zf.read(i) for i in zf.infolist()}
    (record_name,) = [n for n in contents if n.endswith(".dist-info/RECORD")]
    rows = list(csv.reader(io.StringIO(contents[record_name].decode())))
    assert [r[0] for r in rows] == list(contents), "RECORD lists every member, in order"
    for name, hash_, size in rows:
        if name == record_name:
            assert (hash_, size) == ("", "")
        else:
            assert (hash_, size) == (record_hash(contents[name]), str(len(contents[name]))), name
    return contents


def pip_install_wheel(path: Path, target: Path, platform_tag: str) -> None:
    """Install the wheel at ``path`` into ``target`` with pip, as a user would on that
    platform (no index, no dependencies): pip's own reading of the wheel and its RECORD."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
            "--no-compile", "--disable-pip-version-check", "--only-binary=:all:",
            "--platform", platform_tag, "--target", str(target), str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def pure_wheel(name: str, version: str, code: str) -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel of one package ``name`` whose
    ``__init__.py`` is code, its RECORD complete: what a test index serves to pip."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": code.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{rel},{record_hash(data)},{len(data)}\n" for rel, data in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()
