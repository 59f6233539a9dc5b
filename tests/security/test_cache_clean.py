"""Class 2: ``bakery cache clean`` must never delete the user's files.

The cache's top folders (``trees/``, ``sdists/``, ``git/``) and its entries are data: a
restored cache can make any of them a symlink to the user's own folder, filled with
names that look like entries. ``cache list`` lists nothing behind a link, ``clean``
removes the link itself (never what it names), and the next bake makes the folder
again. Each case snapshots the decoy folder before and after: nothing changed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.repos import git_repo, hook
from tests.support.trees import Tiny, snapshot

Cli = Callable[..., Result]


def _decoy(tmp_path: Path, marker: Path) -> Path:
    """The user's folder, holding what looks like every kind of cache entry (and a hook
    that would leave marker if git ran in it)."""
    d = tmp_path / "decoy"
    for rel in ("vllm-1.0.0/vllm/x.py", "git-0123456789abcdef-0123456789abcdef/f.py"):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text("the user's work\n")
    (d / "vllm-1.0.0.json").write_text(json.dumps({"commit": "0" * 40, "version": "1.0.0"}))
    (d / "vllm-1.0.0.tar.gz").write_bytes(b"the user's archive")
    (d / "git-0123456789abcdef").mkdir()
    (d / "git-0123456789abcdef" / "config").write_text("[core]\n\tbare = true\n")
    hook(d / "git-0123456789abcdef", "reference-transaction", marker)
    return d


def _cache(cli: Cli, tiny: Tiny, tmp_path: Path) -> Path:
    git_repo(tiny.src, {})
    r = cli("apply", "demo", "--vllm", f"git+file://{tiny.src}@main", "--out", tmp_path / "one")
    assert r.exit_code == 0, r.output
    return tmp_path / "cache"


def _entries(cli: Cli) -> list[dict[str, object]]:
    r = cli("cache", "list", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["entries"]


@pytest.mark.parametrize("top", ["trees", "sdists", "git"])
def test_linked_top_folder_is_never_listed_or_cleaned_through(
    cli: Cli, tiny: Tiny, tmp_path: Path, top: str
) -> None:
    """The end-to-end scenario: list, clean, then bake again; nothing ran, the decoy is
    as it was, and the cache is bakery's own again."""
    marker = tmp_path / "PWNED"
    cache = _cache(cli, tiny, tmp_path)
    decoy = _decoy(tmp_path, marker)
    before = snapshot(decoy)
    shutil.rmtree(cache / top, ignore_errors=True)
    os.symlink(decoy, cache / top)
    shown = [str(p) for e in _entries(cli) for p in e["paths"]]  # type: ignore[attr-defined]
    assert not any(str(decoy) in p or f"/{top}/" in p for p in shown), shown
    r = cli("cache", "clean")
    assert r.exit_code == 0, r.output
    assert snapshot(decoy) == before
    r = cli("apply", "demo", "--vllm", f"git+file://{tiny.src}@main", "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert not (cache / top).is_symlink()  # clean removed the link itself
    assert snapshot(decoy) == before
    assert not marker.exists()


def test_entry_that_is_a_link_is_unlinked_not_followed(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    cache = _cache(cli, tiny, tmp_path)
    decoy = _decoy(tmp_path, tmp_path / "PWNED")
    before = snapshot(decoy)
    (entry,) = [p for p in (cache / "trees").iterdir() if p.is_dir()]
    shutil.rmtree(entry)
    os.symlink(decoy / "vllm-1.0.0", entry)
    (mirror,) = [p for p in (cache / "git").iterdir() if p.is_dir()]
    shutil.rmtree(mirror)
    os.symlink(decoy / "git-0123456789abcdef", mirror)
    r = cli("cache", "clean")
    assert r.exit_code == 0, r.output
    assert snapshot(decoy) == before
    assert not os.path.lexists(entry) and not os.path.lexists(mirror)


def test_marker_that_is_a_link_is_not_read_or_followed(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    cache = _cache(cli, tiny, tmp_path)
    decoy = _decoy(tmp_path, tmp_path / "PWNED")
    before = snapshot(decoy)
    (marker,) = (cache / "trees").glob("*.json")
    marker.unlink()
    os.symlink(decoy / "vllm-1.0.0.json", marker)
    assert all(e["version"] != "1.0.0" for e in _entries(cli))
    assert cli("cache", "clean").exit_code == 0
    assert snapshot(decoy) == before


def test_size_of_a_linked_entry_is_the_link_only(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    cache = _cache(cli, tiny, tmp_path)
    decoy = _decoy(tmp_path, tmp_path / "PWNED")
    (decoy / "big").write_bytes(b"x" * 1_000_000)
    (entry,) = [p for p in (cache / "trees").iterdir() if p.is_dir()]
    shutil.rmtree(entry)
    os.symlink(decoy, entry)
    sizes = {e["key"]: e["size"] for e in _entries(cli)}
    size = sizes[entry.name]
    assert isinstance(size, int) and size < 1_000_000
