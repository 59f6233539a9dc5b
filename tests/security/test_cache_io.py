"""Round 4, cache reads and writes: every reader through the cache policy, every writer
through the one temp-file writer, and ``cache list|clean`` over every kind of entry.

A verify record that is a FIFO, a link to ``/dev/zero`` or a link to a record elsewhere is
not read (no hang, no endless read) and is said once; a link planted at a temp name or a
linked ``CACHE/verify`` is never written through; ``cache list`` shows ``envs/`` and
``verify/`` with their sizes and ``clean`` removes them; no entry name reaches the
terminal raw. Each write case snapshots a decoy: nothing outside the cache changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.sources.cache import Cache
from bakery.testing import reuse
from tests.support.trees import snapshot, write_files

Cli = Callable[..., Result]
STATIC = "5" * 64


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_files(tmp_path / "tree", {"vllm/a.py": "A = 1\n"})


def _store(cache: Path, tree: Path) -> Path:
    reuse.store(cache, STATIC, tree, ["vllm.a"], {"exit_code": 0})
    (record,) = (cache / reuse.FOLDER).glob("*.json")
    return record


@pytest.mark.timeout(60)
def test_a_fifo_as_a_verify_record_does_not_block(tmp_path: Path, tree: Path) -> None:
    cache = tmp_path / "cache"
    record = _store(cache, tree)
    record.unlink()
    os.mkfifo(record)
    assert reuse.lookup(cache, STATIC, tree) is None


@pytest.mark.timeout(60)
def test_a_record_linked_to_dev_zero_is_refused_not_read(
    tmp_path: Path, tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    record = _store(cache, tree)
    record.unlink()
    record.symlink_to("/dev/zero")
    assert reuse.lookup(cache, STATIC, tree) is None
    assert reuse.lookup(cache, STATIC, tree) is None
    said = [r for r in caplog.records if "symbolic link" in r.getMessage()]
    assert len(said) == 1  # said once


def test_a_record_linked_to_a_sealed_record_elsewhere_is_not_taken(
    tmp_path: Path, tree: Path
) -> None:
    cache = tmp_path / "cache"
    record = _store(cache, tree)
    elsewhere = tmp_path / "elsewhere.json"
    os.replace(record, elsewhere)
    record.symlink_to(elsewhere)
    assert reuse.lookup(cache, STATIC, tree) is None
    os.replace(elsewhere, record)
    assert reuse.lookup(cache, STATIC, tree) is not None


def test_a_link_at_a_temp_name_is_never_written_through(tmp_path: Path, tree: Path) -> None:
    """The old temp name (``.NAME.PID.tmp``) and any other: the writer makes its own
    file with O_EXCL under a random name."""
    cache = tmp_path / "cache"
    record = _store(cache, tree)
    name = record.name
    record.unlink()
    decoy = write_files(tmp_path / "decoy", {"secret.txt": "the user's\n"})
    before = snapshot(decoy)
    for tmp in (f".{name}.{os.getpid()}.tmp", f".{name}.tmp"):
        (record.parent / tmp).symlink_to(decoy / "secret.txt")
    assert _store(cache, tree) == record
    assert json.loads(record.read_text())["static"] == STATIC
    assert snapshot(decoy) == before


def test_a_linked_verify_folder_is_replaced_never_written_through(
    tmp_path: Path, tree: Path
) -> None:
    cache = tmp_path / "cache"
    decoy = write_files(tmp_path / "decoy", {"keep.txt": "the user's\n"})
    before = snapshot(decoy)
    cache.mkdir()
    (cache / reuse.FOLDER).symlink_to(decoy, target_is_directory=True)
    assert reuse.lookup(cache, STATIC, tree) is None  # nothing read behind the link
    record = _store(cache, tree)
    assert not (cache / reuse.FOLDER).is_symlink()
    assert record.parent == cache / reuse.FOLDER
    assert snapshot(decoy) == before


def _entries(cli: Cli) -> dict[str, dict[str, object]]:
    r = cli("cache", "list", "--json")
    assert r.exit_code == 0, r.output
    return {e["key"]: e for e in json.loads(r.stdout)["entries"]}


def _env(cache: Path, key: str) -> None:
    write_files(cache / "envs", {f"{key}/bin/python": "x" * 1000, f"{key}.json": "{}"})


def test_cache_list_and_clean_know_envs_and_verify_with_sizes(
    cli: Cli, tmp_path: Path, tree: Path
) -> None:
    cache = Cache().path(".")
    _store(cache, tree)
    _env(cache, "abc123")
    entries = _entries(cli)
    assert entries["env-abc123"]["kind"] == "env"
    assert int(str(entries["env-abc123"]["size"])) >= 1000
    assert entries["verify"]["kind"] == "verify"
    assert int(str(entries["verify"]["size"])) > 0
    text = cli("cache", "list")
    assert "full test environment" in text.stdout and "1 verify result" in text.stdout
    r = cli("cache", "clean")
    assert r.exit_code == 0, r.output
    assert "removed env-abc123" in r.stdout and "removed verify" in r.stdout
    assert not list((cache / "envs").iterdir())
    assert not list((cache / "verify").iterdir())
    assert _entries(cli) == {}


def test_cache_clean_keep_counts_envs_by_their_last_use(cli: Cli, tmp_path: Path) -> None:
    cache = Cache().path(".")
    _env(cache, "old")
    _env(cache, "new")
    os.utime(cache / "envs" / "old.json", (1_000_000, 1_000_000))
    r = cli("cache", "clean", "--keep", "1")
    assert r.exit_code == 0, r.output
    assert (cache / "envs" / "new").is_dir() and not (cache / "envs" / "old").exists()


def test_a_linked_envs_folder_is_not_listed_or_cleaned_through(cli: Cli, tmp_path: Path) -> None:
    cache = Cache().path(".")
    decoy = write_files(tmp_path / "decoy", {"k/bin/python": "the user's", "k.json": "{}"})
    before = snapshot(decoy)
    (cache / "envs").symlink_to(decoy, target_is_directory=True)
    assert "env-k" not in _entries(cli)
    assert cli("cache", "clean").exit_code == 0
    assert snapshot(decoy) == before
    assert not (cache / "envs").is_symlink()


def test_a_leftover_triton_cache_or_link_is_listed_and_unlinked(cli: Cli, tmp_path: Path) -> None:
    cache = Cache().path(".")
    decoy = write_files(tmp_path / "decoy", {"x.so": b"\x7fELF"})
    before = snapshot(decoy)
    (cache / "triton").symlink_to(decoy, target_is_directory=True)
    assert _entries(cli)["triton"]["kind"] == "triton"
    assert cli("cache", "clean").exit_code == 0
    assert not os.path.lexists(cache / "triton")
    assert snapshot(decoy) == before


@pytest.mark.parametrize("args", [("clean", "--dry-run"), ("clean",), ("list",)])
def test_entry_names_never_reach_the_terminal_raw(cli: Cli, args: tuple[str, ...]) -> None:
    cache = Cache().path(".")
    (cache / "git" / "git-\x1b[31mred\x1b]0;title\x07").mkdir(parents=True)
    r = cli("cache", *args)
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "red" in r.output


def test_contained_refuses_a_link_or_anything_behind_a_linked_folder(tmp_path: Path) -> None:
    """cachepolicy.contained, the check lookup makes before it reads a record."""
    from bakery.safety import cachepolicy

    root = write_files(tmp_path / "cache", {"verify/r.json": "{}"})
    elsewhere = write_files(tmp_path / "elsewhere", {"r.json": "{}"})
    assert cachepolicy.contained(root, root / "verify" / "r.json")
    assert cachepolicy.contained(root, root / "verify" / "not-yet.json")
    (root / "verify" / "l.json").symlink_to(elsewhere / "r.json")
    assert not cachepolicy.contained(root, root / "verify" / "l.json")
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert not cachepolicy.contained(root, root / "linked" / "r.json")
    assert not cachepolicy.contained(root, tmp_path / "outside.json")
