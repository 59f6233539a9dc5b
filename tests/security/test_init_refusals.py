"""``bakery init`` writes only inside the project and never into bakery's cache (issue 46),
and its working trees are never committed to the project (issue 48).

- a ``work/`` (or ``launcher/``) that is a link out of the project is refused, one line,
  and nothing is written where it leads;
- ``--tree`` inside bakery's cache is refused (``cache clean`` would delete the tree with
  the user's edits);
- the default ``work/`` carries a ``.gitignore`` of ``*``, so ``git add -A`` in the project
  adds none of the vLLM checkout; bakery's own ``.gitignore`` covers ``work/`` and ``dist/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.cli import refused
from tests.support.repos import git
from tests.support.trees import cache_release

Cli = Callable[..., Result]
FILES = {"vllm/__init__.py": "", "vllm/sampling_params.py": "class SamplingParams:\n    pass\n"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def release() -> str:
    cache_release("0.32.0", FILES)
    return "0.32.0"


def test_a_work_link_out_of_the_project_is_refused(
    cli: Cli, home: Path, tmp_path: Path, release: str
) -> None:
    outside = tmp_path / "secret-place"
    outside.mkdir()
    (home / "work").symlink_to(outside)
    line = refused(cli("init", "myteam", "--vllm", release), "leads outside the project")
    assert "work" in line
    assert list(outside.iterdir()) == []
    assert not (home / "launcher" / "myteam").exists()
    # the same folder given as --tree through the link: refused as outside
    refused(cli("init", "myteam", "--vllm", release, "--tree", home / "work" / "t"), "outside")
    assert list(outside.iterdir()) == []


def test_a_work_link_to_nothing_is_refused(
    cli: Cli, home: Path, tmp_path: Path, release: str
) -> None:
    (home / "work").symlink_to(tmp_path / "not-yet")
    refused(cli("init", "myteam", "--vllm", release), "link to nothing")
    assert not (tmp_path / "not-yet").exists()
    assert not (home / "launcher" / "myteam").exists()


def test_a_launcher_link_out_of_the_project_is_refused(
    cli: Cli, home: Path, tmp_path: Path, release: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (home / "launcher").rmdir()
    (home / "launcher").symlink_to(outside)
    refused(cli("init", "myteam", "--vllm", release, "--no-tree"), "launcher", "outside")
    assert list(outside.iterdir()) == []


def test_a_work_link_inside_the_project_is_followed(cli: Cli, home: Path, release: str) -> None:
    """A link that stays in the project is no escape: init writes through it."""
    (home / "trees").mkdir()
    (home / "work").symlink_to(home / "trees")
    r = cli("init", "myteam", "--vllm", release)
    assert r.exit_code == 0, r.output
    assert (home / "trees" / "myteam" / "vllm" / "sampling_params.py").is_file()


@pytest.mark.parametrize("where", ["inside", "the cache itself"])
def test_a_tree_inside_the_cache_is_refused(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    cache = home / "cache"
    monkeypatch.setenv("BAKERY_CACHE_DIR", str(cache))
    cache_release("0.32.0", FILES)
    before = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    tree = cache / "trees" / "mine" if where == "inside" else cache
    refused(cli("init", "myteam", "--vllm", "0.32.0", "--tree", tree), "bakery's cache")
    assert sorted(p.relative_to(cache) for p in cache.rglob("*")) == before
    assert not (home / "launcher" / "myteam").exists()


def test_a_project_inside_the_cache_gets_no_default_tree(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache_release("0.32.0", FILES)
    project = cache / "project"
    (project / "launcher").mkdir(parents=True)
    monkeypatch.setenv("BAKERY_HOME", str(project))
    refused(cli("init", "myteam", "--vllm", "0.32.0"), "bakery's cache")
    assert not (project / "work").exists()


def test_git_add_all_in_the_project_adds_no_working_tree(
    cli: Cli, home: Path, release: str
) -> None:
    git(home, "init", "-q")
    assert cli("init", "myteam", "--vllm", release).exit_code == 0
    assert (home / "work" / ".gitignore").read_text().splitlines()[-1] == "*"
    git(home, "add", "-A")
    added = git(home, "ls-files").split()
    assert "launcher/myteam/series.toml" in added
    assert [p for p in added if p.startswith("work")] == []
    # a second series' tree goes beside it, under the same rule; the file is kept as is
    (home / "work" / ".gitignore").write_text("*\n# mine\n")
    assert cli("init", "other", "--vllm", release).exit_code == 0
    assert (home / "work" / ".gitignore").read_text() == "*\n# mine\n"


@pytest.mark.parametrize("path", ["work/myteam/vllm/x.py", "dist/vllm-0.32.0-py3-none-any.whl"])
def test_bakerys_own_gitignore_covers_work_and_dist(path: str) -> None:
    assert git(REPO, "check-ignore", "--no-index", path).strip() == path
