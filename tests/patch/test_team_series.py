"""Issue 47's promise, end to end through the CLI: a series made the way teams make diffs bakes,
verifies and refreshes to the same bytes. Two series, each made by the real tool:

- ``cp x.py x.py.orig``, an edit, ``diff -u x.py.orig x.py``: the two names differ, and the
  file that exists is patched (GNU patch's rule);
- ``git format-patch --stdout`` of three commits: a rename with an edit (git detects renames by
  default), then two commits to one file, so one diff patches that file twice.

Each is baked on a release in bakery's cache, verified with ``--interpret`` (the series' own
test reads the baked tree), refreshed unchanged (the same bytes), then edited and refreshed:
the rename is written back as a rename and the edit bakes again.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.repos import git
from tests.support.series import make_series
from tests.support.trees import cache_release, write_files

Cli = Callable[..., Result]

RELEASE = {
    "vllm/__init__.py": "",
    "vllm/k.py": "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(1, 9)),
    "vllm/helpers.py": "".join(f"H{i} = {i}\n" for i in range(1, 12)),
}
TOML = 'base = "0.32.0"\n'
#: The series' test: what both series bake into the tree.
TREE_TEST = """
import runpy


def test_the_series_is_baked_in(baked_tree):
    k = runpy.run_path(str(baked_tree / "vllm/k.py"))
    assert (k["f2"](), k["f7"]()) == (20, 70)
"""
RENAMED_TEST = """
import runpy


def test_the_rename_is_baked_in(baked_tree):
    assert not (baked_tree / "vllm/helpers.py").exists()
    assert runpy.run_path(str(baked_tree / "vllm/util.py"))["H3"] == 30
"""


def _bakes_verifies_refreshes(cli: Cli, home: Path, name: str, tests: dict[str, str]) -> Path:
    """apply, verify --interpret, refresh of the unchanged tree: the diffs' bytes stay."""
    series = home / "launcher" / name
    write_files(series / "tests", tests)
    before = {p.name: p.read_bytes() for p in (series / "diffs").iterdir()}
    out = home / f"out-{name}"
    r = cli("apply", name, "--out", out)
    assert r.exit_code == 0, r.output
    r = cli("verify", name, "--tree", out, "--interpret")
    assert r.exit_code == 0, r.output
    assert f"verified: {len(tests)} passed" in r.stderr
    r = cli("refresh", name, "--tree", out)
    assert r.exit_code == 0, r.output
    assert {p.name: p.read_bytes() for p in (series / "diffs").iterdir()} == before
    return out


@pytest.fixture
def release() -> None:
    cache_release("0.32.0", RELEASE)


def test_a_diff_u_of_x_orig_and_x_bakes_verifies_and_refreshes(
    cli: Cli, home: Path, tmp_path: Path, release: None
) -> None:
    work = write_files(tmp_path / "work", RELEASE)
    shutil.copy(work / "vllm/k.py", work / "vllm/k.py.orig")
    k = work / "vllm/k.py"
    k.write_text(
        k.read_text().replace("return 2\n", "return 20\n").replace("return 7\n", "return 70\n")
    )
    proc = subprocess.run(
        ["diff", "-u", "vllm/k.py.orig", "vllm/k.py"], cwd=work, capture_output=True, check=False
    )
    assert proc.returncode == 1 and proc.stdout.startswith(b"--- vllm/k.py.orig\t")
    make_series(home, "orig", {"01-fix.diff": proc.stdout}, toml=TOML)
    out = _bakes_verifies_refreshes(cli, home, "orig", {"test_tree.py": TREE_TEST})
    assert (out / "vllm/k.py").read_bytes() == k.read_bytes()
    assert not (out / "vllm/k.py.orig").exists()
    # an edit of the baked file refreshes into the diff, which bakes it again
    (out / "vllm/k.py").write_text(k.read_text() + "\n# reviewed\n")
    r = cli("refresh", "orig", "--tree", out)
    assert r.exit_code == 0, r.output
    r = cli("apply", "orig", "--out", home / "again")
    assert r.exit_code == 0, r.output
    assert (home / "again/vllm/k.py").read_bytes() == (out / "vllm/k.py").read_bytes()


def _format_patch(tmp_path: Path) -> bytes:
    """git format-patch --stdout of: a rename with an edit, then two commits to vllm/k.py."""
    repo = write_files(tmp_path / "repo", RELEASE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pristine")
    git(repo, "mv", "vllm/helpers.py", "vllm/util.py")
    util = repo / "vllm/util.py"
    util.write_text(util.read_text().replace("H3 = 3\n", "H3 = 30\n"))
    git(repo, "commit", "-qam", "helpers are util now")
    k = repo / "vllm/k.py"
    for old, new in (("return 2\n", "return 20\n"), ("return 7\n", "return 70\n")):
        k.write_text(k.read_text().replace(old, new))
        git(repo, "commit", "-qam", f"k: {new.strip()}")
    proc = subprocess.run(
        ["git", "format-patch", "--stdout", "HEAD~3"], cwd=repo, capture_output=True, check=True
    )
    return proc.stdout


def test_a_format_patch_with_a_rename_and_two_commits_to_one_file(
    cli: Cli, home: Path, tmp_path: Path, release: None
) -> None:
    text = _format_patch(tmp_path)
    assert b"\nrename from vllm/helpers.py\nrename to vllm/util.py\n" in text
    assert text.count(b"\n+++ b/vllm/k.py\n") == 2
    make_series(home, "team", {"01-team.diff": text}, toml=TOML)
    tests = {"test_tree.py": TREE_TEST, "test_renamed.py": RENAMED_TEST}
    out = _bakes_verifies_refreshes(cli, home, "team", tests)
    assert git(out, "log", "-1", "--format=%s").strip() == "helpers are util now"
    # edit the renamed file: refresh writes the rename back as a rename, with both changes
    util = out / "vllm/util.py"
    util.write_text(util.read_text().replace("H5 = 5\n", "H5 = 50\n"))
    r = cli("refresh", "team", "--tree", out)
    assert r.exit_code == 0, r.output
    refreshed = (home / "launcher/team/diffs/01-team.diff").read_bytes()
    assert (
        b"diff --git a/vllm/helpers.py b/vllm/util.py\nrename from vllm/helpers.py\n" in refreshed
    )
    assert b"+++ /dev/null" not in refreshed  # not a deletion and a new file
    r = cli("apply", "team", "--out", home / "again")
    assert r.exit_code == 0, r.output
    assert (home / "again/vllm/util.py").read_bytes() == util.read_bytes()
    assert not (home / "again/vllm/helpers.py").exists()
    r = cli("refresh", "team", "--tree", home / "again")
    assert r.exit_code == 0, r.output
    assert (home / "launcher/team/diffs/01-team.diff").read_bytes() == refreshed
