"""The cache policy's own promises (safety/cachepolicy.py), each at its edge.

A read is bounded: a file of exactly the limit is read, one byte more is refused, and a
file that grows after its size was checked (a writer racing the reader) is read no
further than the limit. A refusal names what was read and where. A top folder of the
cache that is a link or a file is made a real folder again with repair (the link goes,
never what it names), and two bakes that make the same top folder at once both get it.
``contained`` takes only what lies in real folders of the cache and is not a link.

The racing writer and the racing bake are stand-ins (a wrapper of the module's own
``_open`` or ``_lstat``) only to put the other process's step between two of the
policy's: the files, links and folders are real.
"""

from __future__ import annotations

import hashlib
import os
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from bakery.safety import cachepolicy
from bakery.safety.cachepolicy import CacheRefused
from tests.support.trees import snapshot, write_files


def _refused(what: str, path: Path, why: str) -> str:
    return re.escape(f"{what} {path} {why}")


@pytest.mark.parametrize("limit", [1, 10, 4096])
def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(
    tmp_path: Path, limit: int
) -> None:
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * limit)
    assert cachepolicy.read_bytes(exact, limit) == b"x" * limit
    assert cachepolicy.read_text(exact, limit) == "x" * limit
    assert cachepolicy.sha256(exact, limit) == hashlib.sha256(b"x" * limit).hexdigest()
    over = tmp_path / "over"
    over.write_bytes(b"x" * (limit + 1))
    for read in (cachepolicy.read_bytes, cachepolicy.sha256):
        with pytest.raises(CacheRefused, match=f"is larger than {limit} bytes"):
            read(over, limit)


def _grows_after_the_size_check(monkeypatch: pytest.MonkeyPatch, to: int) -> None:
    """A writer racing the reader: right after _open checked the size, the file grows to
    ``to`` bytes (sparse: nothing is written to disk)."""
    real = cachepolicy._open

    def racing(path: Path, limit: int, what: str) -> tuple[int, int]:
        fd, size = real(path, limit, what)
        os.truncate(path, to)
        return fd, size

    monkeypatch.setattr(cachepolicy, "_open", racing)


