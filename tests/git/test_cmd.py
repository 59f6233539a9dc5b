"""bakery.git.cmd, the one door to git: one entry point that runs a git command to its
end (``git``: text and checked, or the raw finished process), plus the streaming one
(``Pending``: started in the background, read whole or up to a cap by ``git_capped``).
Every other module goes through them (the security catalogue's test_git_config.py checks
that no module outside bakery/git starts git at all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakery.git import cmd, history
from tests.support.repos import git as plain_git
from tests.support.repos import git_repo

GIT_PACKAGE = Path(cmd.__file__).parent


def test_the_public_entry_points_that_run_git() -> None:
    """One entry point and the streaming one: the old git_bytes/git_proc/git_out are gone."""
    for gone in ("git_bytes", "git_proc", "git_out"):
        assert not hasattr(cmd, gone), gone
    assert callable(cmd.git) and callable(cmd.git_capped) and callable(cmd.Pending)


def test_pending_reads_whole_or_capped(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "r", {"a.txt": "one\n"})
    assert cmd.Pending(repo, "cat-file", "blob", "HEAD:a.txt").result() == (0, "one\n")
    assert cmd.Pending(repo, "cat-file", "blob", "HEAD:a.txt").capped(4) == b"one\n"
    started = cmd.Pending(repo, "cat-file", "blob", "HEAD:a.txt")
    started.cancel()
    with pytest.raises(cmd.GitError, match="was cancelled"):
        started.result()


def test_git_text_is_checked_and_raw_is_not(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "r", {"a.txt": "one\n"})
    head = plain_git(repo, "rev-parse", "HEAD").strip()
    assert cmd.git(repo, "rev-parse", "HEAD").strip() == head
    with pytest.raises(cmd.GitError, match=r"`git cat-file blob HEAD:missing` failed \(128\)"):
        cmd.git(repo, "cat-file", "blob", "HEAD:missing")
    assert cmd.git(repo, "cat-file", "blob", "HEAD:missing", check=False) == ""
    found = cmd.git(repo, "cat-file", "blob", "HEAD:a.txt", raw=True)
    assert (found.returncode, found.stdout) == (0, b"one\n")
    assert cmd.stdout_of(found) == b"one\n"
    missing = cmd.git(repo, "cat-file", "blob", "HEAD:missing", raw=True)
    assert missing.returncode != 0 and b"missing" in missing.stderr
    assert cmd.stdout_of(missing) is None


def test_git_capped_stops_past_its_limit(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "r", {"big.txt": "x" * 4096})
    assert cmd.git_capped(repo, "cat-file", "blob", "HEAD:big.txt", limit=8192) == b"x" * 4096
    with pytest.raises(cmd.GitError, match="larger than 1024 bytes"):
        cmd.git_capped(repo, "cat-file", "blob", "HEAD:big.txt", limit=1024)
    assert cmd.git_capped(repo, "cat-file", "blob", "HEAD:missing", limit=1024) is None


def test_history_goes_through_the_door(tmp_path: Path) -> None:
    """history.py's log and describe run through git(), under the policy: its failure is
    one GitError line, and what it reads is git's own answer."""
    repo = git_repo(tmp_path / "r", {"a.txt": "one\n"})
    head = plain_git(repo, "rev-parse", "HEAD").strip()
    assert history.exists(repo, head)
    assert not history.exists(repo, "0" * 40)
    assert history.last_release(repo, head) is None
    plain_git(repo, "tag", "v0.1.0")
    assert history.last_release(repo, head) == "v0.1.0"
