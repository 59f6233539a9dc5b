"""Class 11: the integrity of the cache.

A cache entry is bakery's only while it is exactly what bakery built. A patched file
replaced by a symlink, an entry that is itself a symlink, a marker that is a folder or
a link, an entry without its marker: each is detected on the next bake, which says so
in one line and extracts the entry again; none gives a traceback or a refusal that
repeats on every later bake.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from bakery.git.repo import intact
from tests.support.repos import git_repo
from tests.support.trees import Tiny, snapshot

Cli = Callable[..., Result]
PATCHED = "vllm/model_executor/k.py"


def _entry(cli: Cli, tiny: Tiny, tmp_path: Path) -> tuple[str, Path]:
    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one")
    assert r.exit_code == 0, r.output
    (entry,) = [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
    return spec, entry


def _bakes_again(cli: Cli, spec: str, tmp_path: Path, out: str = "two") -> Result:
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / out)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    baked = json.loads((tmp_path / out / ".bakery/manifest.json").read_text())
    assert baked["status"] == "baked"
    return r


def test_patched_file_replaced_by_a_symlink_is_extracted_again(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    spec, entry = _entry(cli, tiny, tmp_path)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "k.py").write_text("the user's file\n")
    before = snapshot(decoy)
    (entry / PATCHED).unlink()
    os.symlink(decoy / "k.py", entry / PATCHED)
    r = _bakes_again(cli, spec, tmp_path)
    assert "extracted again" in r.stderr or "built again" in r.stderr
    assert not (entry / PATCHED).is_symlink()
    assert snapshot(decoy) == before
    # and the next bake is quiet again: the entry is whole
    r = _bakes_again(cli, spec, tmp_path, "three")
    assert "built again" not in r.stderr and "extracted again" not in r.stderr


def test_entry_that_is_a_symlink_recovers(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    spec, entry = _entry(cli, tiny, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(entry, elsewhere, symlinks=True)
    shutil.rmtree(entry)
    os.symlink(elsewhere, entry)
    before = snapshot(elsewhere)
    _bakes_again(cli, spec, tmp_path)
    assert entry.is_dir() and not entry.is_symlink() and intact(entry / ".git")
    assert snapshot(elsewhere) == before


def test_marker_that_is_a_folder_or_link_recovers(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    spec, entry = _entry(cli, tiny, tmp_path)
    marker = entry.with_name(entry.name + ".json")
    marker.unlink()
    marker.mkdir()
    _bakes_again(cli, spec, tmp_path)
    assert marker.is_file()
    real = tmp_path / "elsewhere.json"
    real.write_text(marker.read_text())
    marker.unlink()
    os.symlink(real, marker)
    _bakes_again(cli, spec, tmp_path, "three")
    assert marker.is_file() and not marker.is_symlink()


def test_entry_without_marker_is_built_again(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    spec, entry = _entry(cli, tiny, tmp_path)
    entry.with_name(entry.name + ".json").unlink()
    (entry / PATCHED).write_text("changed\n")
    _bakes_again(cli, spec, tmp_path)
    assert (entry / PATCHED).read_text() == (tiny.src / PATCHED).read_text()


def test_file_in_an_entry_changed_is_extracted_again(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    spec, entry = _entry(cli, tiny, tmp_path)
    (entry / PATCHED).write_text("changed\n")
    r = _bakes_again(cli, spec, tmp_path)
    assert "built again" in r.stderr or "extracted again" in r.stderr
    assert (entry / PATCHED).read_text() == (tiny.src / PATCHED).read_text()
