"""``refresh`` from ``bakery init``'s working tree, again and again (issue 48).

The tree is baked from no diff; each refresh from it writes what its files now hold: the
first makes ``01-NAME.diff``, later ones rewrite that diff, a file no diff touches still
needs ``--new-diff``/``--into``, and the next step printed is the plain ``apply`` (no
``--force``: apply replaces a tree whose edits the diffs hold). The tree is only read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.repos import git
from tests.support.trees import cache_release, snapshot

Cli = Callable[..., Result]
Y = "".join(f"line {i}\n" for i in range(20))


@pytest.fixture
def work(cli: Cli, home: Path) -> Path:
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/y.py": Y})
    assert cli("init", "t", "--vllm", "1.0.0").exit_code == 0
    return home / "work" / "t"


def _edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def test_refresh_from_inits_tree_again_and_again(cli: Cli, home: Path, work: Path) -> None:
    diffs = home / "launcher" / "t" / "diffs"
    y = work / "vllm" / "y.py"
    _edit(y, "line 3\n", "line 3 (t)\n")
    r = cli("refresh", "t", "--tree", work, "--new-diff", "one")
    assert r.exit_code == 0, r.output
    assert [p.name for p in diffs.iterdir()] == ["01-one.diff"]

    # the second refresh from the same tree: the diff takes the new edit too
    _edit(y, "line 9\n", "line 9 (t)\n")
    before = snapshot(work)
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 0, r.output
    one = (diffs / "01-one.diff").read_text()
    assert "+line 3 (t)" in one and "+line 9 (t)" in one
    assert "--force" not in r.output and "bakery apply t --vllm 1.0.0" in r.output
    assert snapshot(work) == before  # read, never written
    assert git(work, "status", "--porcelain") == " M vllm/y.py\n"

    # a new file: no diff touches it, so refresh asks where it goes, naming the tree
    (work / "vllm" / "z.py").write_text("Z = 1\n")
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 2
    assert f"--tree {work}: vllm/z.py changed" in " ".join(r.stderr.split()), r.stderr
    assert "[" not in r.stderr and ".bakery-refresh-" not in r.stderr, r.stderr
    r = cli("refresh", "t", "--tree", work, "--new-diff", "two")
    assert r.exit_code == 0, r.output
    assert [p.name for p in sorted(diffs.iterdir())] == ["01-one.diff", "02-two.diff"]
    assert "+Z = 1" in (diffs / "02-two.diff").read_text()
    assert (diffs / "01-one.diff").read_text() == one

    # a third, with an edit to the new file: 02 changes, 01 is kept byte for byte
    (work / "vllm" / "z.py").write_text("Z = 2\n")
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 0, r.output
    assert "+Z = 2" in (diffs / "02-two.diff").read_text()
    assert (diffs / "01-one.diff").read_text() == one
    # and the series bakes into what the tree holds
    assert cli("apply", "t").exit_code == 0
    baked = home / "build" / "t-1.0.0" / "vllm"
    assert (baked / "y.py").read_text() == y.read_text()
    assert (baked / "z.py").read_text() == "Z = 2\n"
    assert not list(work.parent.glob(".bakery-refresh-*"))  # the scratch tree is gone


def test_refreshing_the_baked_tree_suggests_apply_without_force(
    cli: Cli, home: Path, work: Path
) -> None:
    _edit(work / "vllm" / "y.py", "line 3\n", "line 3 (t)\n")
    assert cli("refresh", "t", "--tree", work, "--new-diff", "one").exit_code == 0
    assert cli("apply", "t").exit_code == 0
    tree = home / "build" / "t-1.0.0"
    _edit(tree / "vllm" / "y.py", "line 5\n", "line 5 (t)\n")
    r = cli("refresh", "t", "--tree", tree)
    assert r.exit_code == 0, r.output
    assert "--force" not in r.output
    # the printed step works as printed
    again = cli("apply", "t", "--vllm", "1.0.0")
    assert again.exit_code == 0, again.output


def test_a_tree_of_other_diffs_is_refused_in_words(cli: Cli, home: Path, work: Path) -> None:
    """A tree baked from diffs the series no longer has: one line naming both, and what
    to do; never a Python list."""
    diffs = home / "launcher" / "t" / "diffs"
    _edit(work / "vllm" / "y.py", "line 3\n", "line 3 (t)\n")
    assert cli("refresh", "t", "--tree", work, "--new-diff", "one").exit_code == 0
    assert cli("apply", "t").exit_code == 0
    (diffs / "01-one.diff").rename(diffs / "01-renamed.diff")
    r = cli("refresh", "t", "--tree", home / "build" / "t-1.0.0")
    assert r.exit_code == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert "baked from 01-one.diff, but the series now has 01-renamed.diff" in line, line
    assert "bakery apply t --vllm 1.0.0" in line and "[" not in line, line
