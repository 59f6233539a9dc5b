"""``bakery init``: a series started from nothing, on a release in the cache (no index).

The promise: launcher/SERIES/ with a series.toml whose every key is explained (and that
bakery reads back), an empty diffs/, an example test; a pristine working tree that is a
git checkout of the release, from which ``refresh --new-diff`` makes the first diff; and
nothing existing replaced, nothing written outside the project.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.repos import git
from tests.support.trees import cache_release

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILES = {
    "vllm/__init__.py": "",
    "vllm/sampling_params.py": "class SamplingParams:\n    temperature: float = 1.0\n",
    "vllm/gone.py": "X = 1\n",
}

Cli = Callable[..., Result]


@pytest.fixture
def release() -> str:
    cache_release("0.32.0", FILES)
    return "0.32.0"


def test_init_writes_the_series_and_a_pristine_tree(cli: Cli, home: Path, release: str) -> None:
    r = cli("init", "myteam", "--vllm", "0.32")
    assert r.exit_code == 0, r.output
    folder = home / "launcher" / "myteam"
    text = (folder / "series.toml").read_text()
    assert tomllib.loads(text) == {"base": "0.32.0", "env": "full"}
    for key in ("base", "name", "root", "strip", "description", "env"):
        assert f"# {key} = " in text or f"\n{key} = " in text, key
    assert list((folder / "diffs").iterdir()) == []
    example = (folder / "tests" / "test_example.py").read_text()
    assert 'load_tree_module("vllm.sampling_params")' in example
    for fixture in ("baked_tree", "release", "interpret", "device", "rank_pool"):
        assert fixture in example
    work = home / "work" / "myteam"
    assert (work / "vllm" / "sampling_params.py").read_text() == FILES["vllm/sampling_params.py"]
    assert git(work, "status", "--porcelain") == ""
    assert "pristine vLLM 0.32.0" in git(work, "log", "-1", "--format=%s")
    assert "bakery refresh myteam --tree" in r.output
    assert "strip 1, root" not in r.stderr, r.stderr  # a bake of no diff: no layout to detect
    # bakery list reads the new series (no diffs yet); apply says what to do
    listed = cli("list", "myteam", "--json")
    assert listed.exit_code == 0, listed.output
    applied = cli("apply", "myteam")
    assert applied.exit_code == 2
    assert "no NN-*.diff files (make one: bakery refresh myteam" in applied.output


def test_refresh_new_diff_makes_the_first_diff(cli: Cli, home: Path, release: str) -> None:
    assert cli("init", "myteam", "--vllm", release).exit_code == 0
    work = home / "work" / "myteam"
    sp = work / "vllm" / "sampling_params.py"
    sp.write_text(sp.read_text() + "    myteam_budget: int = 0\n")
    (work / "vllm" / "myteam_ext.py").write_text("BUDGET = 0\n")
    (work / "vllm" / "gone.py").unlink()
    r = cli("refresh", "myteam", "--tree", work, "--new-diff", "budget")
    assert r.exit_code == 0, r.output
    diff = (home / "launcher" / "myteam" / "diffs" / "01-budget.diff").read_text()
    assert "+    myteam_budget: int = 0" in diff
    assert "+++ b/vllm/myteam_ext.py" in diff and "--- a/vllm/gone.py" in diff
    baked = cli("apply", "myteam")
    assert baked.exit_code == 0, baked.output
    out = home / "build" / "myteam-0.32.0"
    assert (out / "vllm" / "myteam_ext.py").read_text() == "BUDGET = 0\n"
    assert not (out / "vllm" / "gone.py").exists()
    assert sp.read_bytes() == (out / "vllm" / "sampling_params.py").read_bytes()


def test_a_git_diff_of_the_tree_is_a_diff_of_the_series(cli: Cli, home: Path, release: str) -> None:
    assert cli("init", "myteam", "--vllm", release).exit_code == 0
    work = home / "work" / "myteam"
    sp = work / "vllm" / "sampling_params.py"
    sp.write_text(sp.read_text() + "    myteam_budget: int = 0\n")
    diffs = home / "launcher" / "myteam" / "diffs"
    (diffs / "01-budget.diff").write_text(git(work, "diff"))
    r = cli("apply", "myteam")
    assert r.exit_code == 0, r.output
    assert (home / "build" / "myteam-0.32.0" / "vllm" / "sampling_params.py").read_bytes() == (
        sp.read_bytes()
    )


def test_init_replaces_nothing(cli: Cli, home: Path, release: str) -> None:
    (home / "launcher" / "myteam").mkdir()
    r = cli("init", "myteam", "--vllm", release)
    assert r.exit_code == 2
    assert "exists (the series); bakery init replaces nothing" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert list((home / "launcher" / "myteam").iterdir()) == []

    (home / "work" / "other").mkdir(parents=True)
    (home / "work" / "other" / "mine.txt").write_text("keep")
    r = cli("init", "other", "--vllm", release)
    assert r.exit_code == 2 and "exists (--tree)" in r.output
    assert (home / "work" / "other" / "mine.txt").read_text() == "keep"
    assert not (home / "launcher" / "other").exists()


def test_init_writes_nothing_outside_the_project(
    cli: Cli, home: Path, tmp_path: Path, release: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    r = cli("init", "myteam", "--vllm", release, "--tree", outside / "tree")
    assert r.exit_code == 2 and "outside the project" in r.output
    assert f"choose a folder in the project ({home})" in " ".join(r.output.split())
    assert list(outside.iterdir()) == []
    assert not (home / "launcher" / "myteam").exists()
    inside = cli("init", "myteam", "--vllm", release, "--tree", home / "missing" / "t")
    assert inside.exit_code == 2 and "its folder does not exist" in inside.output
    assert not (home / "missing").exists()
    (home / "trees").mkdir()
    ok = cli("init", "myteam", "--vllm", release, "--tree", home / "trees" / "t")
    assert ok.exit_code == 0, ok.output
    assert (home / "trees" / "t" / "vllm" / "gone.py").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("../up", "--vllm", "0.32.0"), "SERIES"),
        ((".hidden", "--vllm", "0.32.0"), "not a plain name"),
        (("myteam", "--vllm", "/some/path"), "bakery init starts from a release"),
        (("myteam", "--vllm", "git+https://example.invalid/x@main"), "starts from a release"),
    ],
)
def test_init_refuses_bad_input_in_one_line(
    cli: Cli, home: Path, args: tuple[str, ...], message: str
) -> None:
    r = cli("init", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert list((home / "launcher").iterdir()) == []


def test_init_without_a_tree(cli: Cli, home: Path, release: str) -> None:
    r = cli("init", "myteam", "--vllm", release, "--no-tree")
    assert r.exit_code == 0, r.output
    assert (home / "launcher" / "myteam" / "series.toml").is_file()
    assert not (home / "work").exists()


def test_a_failed_tree_leaves_no_half_series(cli: Cli, home: Path) -> None:
    """0.99.0 is in no cache and the test index does not answer: no series stays."""
    r = cli("init", "myteam", "--vllm", "0.99.0")
    assert r.exit_code != 0
    assert not (home / "launcher" / "myteam").exists()
    assert not (home / "work" / "myteam").exists()


def test_a_bad_test_environment_is_one_line(cli: Cli, home: Path, release: str) -> None:
    assert cli("init", "myteam", "--vllm", release, "--no-tree").exit_code == 0
    toml = home / "launcher" / "myteam" / "series.toml"
    r = cli("verify", "myteam", "--env", "heavy", "--tree", home)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "--env 'heavy': use light or full" in r.output
    toml.write_text(toml.read_text().replace('env = "full"', 'env = "heavy"'))
    r = cli("list", "myteam")
    assert r.exit_code == 2, r.output
    assert 'env must be "light" or "full", not \'heavy\'' in r.output


def test_init_ignores_bakerys_outputs_where_the_project_has_no_gitignore(
    cli: Cli, home: Path, release: str
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    git(home, "init", "-q")
    r = cli("init", "myteam", "--vllm", release, "--no-tree")
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and ".gitignore" in r.output
    for rel in ("build/myteam-0.32.0/vllm/x.py", "dist/vllm-0.32.0+x.whl", "reports/j.xml"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("x\n")
    untracked = git(home, "status", "--porcelain", "--untracked-files=all")
    assert "launcher/myteam/series.toml" in untracked
    assert not [w for w in ("build/", "dist/", "reports/") if w in untracked], untracked
    # a project's own .gitignore is the team's: never changed, nothing said
    (home / ".gitignore").write_text("*.pyc\n")
    r = cli("init", "other", "--vllm", release, "--no-tree")
    assert r.exit_code == 0 and ".gitignore" not in r.output
    assert (home / ".gitignore").read_text() == "*.pyc\n"
