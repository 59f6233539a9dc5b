"""`bakery port`: a port is proposed from the best start, merged by syntax where lines
conflict, and written only when the series' own tests prove it; otherwise nothing is
written and the best attempt is left to finish. Releases come from a local index (no
network); upstream blame reads a git repository the test builds."""

from __future__ import annotations

import difflib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakery.cli.app import app
from bakery.git.history import touching
from tests.support.archives import sdist
from tests.support.index import Index, serve_index
from tests.support.repos import git

MOD = "vllm/k.py"
BASE = """\
def pick(xs, k):
    ys = sorted(xs)
    return ys[:k]
"""
# The series: a keyword-only `rev` argument.
OURS = """\
def pick(xs, k, *, rev=False):
    ys = sorted(xs, reverse=rev)
    return ys[:k]
"""
# The next release: a `key` argument on the same line.
THEIRS = """\
def pick(xs, k, key=None):
    ys = sorted(xs, key=key)
    return ys[:k]
"""
PROMISE = """\
from bakery.testing import load_tree_module

k = load_tree_module("vllm.k")


def test_rev():
    assert k.pick([3, 1, 2], 2, rev=True) == [3, 2]
"""
UPSTREAM_TOO = """

def test_key_of_the_release_is_kept():
    assert k.pick([3, -4, 2], 1, key=abs) == [2]
"""


def _sdist(version: str, module: str) -> bytes:
    return sdist(version, files=2, modules={MOD: module})


