"""Class 7 (git refs): a pinned short commit id is never silently replaced.

``--vllm git+URL@abc1234`` names a commit. git's ``rev-parse`` prefers a branch or tag
of that name over an abbreviated object id, so a repository (or its mirror in the cache)
with a branch ``abc1234`` could swap the pinned code for its own. bakery accepts a hex
REF only as the one commit whose id starts with it; a branch or tag of that name is never
taken, and a prefix no commit has is one line.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.cli import refused
from tests.support.repos import git, git_repo
from tests.support.trees import Tiny

Cli = Callable[..., Result]


@pytest.fixture
def repo(tiny: Tiny) -> tuple[Path, str, str]:
    """(the repository, the pinned commit, the other commit) with the pinned commit's
    short id also the name of a branch and a tag that point at the other commit."""
    git_repo(tiny.src, {})
    pinned = git(tiny.src, "rev-parse", "HEAD").strip()
    git(tiny.src, "checkout", "-q", "-b", "side")
    (tiny.src / "vllm" / "evil.py").write_text("import os\n")
    git(tiny.src, "add", "-A")
    git(tiny.src, "commit", "-q", "-m", "other")
    other = git(tiny.src, "rev-parse", "HEAD").strip()
    git(tiny.src, "checkout", "-q", "main")
    return tiny.src, pinned, other


def _commit(out: Path) -> str:
    return str(json.loads((out / ".bakery/manifest.json").read_text())["vllm"]["commit"])


@pytest.mark.parametrize("kind", ["branch", "tag"])
def test_short_id_is_the_commit_not_a_ref_of_that_name(
    cli: Cli, tmp_path: Path, repo: tuple[Path, str, str], kind: str
) -> None:
    src, pinned, other = repo
    short = pinned[:10]
    if kind == "branch":
        git(src, "branch", short, other)
    else:
        git(src, "tag", short, other)
    assert git(src, "rev-parse", short).strip() == other  # git itself prefers the ref
    r = cli("apply", "demo", "--vllm", f"git+file://{src}@{short}", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert _commit(tmp_path / "o") == pinned
    assert not (tmp_path / "o" / "vllm" / "evil.py").exists()


def test_ref_named_like_a_commit_no_commit_has_is_refused(
    cli: Cli, tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    src, pinned, other = repo
    name = next(p for p in ("deadbeef", "cafebabe", "abad1dea") if not pinned.startswith(p))
    git(src, "branch", name, other)
    r = cli("apply", "demo", "--vllm", f"git+file://{src}@{name}", "--out", tmp_path / "o")
    refused(r, "has no commit")
    assert not (tmp_path / "o").exists()


def test_ref_planted_in_the_mirror_is_not_taken(
    cli: Cli, tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    """The mirror in the cache gains a branch named like the pinned id (a restored
    cache): the offline lookup still finds the commit."""
    src, pinned, other = repo
    spec = f"git+file://{src}@{pinned[:12]}"
    assert cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one").exit_code == 0
    (mirror,) = [p for p in (tmp_path / "cache" / "git").iterdir() if p.is_dir()]
    (mirror / "refs" / "heads" / pinned[:12]).write_text(other + "\n")
    shutil.rmtree(tmp_path / "cache" / "trees")
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert _commit(tmp_path / "two") == pinned


def test_full_id_and_branch_names_still_work(
    cli: Cli, tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    src, pinned, _ = repo
    r = cli("apply", "demo", "--vllm", f"git+file://{src}@{pinned}", "--out", tmp_path / "a")
    assert r.exit_code == 0 and _commit(tmp_path / "a") == pinned
    r = cli("apply", "demo", "--vllm", f"git+file://{src}@main", "--out", tmp_path / "b")
    assert r.exit_code == 0 and _commit(tmp_path / "b") == pinned
