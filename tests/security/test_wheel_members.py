"""Class 7 (wheels) and the wheels' part of class 12: what an installer sees.

pip writes ``vllm/./x.py`` to the same file as ``vllm/x.py``: a wheel holding both would
bake "successfully" while the unpatched file is installed. Members whose sizes or
offsets lie (overlapping bytes, zip64 fields) give a wheel pip rejects. Every name and
text field is decoded or refused; a file name in ``dist/`` is built only from validated
parts. Each is one line (SourceError, exit 2), found before anything is written.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from bakery.errors import SourceError
from bakery.formats import zipraw
from bakery.package import metadata, wheel
from bakery.sources import wheels
from tests.support.archives import raw_zip


def _member(name: str, data: bytes = b"x = 1\n") -> tuple[str, bytes, int, int, int]:
    return (name, data, 0, zlib.crc32(data), len(data))


def _directory(tmp_path: Path, data: bytes) -> zipraw.Directory:
    p = tmp_path / "w.whl"
    p.write_bytes(data)
    with p.open("rb") as fh:
        return zipraw.read_directory(fh.fileno(), p.name)


@pytest.mark.parametrize(
    "name",
    ["vllm/./x.py", "vllm//x.py", "./vllm/x.py", "vllm/../vllm/x.py", "/vllm/x.py",
     "vllm\\x.py", "vllm/x\x1b[31m.py", ""],
)  # fmt: skip
def test_member_names_that_are_not_normalised_are_refused(tmp_path: Path, name: str) -> None:
    data = raw_zip([_member("vllm/x.py"), _member(name)])
    with pytest.raises(SourceError, match="not a normalised path"):
        _directory(tmp_path, data)


def test_normal_names_and_folders_are_read(tmp_path: Path) -> None:
    d = _directory(tmp_path, raw_zip([_member("vllm/"), _member("vllm/x.py")]))
    assert [e.name for e in d.entries] == ["vllm/", "vllm/x.py"]


def test_non_utf8_name_is_one_line(tmp_path: Path) -> None:
    data = raw_zip([_member("vllm/x.py")]).replace(b"vllm/x.py", b"vllm/\xff.py")
    # flag the names UTF-8 (bit 11) in the central directory
    cd = data.index(b"PK\x01\x02")
    data = data[: cd + 8] + struct.pack("<H", 0x800) + data[cd + 10 :]
    with pytest.raises(SourceError, match="not valid UTF-8"):
        _directory(tmp_path, data)


def test_overlapping_members_are_refused(tmp_path: Path) -> None:
    """The second member's offset points into the first one's bytes."""
    data = bytearray(raw_zip([_member("vllm/a.py", b"a" * 200), _member("vllm/b.py")]))
    cd = data.index(b"PK\x01\x02")
    second = data.index(b"PK\x01\x02", cd + 4)
    struct.pack_into("<I", data, second + 42, 40)  # its local header offset: inside a.py
    with pytest.raises(SourceError, match="overlaps"):
        _directory(tmp_path, bytes(data))


def test_a_lying_compressed_size_is_refused(tmp_path: Path) -> None:
    data = bytearray(raw_zip([_member("vllm/a.py"), _member("vllm/b.py")]))
    cd = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 20, 10_000)  # a.py's csize runs over b.py
    with pytest.raises(SourceError, match="overlaps"):
        _directory(tmp_path, bytes(data))


def test_zip64_fields_that_lie_are_refused(tmp_path: Path) -> None:
    """A zip64 extra field whose size runs past the central directory."""
    name = b"vllm/a.py"
    extra = struct.pack("<HHQQ", 0x0001, 16, 6, 1 << 40)  # usize 6, csize 1 TiB
    data = raw_zip([_member("vllm/a.py")])
    cd = data.index(b"PK\x01\x02")
    head = bytearray(data[cd : cd + 46])
    struct.pack_into("<II", head, 20, 0xFFFFFFFF, 0xFFFFFFFF)  # csize, usize: in zip64
    struct.pack_into("<H", head, 30, len(extra))
    central = bytes(head) + name + extra
    body = data[:cd]
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(body), 0)
    with pytest.raises(SourceError, match="overlaps|lie"):
        _directory(tmp_path, body + central + end)


def test_record_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    record = b"vllm/x.py,sha256=\xff\xfe,6\n"
    data = raw_zip([_member("vllm/x.py"), _member("vllm-1.0.dist-info/RECORD", record)])
    d = _directory(tmp_path, data)
    names = {e.name: e for e in d.entries}
    with (tmp_path / "w.whl").open("rb") as fh, pytest.raises(SourceError, match="not UTF-8"):
        wheel._read_record(fh.fileno(), "vllm-1.0.dist-info/RECORD", names, "w.whl")


def test_metadata_that_is_not_utf8_is_one_line() -> None:
    with pytest.raises(SourceError, match="METADATA"):
        metadata.metadata(b"Name: vllm\nVersion: 1.0\xff\n\n", "1.0", "1.0+s", "w.whl")


def test_inflated_member_is_stopped_at_its_stated_size(tmp_path: Path) -> None:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    big = c.compress(bytes(1 << 24)) + c.flush()
    data = raw_zip([("vllm-1.0.dist-info/METADATA", big, 8, 0, 100)])
    (e,) = _directory(tmp_path, data).entries
    with (tmp_path / "w.whl").open("rb") as fh, pytest.raises(SourceError, match="size"):
        zipraw.read_member(fh.fileno(), e, "w.whl")


@pytest.mark.parametrize(
    "filename",
    ["vllm-1.0-cp38-abi3-manylinux_2_28_x86_64\x1b[2J.whl",
     "vllm-1.0-cp38-abi3-manylinux_2_28_x86_64\n.whl",
     "../vllm-1.0-cp38-abi3-manylinux_2_28_x86_64.whl",
     "vllm-1.0-cp38-abi3-linux/../../x.whl"],
)  # fmt: skip
def test_dist_file_names_come_only_from_validated_parts(filename: str) -> None:
    assert not wheels.valid_name(filename)
    with pytest.raises(SourceError, match="not a wheel file name"):
        wheel.wheel_name(filename, "1.0+s.abc")