def test_a_file_that_grows_after_the_size_check_is_read_no_further_than_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grows = tmp_path / "grows"
    grows.write_bytes(b"x" * 100)
    _grows_after_the_size_check(monkeypatch, 64 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(CacheRefused, match=_refused("cache file", grows, "is larger")):
            cachepolicy.read_bytes(grows, 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes held to refuse a file over 1000 bytes"


@pytest.mark.parametrize("grows_to", [(3 << 20), (1 << 20) + 11])
def test_a_hashed_file_that_grows_past_the_limit_is_refused_whatever_each_read_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grows_to: int
) -> None:
    """The limit counts every byte read, not one read's: a file that grows to several
    reads' worth, each of them under the limit, is still refused."""
    limit = (1 << 20) + 10
    grows = tmp_path / "grows.tar.gz"
    grows.write_bytes(b"x" * 100)
    _grows_after_the_size_check(monkeypatch, grows_to)
    said = _refused("cached file", grows, f"is larger than {limit} bytes")
    with pytest.raises(CacheRefused, match=said):
        cachepolicy.sha256(grows, limit)


def test_a_hashed_file_that_grows_but_stays_within_the_limit_is_hashed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = (3 << 20) + 1
    grows = tmp_path / "grows.tar.gz"
    grows.write_bytes(b"")
    _grows_after_the_size_check(monkeypatch, 3 << 20)
    assert cachepolicy.sha256(grows, limit) == hashlib.sha256(bytes(3 << 20)).hexdigest()


@pytest.mark.timeout(10)  # a FIFO opened without O_NONBLOCK blocks: fail, do not hang
@pytest.mark.parametrize("what", [None, "verify record", "listing"])
def test_a_refusal_names_what_was_read_and_where(tmp_path: Path, what: str | None) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    why = "is not a regular file"
    reads: list[tuple[str, Callable[..., object]]] = [
        ("cache file", cachepolicy.read_bytes),
        ("cache file", cachepolicy.read_text),
        ("cached file", cachepolicy.sha256),
    ]
    for default, read in reads:
        said = default if what is None else what
        with pytest.raises(CacheRefused, match="^" + _refused(said, fifo, why)):
            if what is None:
                read(fifo)
            else:
                read(fifo, 1 << 20, what)


@pytest.mark.parametrize("damage", ["link", "file"])
def test_a_top_folder_that_is_a_link_or_a_file_is_a_real_folder_again_only_with_repair(
    tmp_path: Path, damage: str
) -> None:
    root = write_files(tmp_path / "cache", {"git/m": "x"})
    elsewhere = write_files(tmp_path / "elsewhere", {"theirs.txt": "the user's\n"})
    before = snapshot(elsewhere)
    trees = root / "trees"
    if damage == "link":
        trees.symlink_to(elsewhere, target_is_directory=True)
    else:
        trees.write_text("not a folder\n")
    assert cachepolicy.top(root, "trees", repair=False) is None
    assert os.path.lexists(trees) and not cachepolicy.is_real_dir(trees)
    assert cachepolicy.top(root, "trees", repair=True) == trees
    assert cachepolicy.is_real_dir(trees) and not list(trees.iterdir())
    assert snapshot(elsewhere) == before  # the link went, never what it named
    # a real one is kept as it is, with what is in it
    assert cachepolicy.top(root, "git", repair=True) == root / "git"
    assert (root / "git" / "m").read_text() == "x"


def test_top_with_repair_makes_a_missing_cache_root_too(tmp_path: Path) -> None:
    root = tmp_path / "new" / "cache"
    assert cachepolicy.top(root, "verify", repair=False) is None
    assert not root.exists()
    assert cachepolicy.top(root, "verify", repair=True) == root / "verify"
    assert cachepolicy.is_real_dir(root / "verify")


def test_two_bakes_that_make_the_same_top_folder_at_once_both_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_files(tmp_path / "cache", {"README": "cache\n"})
    trees = root / "trees"
    real = cachepolicy._lstat

    def other_bake_right_after(path: Path) -> os.stat_result | None:
        st = real(path)
        if path == trees and st is None:
            trees.mkdir()  # the other bake's mkdir, between this one's look and its own
        return st

    monkeypatch.setattr(cachepolicy, "_lstat", other_bake_right_after)
    assert cachepolicy.top(root, "trees", repair=True) == trees
    assert cachepolicy.is_real_dir(trees)


def test_contained_takes_only_what_lies_in_real_folders_of_the_cache_and_is_no_link(
    tmp_path: Path,
) -> None:
    root = write_files(tmp_path / "cache", {"verify/r.json": "{}", "verify/sub/s.json": "{}"})
    elsewhere = write_files(tmp_path / "elsewhere", {"r.json": "{}"})
    verify = root / "verify"
    assert cachepolicy.contained(root, verify / "r.json")  # a file
    assert cachepolicy.contained(root, verify / "sub")  # a folder
    assert cachepolicy.contained(root, verify / "sub" / "s.json")
    assert cachepolicy.contained(root, verify / "not-yet.json")  # nothing yet
    (verify / "l.json").symlink_to(elsewhere / "r.json")
    (verify / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    (verify / "ldir").symlink_to(elsewhere, target_is_directory=True)
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert not cachepolicy.contained(root, verify / "l.json")
    assert not cachepolicy.contained(root, verify / "dangling.json")
    assert not cachepolicy.contained(root, verify / "ldir")
    assert not cachepolicy.contained(root, root / "linked" / "r.json")
    assert not cachepolicy.contained(root, verify / "ldir" / "r.json")
    assert not cachepolicy.contained(root, tmp_path / "outside.json")
    assert not cachepolicy.contained(root, verify / ".." / ".." / "elsewhere" / "r.json")
