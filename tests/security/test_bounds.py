"""Class 4: bombs and hangs. Every read of an archive or a download is bounded in time,
memory and disk (bakery.safety.limits, stated in the README), and every refusal is one
line, exit 2.

The hang cases carry a timeout: without the fix they never finish (a chain of 40 links
took exponential time; a FIFO blocks a read for ever).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import SourceError
from bakery.formats import unpack
from bakery.safety import limits
from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import serve
from tests.support.series import DIFF, series
from tests.support.trees import Tiny

Cli = Callable[..., Result]


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]], gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, data: bytes = b"x\n") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def link(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def folder(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info, None


@pytest.mark.timeout(60)
def test_symlink_chain_check_is_linear(tmp_path: Path) -> None:
    """Each link names the previous one twice: a recursive check doubles its work per
    link (2**60 steps here); the check now follows at most 40 links per path."""
    members = [folder("t/d"), member("t/d/f"), link("t/l0", "d")]
    members += [link(f"t/l{i}", f"l{i - 1}/../l{i - 1}") for i in range(1, 60)]
    (tmp_path / "x").mkdir()
    with pytest.raises(SourceError, match="links"):
        unpack.unpack(tar_bytes(members), tmp_path / "x", name="chain.tar", message="m\n")


def test_a_chain_within_the_limit_is_kept(tmp_path: Path) -> None:
    members = [folder("t/d"), member("t/d/f"), link("t/l0", "d")]
    members += [link(f"t/l{i}", f"l{i - 1}") for i in range(1, 30)]
    dest = tmp_path / "x"
    dest.mkdir()
    unpack.unpack(tar_bytes(members), dest, name="chain.tar", message="m\n")
    assert (dest / "l29" / "f").read_text() == "x\n"


def test_gzip_bomb_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_UNPACKED", 1 << 20)
    bomb = tar_bytes([member("t/zeros", bytes(8 << 20))], gz=True)
    assert len(bomb) < 64 << 10  # 8 MiB of tar from a few KiB
    dest = tmp_path / "x"
    dest.mkdir()
    with pytest.raises(SourceError, match="inflates to more than"):
        unpack.unpack(bomb, dest, name="bomb.tar.gz", message="m\n")


def test_too_many_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_MEMBERS", 5)
    dest = tmp_path / "x"
    dest.mkdir()
    data = tar_bytes([member(f"t/f{i}") for i in range(10)])
    with pytest.raises(SourceError, match="more than 5 members"):
        unpack.unpack(data, dest, name="many.tar", message="m\n")


def test_download_larger_than_the_index_says(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(tmp_path / "idx") as srv:
        data = sdist("9.9.0")
        entry = srv.add("vllm-9.9.0.tar.gz", data)
        entry["size"] = len(data) // 2
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path), "--vllm", "9.9.0", "--out", "out")
    refused(r, "larger than the index's size")
    assert not list((tmp_path / "cache" / "sdists").glob("*.part"))


def test_archive_over_the_limit_is_not_read(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_ARCHIVE", 100)
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        del entry["size"]
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path), "--vllm", "9.9.0", "--out", "out")
    refused(r, "larger than 100 bytes")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x.tar.gz", "data:,x"])
def test_index_answer_with_a_non_http_url(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        entry["url"] = url
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path), "--vllm", "9.9.0", "--out", "out")
    refused(r, "not an http(s) URL")


@pytest.mark.timeout(60)
def test_fifo_in_series_diffs(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    os.mkfifo(tiny.series / "diffs" / "05-pipe.diff")
    r = cli("check", "demo", "--vllm", tiny.src)
    refused(r, "05-pipe.diff", "FIFO")


def test_folder_named_like_a_diff(cli: Cli, tiny: Tiny) -> None:
    (tiny.series / "diffs" / "05-folder.diff").mkdir()
    r = cli("check", "demo", "--vllm", tiny.src)
    refused(r, "05-folder.diff", "folder")


@pytest.mark.timeout(60)
def test_fifo_in_a_local_tree(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    os.mkfifo(tiny.src / "vllm" / "pipe.py")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    refused(r, "pipe.py", "FIFO")
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_fifo_in_an_installed_package_folder(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    pkg = tiny.src / "vllm"  # used as site-packages/vllm
    os.mkfifo(pkg / "pipe.py")
    r = cli("apply", "demo", "--vllm", pkg, "--out", tmp_path / "out")
    refused(r, "pipe.py", "FIFO")
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_fifo_in_series_toml_place(cli: Cli, tiny: Tiny) -> None:
    (tiny.series / "series.toml").unlink()
    os.mkfifo(tiny.series / "series.toml")
    r = cli("check", "demo", "--vllm", tiny.src)
    refused(r, "series.toml", "FIFO")


@pytest.mark.timeout(60)
def test_fifo_in_a_tree_being_refreshed(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    k = out / "vllm" / "model_executor" / "k.py"
    k.unlink()
    os.mkfifo(k)
    r = cli("refresh", "demo", "--tree", out)
    refused(r, "FIFO")


def test_gzip_bomb_through_the_cli(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_UNPACKED", 1 << 20)
    bomb = gzip.compress(tar_bytes([member("vllm-9.9.0/zeros", bytes(4 << 20))]))
    with serve(tmp_path / "idx") as srv:
        srv.index([srv.add("vllm-9.9.0.tar.gz", bomb)])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path, DIFF), "--vllm", "9.9.0", "--out", "out")
    refused(r, "inflates to more than")
    assert not [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
