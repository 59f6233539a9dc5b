"""Class 1: code runs from a poisoned cache.

A cached git mirror whose ``config`` is clean can still send git to another
repository's configuration: a ``commondir`` file (git reads ``$GIT_COMMON_DIR/config``),
a ``.git`` gitfile or repository in it (discovery looks for ``.git`` first), alternates.
There, ``remote.<URL>.uploadpack`` runs on the next fetch of that URL. Each case plants
one of these next to a decoy repository holding the trap; the next bake runs nothing
(the marker stays absent), leaves the decoy as it was, and fetches the mirror anew.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.git import remote
from bakery.git.repo import intact
from tests.support.repos import git, git_repo, trap
from tests.support.trees import Tiny, snapshot

Cli = Callable[..., Result]


def _evil(tmp_path: Path, url: str, marker: Path) -> Path:
    """A bare repository whose config runs the trap for any fetch of url."""
    evil = tmp_path / "decoy" / "evil.git"
    evil.parent.mkdir(parents=True, exist_ok=True)
    git(evil.parent, "init", "-q", "--bare", evil.name)
    with (evil / "config").open("a") as fh:
        fh.write(
            f'[remote "{url}"]\n\tuploadpack = {trap(marker)}\n'
            f"[core]\n\tfsmonitor = {trap(marker)}\n\tsshCommand = {trap(marker)}\n"
        )
    return evil


def _baked_once(cli: Cli, tiny: Tiny, tmp_path: Path) -> tuple[str, Path]:
    git_repo(tiny.src, {})
    url = f"file://{tiny.src}"
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", tmp_path / "one")
    assert r.exit_code == 0, r.output
    (mirror,) = [p for p in (tmp_path / "cache" / "git").iterdir() if p.name.startswith("git-")]
    return url, mirror


def _plant_commondir(mirror: Path, evil: Path) -> None:
    (mirror / "commondir").write_text(f"{evil}\n")


def _plant_gitfile(mirror: Path, evil: Path) -> None:
    (mirror / ".git").write_text(f"gitdir: {evil}\n")


def _plant_git_repo(mirror: Path, evil: Path) -> None:
    os.symlink(evil, mirror / ".git")


def _plant_alternates(mirror: Path, evil: Path) -> None:
    (mirror / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (mirror / "objects" / "info" / "alternates").write_text(f"{evil}/objects\n")


def _plant_include(mirror: Path, evil: Path) -> None:
    with (mirror / "config").open("a") as fh:
        fh.write(f"[include]\n\tpath = {evil}/config\n")


def _plant_mirror_link(mirror: Path, evil: Path) -> None:
    import shutil

    shutil.rmtree(mirror)
    os.symlink(evil, mirror)


def _link_in(store: Path, evil: Path, sub: str) -> None:
    """store/sub (a folder git reads) replaced by a link to the decoy's: another store."""
    import shutil

    target = evil / sub
    target.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(store / sub)
    os.symlink(target, store / sub)


def _plant_objects_link(mirror: Path, evil: Path) -> None:
    _link_in(mirror, evil, "objects")


def _plant_refs_link(mirror: Path, evil: Path) -> None:
    _link_in(mirror, evil, "refs")


def _plant_pack_link(mirror: Path, evil: Path) -> None:
    _link_in(mirror, evil, "objects/pack")


def _plant_heads_link(mirror: Path, evil: Path) -> None:
    _link_in(mirror, evil, "refs/heads")


PLANTS = [
    _plant_objects_link,
    _plant_refs_link,
    _plant_pack_link,
    _plant_heads_link,
    _plant_commondir,
    _plant_gitfile,
    _plant_git_repo,
    _plant_alternates,
    _plant_include,
    _plant_mirror_link,
]


@pytest.mark.parametrize("plant", PLANTS, ids=lambda f: f.__name__[len("_plant_") :])
def test_redirected_mirror_runs_nothing_and_is_fetched_again(
    cli: Cli, tiny: Tiny, tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    """The end-to-end scenario: nothing ran, nothing outside bakery's places changed,
    and the mirror is bakery's own again."""
    marker = tmp_path / "PWNED"
    url, mirror = _baked_once(cli, tiny, tmp_path)
    evil = _evil(tmp_path, url, marker)
    plant(mirror, evil)
    before = snapshot(tmp_path / "decoy")
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert not marker.exists()
    assert snapshot(tmp_path / "decoy") == before
    assert not mirror.is_symlink() and remote.mirror_intact(mirror)
    assert not (mirror / "commondir").exists() and not os.path.lexists(mirror / ".git")
    assert json.loads((tmp_path / "two/.bakery/manifest.json").read_text())["status"] == "baked"


def test_upstream_refuses_a_redirected_mirror(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    """bakery upstream reads the mirror's history: a mirror with commondir is refused with
    one line before git reads it."""
    from bakery.sources.cache import Cache
    from bakery.sources.gitsource import git_mirror

    marker = tmp_path / "PWNED"
    url, mirror = _baked_once(cli, tiny, tmp_path)
    _plant_commondir(mirror, _evil(tmp_path, url, marker))
    from bakery.errors import SourceError

    with pytest.raises(SourceError, match="bakery did not write"):
        git_mirror(url, Cache())
    assert not marker.exists()


@pytest.mark.parametrize("name", ["commondir", "gitdir", "objects/info/alternates"])
def test_cache_entry_redirected_is_rebuilt(cli: Cli, tiny: Tiny, tmp_path: Path, name: str) -> None:
    """A cached tree's .git that sends git elsewhere (or is a gitfile) is not intact."""
    marker = tmp_path / "PWNED"
    url, _ = _baked_once(cli, tiny, tmp_path)
    evil = _evil(tmp_path, url, marker)
    (entry,) = [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
    target = entry / ".git" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"{evil}\n")
    assert not intact(entry / ".git")
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert "was changed since bakery built it" in r.stderr
    assert intact(entry / ".git") and not marker.exists()


def test_cache_entry_git_as_gitfile_is_rebuilt(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    import shutil

    marker = tmp_path / "PWNED"
    url, _ = _baked_once(cli, tiny, tmp_path)
    evil = _evil(tmp_path, url, marker)
    (entry,) = [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
    shutil.rmtree(entry / ".git")
    (entry / ".git").write_text(f"gitdir: {evil}\n")
    before = snapshot(tmp_path / "decoy")
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert intact(entry / ".git") and not marker.exists()
    assert snapshot(tmp_path / "decoy") == before


@pytest.mark.parametrize("sub", ["objects", "refs", "objects/pack", "refs/heads", "refs/tags"])
def test_a_cache_entry_whose_objects_or_refs_is_a_link_is_not_intact(
    cli: Cli, tiny: Tiny, tmp_path: Path, sub: str
) -> None:
    """A cached tree's .git whose objects/ or refs/ (or a folder in them) is a link to
    another store reads that store: not intact, built again, the decoy untouched."""
    marker = tmp_path / "PWNED"
    url, _ = _baked_once(cli, tiny, tmp_path)
    evil = _evil(tmp_path, url, marker)
    (entry,) = [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
    assert intact(entry / ".git")
    (entry / ".git" / sub).mkdir(parents=True, exist_ok=True)
    _link_in(entry / ".git", evil, sub)
    assert not intact(entry / ".git")
    before = snapshot(tmp_path / "decoy")
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert intact(entry / ".git") and not (entry / ".git" / sub).is_symlink()
    assert snapshot(tmp_path / "decoy") == before and not marker.exists()
