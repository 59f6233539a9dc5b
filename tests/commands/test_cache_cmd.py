"""``bakery cache list|dir|clean``: entries of real bakes (a local index, a local git
repository), kept by when they were last used, removed under their locks."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from filelock import FileLock

from tests.support.archives import sdist
from tests.support.index import LocalIndex, serve
from tests.support.repos import git
from tests.support.trees import Tiny

VERSIONS = ("1.0.0", "1.1.0", "1.2.0")
DAY = 86400


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalIndex]:
    idx = LocalIndex({f"vllm-{v}.tar.gz": sdist(v, files=3) for v in VERSIONS})
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        yield idx


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def baked(served: LocalIndex, tiny: Tiny, cache: Path, cli: Callable[..., Result]) -> Path:
    """Three releases in the cache, used 30, 20 and 10 days ago."""
    series = tiny.series.parent / "x"
    (series / "diffs").mkdir(parents=True)
    (series / "series.toml").write_text('strip = 1\nroot = ""\n')
    (series / "diffs" / "01-x.diff").write_text(
        "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+A\n"
    )
    for age, v in zip((30, 20, 10), VERSIONS, strict=True):
        assert cli("apply", series, "--vllm", v, "--out", f"out-{v}").exit_code == 0
        when = time.time() - age * DAY
        os.utime(cache / "trees" / f"vllm-{v}.json", (when, when))
    return series


def listing(cli: Callable[..., Result]) -> list[dict[str, object]]:
    r = cli("cache", "list", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["entries"]


def test_list_shows_entries_used_last_first(
    baked: Path, cache: Path, cli: Callable[..., Result]
) -> None:
    rows = listing(cli)
    assert [(e["key"], e["kind"], e["version"], e["complete"]) for e in rows] == [
        (f"vllm-{v}", "release", v, True) for v in reversed(VERSIONS)
    ]
    for e in rows:
        assert e["size"] > 0  # type: ignore[operator]
        assert str(cache / "sdists" / f"{e['key']}.tar.gz") in e["paths"]  # type: ignore[operator]
    text = cli("cache", "list").output
    assert "3 entries" in text and str(cache) in text and "10 days ago" in text


def test_dir_prints_the_cache_folder(cache: Path, cli: Callable[..., Result]) -> None:
    r = cli("cache", "dir")
    assert r.exit_code == 0 and r.output.strip() == str(cache)


def test_a_bake_marks_its_entry_used(baked: Path, cli: Callable[..., Result]) -> None:
    assert cli("apply", baked, "--vllm", "1.0.0", "--out", "again").exit_code == 0
    assert [e["key"] for e in listing(cli)][0] == "vllm-1.0.0"


def test_clean_keep_removes_all_but_the_newest(
    baked: Path, cache: Path, served: LocalIndex, cli: Callable[..., Result]
) -> None:
    dry = cli("cache", "clean", "--keep", "1", "--dry-run")
    assert dry.exit_code == 0 and "would remove 2 entries" in dry.output
    assert len(listing(cli)) == 3
    r = cli("cache", "clean", "--keep", "1")
    assert r.exit_code == 0, r.output
    assert "removed vllm-1.0.0" in r.output and "removed vllm-1.1.0" in r.output
    assert [e["key"] for e in listing(cli)] == ["vllm-1.2.0"]
    for v in VERSIONS[:2]:
        assert not (cache / "trees" / f"vllm-{v}").exists()
        assert not (cache / "sdists" / f"vllm-{v}.tar.gz").exists()
    # what was removed is fetched again when needed
    assert cli("apply", baked, "--vllm", "1.0.0", "--out", "again").exit_code == 0


def test_clean_older_than(baked: Path, cli: Callable[..., Result]) -> None:
    r = cli("cache", "clean", "--older-than", "25")  # used 30, 20 and 10 days ago
    assert r.exit_code == 0, r.output
    assert [e["key"] for e in listing(cli)] == ["vllm-1.2.0", "vllm-1.1.0"]


def test_clean_leaves_an_entry_a_bake_holds(
    baked: Path, cache: Path, cli: Callable[..., Result]
) -> None:
    with FileLock(str(cache / "locks" / "vllm-1.0.0.lock")):
        r = cli("cache", "clean")
    assert r.exit_code == 0, r.output
    assert "in use by a running bake, kept: vllm-1.0.0" in r.output
    assert [e["key"] for e in listing(cli)] == ["vllm-1.0.0"]
    assert (cache / "trees" / "vllm-1.0.0" / "vllm" / "x.py").is_file()


def test_clean_options_are_checked(cli: Callable[..., Result]) -> None:
    r = cli("cache", "clean", "--keep", "1", "--older-than", "3")
    assert r.exit_code == 2
    assert r.output.strip() == "error: cache clean: give --keep N or --older-than DAYS, not both"


def test_git_mirror_goes_with_its_last_tree(
    tiny: Tiny, cache: Path, cli: Callable[..., Result]
) -> None:
    git(tiny.src, "init", "-q")
    git(tiny.src, "add", "-A")
    git(tiny.src, "commit", "-q", "-m", "one")
    assert cli("apply", "demo", "--vllm", f"git+{tiny.src}@main", "--out", "a").exit_code == 0
    kinds = sorted(str(e["kind"]) for e in listing(cli))
    assert kinds == ["git", "mirror"]
    assert cli("cache", "clean", "--keep", "1").exit_code == 0
    assert sorted(str(e["kind"]) for e in listing(cli)) == ["git", "mirror"]
    assert cli("cache", "clean", "--keep", "0").exit_code == 0
    assert listing(cli) == []
    assert not any((cache / "git").iterdir())


def test_clean_leaves_a_tree_a_bake_is_still_copying(
    baked: Path, cache: Path, cli: Callable[..., Result]
) -> None:
    """The key's lock covers a bake's lookup; the entry's hold covers the copy after it."""
    from bakery.sources.cache import Cache
    from bakery.sources.resolve import release

    pristine = release("1.1.0", Cache())  # looked up, lock released, copy not done
    try:
        r = cli("cache", "clean")
        assert "in use by a running bake, kept: vllm-1.1.0" in r.output
        assert (pristine.tree / "vllm" / "x.py").is_file()
    finally:
        pristine.close()
    assert cli("cache", "clean").exit_code == 0
    assert listing(cli) == []