def _udiff(before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{MOD}", f"b/{MOD}", n=3
        )
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Index]]:
    home = tmp_path / "home"
    series = home / "launcher" / "s"
    (series / "diffs").mkdir(parents=True)
    (series / "tests").mkdir()
    (series / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (series / "diffs" / "01-rev.diff").write_text(_udiff(BASE, OURS))
    (series / "tests" / "test_k.py").write_text(PROMISE + UPSTREAM_TOO)
    monkeypatch.setenv("BAKERY_HOME", str(home))
    monkeypatch.setenv("BAKERY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(home)
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add("vllm-1.0.0.tar.gz", _sdist("1.0.0", BASE))
        idx.add("vllm-1.1.0.tar.gz", _sdist("1.1.0", THEIRS))
        yield home, idx


def _port(*args: str) -> tuple[int, dict[str, object], str]:
    res = CliRunner().invoke(
        app,
        ["port", "s", "--vllm", "1.1.0", "--json", "port.json", *args],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )
    return res.exit_code, json.loads(Path("port.json").read_text()), res.output


def test_a_proven_syntax_merge_becomes_the_port(project: tuple[Path, Index]) -> None:
    home, _ = project
    # A line merge cannot join the two signatures; check runs apply's engine, the syntax
    # merge included, so it says what port will find (and --strict refuses the merge):
    check = CliRunner().invoke(
        app, ["check", "s", "--vllm", "1.1.0", "--json", "check.json"], catch_exceptions=False
    )
    assert check.exit_code == 0, check.output
    checked = json.loads(Path("check.json").read_text())
    assert [h["status"] for d in checked["diffs"] for f in d["files"] for h in f["hunks"]] == [
        "merged-syntax"
    ]
    strict = CliRunner().invoke(app, ["check", "s", "--vllm", "1.1.0", "--strict"])
    assert strict.exit_code == 1
    code, report, out = _port()
    assert code == 0, out
    assert report["port"] == "patches/s/1.1.0"
    hunks = report["hunks"]
    assert isinstance(hunks, list) and [h["status"] for h in hunks] == ["merged-syntax"]
    port = home / "patches" / "s" / "1.1.0"
    assert sorted(p.name for p in port.iterdir()) == ["01-rev.diff", "FROM.toml", "PROVENANCE.md"]
    provenance = (port / "PROVENANCE.md").read_text()
    assert "merged-syntax" in provenance
    # no differential check ran (no earlier release, no recorded cases): said, never
    # "no difference" (issue 45)
    assert "- differential: not run (no earlier release to compare with)" in provenance
    assert "no difference" not in provenance
    assert out.splitlines()[-1].startswith("wrote patches/s/1.1.0")
    # The port is what apply now uses, and it applies exactly.
    baked = CliRunner().invoke(
        app, ["apply", "s", "--vllm", "1.1.0", "--out", "out"], catch_exceptions=False
    )
    assert baked.exit_code == 0, baked.output
    text = (home / "out" / MOD).read_text()
    assert "def pick(xs, k, key=None, *, rev=False):" in text


def test_a_merge_verify_does_not_prove_is_never_written(project: tuple[Path, Index]) -> None:
    home, _ = project
    # The series promises something the merged code does not do.
    tests = home / "launcher" / "s" / "tests" / "test_k.py"
    tests.write_text(PROMISE + "\n\ndef test_unmet():\n    assert k.pick([1], 1, rev=True) == []\n")
    code, report, out = _port()
    assert code == 1
    assert report["port"] is None
    assert not (home / "patches" / "s" / "1.1.0").exists()
    assert report["tried"][0]["verify"].startswith("failed")  # type: ignore[index]
    assert "no proposal proven" in out


def test_dry_run_proves_but_writes_nothing(project: tuple[Path, Index]) -> None:
    home, _ = project
    code, report, out = _port("--dry-run")
    assert code == 0 and report["ok"] is True and report["dry_run"] is True
    assert not (home / "patches").exists()
    # issue 45: the headline says what would have been written, not "wrote"
    assert out.splitlines()[-1] == "would write patches/s/1.1.0 (with PROVENANCE.md)"


def test_a_real_conflict_leaves_the_best_attempt(project: tuple[Path, Index]) -> None:
    home, idx = project
    # The release changes the very line the series changes: no merge can keep both.
    idx.add("vllm-1.2.0.tar.gz", _sdist("1.2.0", BASE.replace("sorted(xs)", "sorted(set(xs))")))
    diff = home / "launcher" / "s" / "diffs" / "01-rev.diff"
    diff.write_text(_udiff(BASE, BASE.replace("sorted(xs)", "sorted(xs, reverse=True)")))
    res = CliRunner().invoke(
        app,
        ["port", "s", "--vllm", "1.2.0", "--json", "port.json"],
        catch_exceptions=False,
    )
    assert res.exit_code == 1
    report = json.loads(Path("port.json").read_text())
    assert report["candidates"][0]["conflicts"] == 1
    assert report["tried"] == []
    assert report["failed_out"] and Path(home / report["failed_out"]).is_dir()
    assert [h["status"] for h in report["hunks"]] == ["failed"]


def test_upstream_blame_names_the_commits_that_touched_the_lines(tmp_path: Path) -> None:
    repo = tmp_path / "vllm"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "k.py").write_text(BASE)
    git(repo, "add", "k.py")
    git(repo, "commit", "-qm", "the release")
    git(repo, "tag", "v1.0.0")
    (repo / "other.py").write_text("x = 1\n")
    git(repo, "add", "other.py")
    git(repo, "commit", "-qm", "unrelated")
    (repo / "k.py").write_text(THEIRS)
    git(repo, "commit", "-qam", "pick: a key argument")
    (repo / "k.py").write_text(THEIRS + "\n\nX = 2\n")
    git(repo, "commit", "-qam", "append below")
    git(repo, "tag", "v1.1.0")
    found = touching(repo, "v1.0.0", "v1.1.0", "k.py", (1, 2))
    assert [c.subject for c in found] == ["pick: a key argument"]


def test_upstream_checkout_config_runs_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "vllm"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "k.py").write_text(BASE)
    git(repo, "add", "k.py")
    git(repo, "commit", "-qm", "one")
    git(repo, "tag", "v1.0.0")
    (repo / "k.py").write_text(THEIRS)
    git(repo, "commit", "-qam", "two")
    git(repo, "tag", "v1.1.0")
    marker = tmp_path / "ran"
    git(repo, "config", "core.fsmonitor", f"touch {marker}; false")
    git(repo, "config", "diff.external", f"touch {marker}; false")
    (repo / ".gitattributes").write_text("*.py diff=evil\n")
    git(repo, "config", "diff.evil.textconv", f"touch {marker}; cat")
    assert [c.subject for c in touching(repo, "v1.0.0", "v1.1.0", "k.py", (1, 3))] == ["two"]
    assert not marker.exists()


def test_port_text_is_plain_diff_u(project: tuple[Path, Index]) -> None:
    home, _ = project
    code, _, _ = _port()
    assert code == 0
    text = (home / "patches" / "s" / "1.1.0" / "01-rev.diff").read_text()
    assert text.startswith(f"--- a/{MOD}\n+++ b/{MOD}\n@@ ")
    assert textwrap.dedent(text) == text


def test_a_port_not_proven_prints_the_steps_that_finish_its_attempt(
    project: tuple[Path, Index],
) -> None:
    home, idx = project
    idx.add("vllm-1.2.0.tar.gz", _sdist("1.2.0", BASE.replace("sorted(xs)", "sorted(set(xs))")))
    diff = home / "launcher" / "s" / "diffs" / "01-rev.diff"
    diff.write_text(_udiff(BASE, BASE.replace("sorted(xs)", "sorted(xs, reverse=True)")))
    res = CliRunner().invoke(
        app,
        ["port", "s", "--vllm", "1.2.0", "--json", "port.json"],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )
    assert res.exit_code == 1
    failed = json.loads(Path("port.json").read_text())["failed_out"]
    steps = [ln.strip() for ln in res.output.split("next:", 1)[1].splitlines() if ln.strip()]
    assert f"git -C {failed} status" in steps[0]
    assert steps[1:3] == [f"bakery verify s --tree {failed}", f"bakery refresh s --tree {failed}"]
