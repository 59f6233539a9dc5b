"""Class 4: the user's work is never lost.

``bakery port`` leaves its best attempt (``build/port/S-V/attempt.failed``) for a person
to finish, and a second ``bakery port`` remakes that folder. It removes the attempt only
when it can prove it unchanged (the check ``apply --keep-failed`` makes): an attempt with
edits, notes, new commits, or a folder bakery did not make, is refused with one line
naming it, before anything is removed, and nothing in it changes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.cli.app import app
from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import serve_index
from tests.support.repos import git
from tests.support.trees import snapshot

MOD = "vllm/k.py"
BASE = "def pick(xs, k):\n    ys = sorted(xs)\n    return ys[:k]\n"
OURS = BASE.replace("sorted(xs)", "sorted(xs, reverse=True)")
THEIRS = BASE.replace("sorted(xs)", "sorted(set(xs))")


def _sdist(version: str, module: str) -> bytes:
    return sdist(version, files=2, modules={MOD: module})


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A series whose one diff the next release changes on the same line: no merge keeps
    both, so port leaves its attempt."""
    home = tmp_path / "home"
    series = home / "launcher" / "s"
    (series / "diffs").mkdir(parents=True)
    (series / "tests").mkdir()
    (series / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    diff = difflib.unified_diff(
        BASE.splitlines(True), OURS.splitlines(True), f"a/{MOD}", f"b/{MOD}"
    )
    (series / "diffs" / "01-rev.diff").write_text("".join(diff))
    (series / "tests" / "test_k.py").write_text("def test_x():\n    pass\n")
    monkeypatch.setenv("BAKERY_HOME", str(home))
    monkeypatch.chdir(home)
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add("vllm-1.0.0.tar.gz", _sdist("1.0.0", BASE))
        idx.add("vllm-1.1.0.tar.gz", _sdist("1.1.0", THEIRS))
        yield home


def _port() -> Result:
    return CliRunner().invoke(app, ["port", "s", "--vllm", "1.1.0", "--json", "port.json"])


def _attempt(home: Path) -> Path:
    r = _port()
    assert r.exit_code == 1, r.output
    report = json.loads((home / "port.json").read_text())
    attempt = home / report["failed_out"]
    assert attempt.is_dir()
    return attempt


def test_edited_attempt_is_kept_end_to_end(home: Path) -> None:
    """The end-to-end scenario: the user resolves the conflict and writes notes; the next
    port refuses, naming the attempt, and nothing in it changed."""
    attempt = _attempt(home)
    (attempt / MOD).write_text(OURS.replace("sorted(xs", "sorted(set(xs)"))
    (attempt / "NOTES.md").write_text("resolved: keep both\n")
    before = snapshot(attempt)
    refused(_port(), str(attempt.name), "will not remove it")
    assert snapshot(attempt) == before


def test_attempt_with_a_new_commit_is_kept(home: Path) -> None:
    attempt = _attempt(home)
    git(attempt, "add", "-A")
    git(attempt, "commit", "-q", "-m", "resolved")
    before = snapshot(attempt)
    refused(_port(), "new commits")
    assert snapshot(attempt) == before


def test_folder_bakery_did_not_make_is_kept(home: Path) -> None:
    attempt = _attempt(home)
    (attempt / ".bakery" / "manifest.json").unlink()
    before = snapshot(attempt)
    refused(_port(), "bakery did not make it")
    assert snapshot(attempt) == before


def test_unchanged_attempt_is_remade(home: Path) -> None:
    """The promise is not "never remove": an attempt nobody touched is bakery's to remake."""
    attempt = _attempt(home)
    r = _port()
    assert r.exit_code == 1, r.output
    assert attempt.is_dir()
