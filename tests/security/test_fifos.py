"""Class 10: hangs on FIFOs.

A FIFO blocks the reader that opens it until a writer comes, for ever in CI. bakery
reads files of the cache (an entry's marker, the cached wheel listing and stamps, the
last-bake record, a cached sdist) and of a local ``--vllm`` tree; a FIFO, socket or
device at any of them is refused (or treated as damage) before it is opened. Each case
runs under an alarm: a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery import project
from bakery.safety import cachepolicy
from bakery.sources import wheels
from bakery.sources.cache import Cache
from tests.support.cli import refused
from tests.support.repos import git_repo
from tests.support.trees import Tiny

Cli = Callable[..., Result]


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    def hung(*_: object) -> None:
        raise AssertionError(f"still blocked after {seconds} s: a FIFO was opened")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_cache_marker_fifo_is_damage_not_a_hang(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    assert cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one").exit_code == 0
    (marker,) = (tmp_path / "cache" / "trees").glob("*.json")
    marker.unlink()
    os.mkfifo(marker)
    with within(30):
        r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "two")
        assert r.exit_code == 0, r.output
        assert marker.is_file()  # the entry was built again, its marker a file
        r = cli("cache", "list", "--json")
    assert r.exit_code == 0, r.output


def test_wheel_listing_and_stamp_fifos_are_not_opened(tmp_path: Path) -> None:
    cache = Cache()
    listing = cache.path("wheels") / "vllm-1.0.0.index.json"
    os.mkfifo(listing)
    with within(10):
        assert wheels._cached_listing(listing) is None
        stamp = cache.path("wheels") / "x.whl.ok.json"
        os.mkfifo(stamp)
        w = wheels.WheelFile("vllm-1.0.0-cp38-abi3-manylinux_2_28_x86_64.whl", "u", "0" * 64, 1)
        assert not wheels._trusted(cache.path("wheels") / "x.whl", stamp, w)


def test_last_bake_record_fifo(tmp_path: Path) -> None:
    record = Cache().path(".") / project.LAST_BAKES
    os.mkfifo(record)
    with within(10):
        assert project.last_applies(record) == {}
        project.remember(record, "demo", tmp_path / "out")  # an unwritable record never fails


def test_verify_with_a_fifo_record_says_one_line(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    (tiny.series / "tests").mkdir(exist_ok=True)
    (tiny.series / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    os.mkfifo(Cache().path(".") / project.LAST_BAKES)
    with within(30):
        r = cli("verify", "demo")
    refused(r, "no baked tree")


def test_cached_sdist_fifo_or_dev_zero_is_not_hashed(tmp_path: Path) -> None:
    from bakery.sources.resolve import cached_sha256

    sdists = Cache().path("sdists")
    fifo = sdists / "vllm-1.0.0.tar.gz"
    os.mkfifo(fifo)
    zero = sdists / "vllm-1.1.0.tar.gz"
    os.symlink("/dev/zero", zero)
    with within(10):
        assert cached_sha256(fifo) is None
        assert cached_sha256(zero) is None
    assert not os.path.lexists(fifo) and not os.path.lexists(zero)  # removed: fetched again


@pytest.mark.parametrize("where", ["vllm/model_executor/k.py", "PKG-INFO", "vllm/extra"])
def test_local_tree_fifo_is_refused(cli: Cli, tiny: Tiny, tmp_path: Path, where: str) -> None:
    """A FIFO in a local --vllm tree, where a diff reads or where the copy goes."""
    target = tiny.src / where
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    with within(30):
        r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    refused(r)
    assert not (tmp_path / "out").exists()


def test_policy_reads_refuse_special_files(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with within(10):
        for read in (cachepolicy.read_bytes, cachepolicy.sha256):
            with pytest.raises(cachepolicy.CacheRefused, match="not a regular file"):
                read(fifo)
        with pytest.raises(cachepolicy.CacheRefused, match="not a regular file"):
            cachepolicy.read_bytes(Path("/dev/zero"))
    link = tmp_path / "l"
    link.symlink_to(tmp_path / "x")
    (tmp_path / "x").write_text(json.dumps({}))
    with pytest.raises(cachepolicy.CacheRefused, match="symbolic link"):
        cachepolicy.read_text(link)
