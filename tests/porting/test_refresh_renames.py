"""A refreshed diff that renames is a well-formed git diff (a new team's trial, findings 1,
2 and 4), built from nothing with the real tools:

- ``git format-patch`` of a pure rename (100% similarity, no hunks) and an edit of another
  file after it; baked, the other file edited in the baked tree, refreshed: every file
  patch of the rewritten diff has its ``diff --git`` header (as ``git diff`` writes it), so
  bakery bakes it again and ``git apply --check`` takes it (no ``---`` line read as part of
  the rename's header);
- the stale-port carry (``check`` of a port whose series changed) writes that form too,
  and ``port --update`` carries it;
- a port refresh wrote (its rename diff kept as it is, the tree stopped before it) is up
  to date at once;
- ``refresh --new-diff NAME`` of an edit to a file a diff already touches makes that new
  diff, never silently folds the change into the old one.
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

INSPECT = "".join(f"def view{i}():\n    return {i}\n\n\n" for i in range(1, 9))
WORKER = (
    '"""The worker."""\nfrom vllm.model_inspection import view1\n'
    "\n\ndef run():\n    return view1()\n"
)
RELEASE = {
    "vllm/__init__.py": "",
    "vllm/model_inspection.py": INSPECT,
    "vllm/worker.py": WORKER,
    "vllm/tasks.py": "".join(f"T{i} = {i}\n" for i in range(1, 12)),
}
#: 0.33.0 moves the worker's lines (the rename diff applies there with an offset)
RELEASE_33 = {**RELEASE, "vllm/worker.py": "# 0.33\n\n" + WORKER}
TOML = 'base = "0.32.0"\n'
SERIES_TEST = """
def test_the_rename_is_baked_in(baked_tree):
    assert not (baked_tree / "vllm/model_inspection.py").exists()
    assert "model_inspect import" in (baked_tree / "vllm/worker.py").read_text()
"""


def _format_patch(tmp_path: Path) -> bytes:
    """git format-patch --stdout of one commit: a pure rename, then an edit of worker.py."""
    repo = write_files(tmp_path / "repo", RELEASE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qm", "pristine")
    git(repo, "mv", "vllm/model_inspection.py", "vllm/model_inspect.py")
    worker = repo / "vllm/worker.py"
    worker.write_text(WORKER.replace("vllm.model_inspection", "vllm.model_inspect"))
    git(repo, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qam", "rename")
    proc = subprocess.run(
        ["git", "format-patch", "--stdout", "-1"], cwd=repo, capture_output=True, check=True
    )
    text = proc.stdout
    assert b"similarity index 100%\nrename from vllm/model_inspection.py\n" in text
    assert text.index(b"rename to vllm/model_inspect.py") < text.index(b"+++ b/vllm/worker.py")
    return text


def _git_apply_check(diff: Path, files: dict[str, str], where: Path) -> None:
    """``git apply --check`` of the diff on a checkout of ``files``."""
    if shutil.which("git") is None:
        return
    tree = write_files(where, files)
    proc = subprocess.run(
        ["git", "apply", "--check", str(diff)], cwd=tree, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()


@pytest.fixture
def series(cli: Cli, home: Path, tmp_path: Path) -> Path:
    cache_release("0.32.0", RELEASE)
    make_series(home, "t", {"01-rename.diff": _format_patch(tmp_path)}, toml=TOML)
    return home / "launcher/t/diffs/01-rename.diff"


def test_a_refreshed_pure_rename_and_a_later_file_is_a_diff_bakery_and_git_apply_take(
    cli: Cli, home: Path, tmp_path: Path, series: Path
) -> None:
    out = home / "build/t"
    r = cli("apply", "t", "--out", out)
    assert r.exit_code == 0, r.output
    worker = out / "vllm/worker.py"
    worker.write_text(worker.read_text().replace("The worker.", "The worker (t)."))
    r = cli("refresh", "t", "--tree", out)
    assert r.exit_code == 0, r.output
    assert "01-rename.diff  2 files, +2 -2" in r.output  # the rename and worker.py
    text = series.read_bytes()
    assert b"diff --git a/vllm/worker.py b/vllm/worker.py\n--- a/vllm/worker.py\n" in text
    assert b"rename to vllm/model_inspect.py\ndiff --git a/vllm/worker.py" in text
    r = cli("check", "t")
    assert r.exit_code == 0, r.output
    r = cli("apply", "t", "--out", home / "again")
    assert r.exit_code == 0, r.output
    assert (home / "again/vllm/worker.py").read_bytes() == worker.read_bytes()
    assert not (home / "again/vllm/model_inspection.py").exists()
    assert (home / "again/vllm/model_inspect.py").read_text() == INSPECT
    _git_apply_check(series, RELEASE, tmp_path / "checkout")


def _project(home: Path) -> None:
    git(home, "init", "-q")
    git(home, "add", "-A")
    git(home, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qm", "series")


def test_the_stale_port_carry_of_a_rename_diff_bakes_and_updates(
    cli: Cli, home: Path, tmp_path: Path, series: Path
) -> None:
    cache_release("0.33.0", RELEASE_33)
    tasks = "".join(f"T{i} = {i}\n" for i in range(1, 12))
    diff02 = home / "launcher/t/diffs/02-tasks.diff"
    diff02.write_text(_udiff("vllm/tasks.py", tasks, tasks.replace("T3 = 3", "T3 = 30")))
    write_files(home / "launcher/t/tests", {"test_t.py": SERIES_TEST})
    out = home / "build/t-33"
    r = cli("apply", "t", "--vllm", "0.33.0", "--out", out)
    assert r.exit_code == 0, r.output
    (out / "vllm/tasks.py").write_text(
        tasks.replace("T3 = 3", "T3 = 30").replace("T9 = 9", "T9 = 90")
    )
    r = cli("refresh", "t", "--tree", out)
    assert r.exit_code == 0, r.output
    port = home / "patches/t/0.33.0"
    assert (port / "01-rename.diff").is_file()
    _project(home)
    r = cli("check", "t", "--vllm", "0.33.0", "--up-to-date")
    assert r.exit_code == 0, r.output
    # the series changes 02: the port is stale, and its carry must bake
    diff02.write_text(_udiff("vllm/tasks.py", tasks, tasks.replace("T3 = 3", "T3 = 31")))
    git(home, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qam", "02: 31")
    r = cli("check", "t", "--vllm", "0.33.0")
    assert r.exit_code == 0, r.output
    r = cli("port", "t", "--update", "--vllm", "0.33.0", "--interpret")
    assert r.exit_code == 0, r.output
    _git_apply_check(port / "01-rename.diff", RELEASE_33, tmp_path / "checkout")


def _udiff(path: str, before: str, after: str) -> str:
    import difflib

    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}", n=3
        )
    )


TASKS = "".join(f"T{i} = {i}\n" for i in range(1, 12))


def test_a_port_refresh_wrote_with_a_rename_diff_kept_as_is_is_up_to_date(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    cache_release("0.32.0", RELEASE)
    # 0.34.0 changes the line 01 changes: 01 conflicts there, the rename diff after it waits
    cache_release("0.34.0", {**RELEASE, "vllm/tasks.py": TASKS.replace("T3 = 3", "T3 = 33")})
    ours = TASKS.replace("T3 = 3", "T3 = 30")
    make_series(
        home,
        "t",
        {
            "01-tasks.diff": _udiff("vllm/tasks.py", TASKS, ours),
            "02-rename.diff": _format_patch(tmp_path),
        },
        toml=TOML,
    )
    out = home / "build/t-34"
    r = cli("apply", "t", "--vllm", "0.34.0", "--out", out, "--keep-failed")
    assert r.exit_code == 1, r.output
    failed = home / "build/t-34.failed"
    (failed / "vllm/tasks.py").write_text(ours)  # resolved: ours wins
    r = cli("refresh", "t", "--tree", failed)
    assert r.exit_code == 0, r.output
    assert "02-rename.diff" in r.output and "not applied in the tree" in r.output
    port = home / "patches/t/0.34.0"
    assert (port / "02-rename.diff").is_file()
    r = cli("check", "t", "--vllm", "0.34.0", "--up-to-date")
    assert r.exit_code == 0, r.output
    r = cli("apply", "t", "--vllm", "0.34.0", "--out", home / "again")
    assert r.exit_code == 0, r.output
    assert not (home / "again/vllm/model_inspection.py").exists()
    assert (home / "again/vllm/tasks.py").read_text() == ours


def test_a_diff_bakery_made_and_cannot_read_back_is_a_bakery_bug_not_bad_input(
    cli: Cli, home: Path, series: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Isolated with a stand-in writer that makes the old mixed form (a hunk-less rename,
    then a plain ``---`` patch): refresh writes nothing and does not say exit 2."""
    from bakery.porting import refresh

    mixed = (
        b"diff --git a/vllm/model_inspection.py b/vllm/model_inspect.py\n"
        b"rename from vllm/model_inspection.py\nrename to vllm/model_inspect.py\n"
        b"--- a/vllm/worker.py\n+++ b/vllm/worker.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    monkeypatch.setattr(refresh, "render_diff", lambda *a, **k: mixed)
    out = home / "build/t"
    r = cli("apply", "t", "--out", out)
    assert r.exit_code == 0, r.output
    worker = out / "vllm/worker.py"
    worker.write_text(worker.read_text().replace("The worker.", "The worker (t)."))
    before = series.read_bytes()
    r = cli("refresh", "t", "--tree", out)
    assert r.exit_code == 1, r.output
    assert "01-rename.diff in a form it cannot read back" in r.output
    assert "bakery bug" in r.output
    assert series.read_bytes() == before


@pytest.mark.parametrize("where", ["init's work tree", "a baked tree"])
def test_new_diff_of_an_edit_to_a_file_a_diff_touches_makes_that_new_diff(
    cli: Cli, home: Path, where: str
) -> None:
    cache_release("0.32.0", RELEASE)
    assert cli("init", "t", "--vllm", "0.32.0").exit_code == 0
    work = home / "work/t"
    tasks = work / "vllm/tasks.py"
    tasks.write_text(TASKS.replace("T3 = 3", "T3 = 30"))
    r = cli("refresh", "t", "--tree", work, "--new-diff", "first")
    assert r.exit_code == 0, r.output
    diffs = home / "launcher/t/diffs"
    first = (diffs / "01-first.diff").read_bytes()
    tree = work
    if where == "a baked tree":
        tree = home / "build/t"
        assert cli("apply", "t", "--out", tree).exit_code == 0
    (tree / "vllm/tasks.py").write_text(
        TASKS.replace("T3 = 3", "T3 = 30").replace("T9 = 9", "T9 = 90")
    )
    r = cli("refresh", "t", "--tree", tree, "--new-diff", "second")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in diffs.iterdir()) == ["01-first.diff", "02-second.diff"]
    assert (diffs / "01-first.diff").read_bytes() == first  # the change went to 02, not 01
    second = (diffs / "02-second.diff").read_text()
    assert "-T9 = 9\n+T9 = 90\n" in second and "+T3 = 30" not in second
    r = cli("apply", "t", "--out", home / "again")
    assert r.exit_code == 0, r.output
    assert (home / "again/vllm/tasks.py").read_bytes() == (tree / "vllm/tasks.py").read_bytes()
    # --new-diff with nothing new to put in it: one line, never silently ignored
    r = cli("refresh", "t", "--tree", home / "again", "--new-diff", "third")
    assert r.exit_code == 2, r.output
    assert "--new-diff third:" in r.output and "no change since its bake" in r.output
    assert sorted(p.name for p in diffs.iterdir()) == ["01-first.diff", "02-second.diff"]


def test_refresh_from_inits_tree_the_series_moved_past_is_refused_not_a_silent_revert(
    cli: Cli, home: Path
) -> None:
    cache_release("0.32.0", RELEASE)
    assert cli("init", "t", "--vllm", "0.32.0").exit_code == 0
    work = home / "work/t"
    (work / "vllm/tasks.py").write_text(TASKS.replace("T3 = 3", "T3 = 32"))
    assert cli("refresh", "t", "--tree", work, "--new-diff", "first").exit_code == 0
    diff = home / "launcher/t/diffs/01-first.diff"
    # a further change made through a bake
    assert cli("apply", "t").exit_code == 0
    baked = home / "build/t-0.32.0/vllm/tasks.py"
    baked.write_text(TASKS.replace("T3 = 3", "T3 = 64"))
    assert cli("refresh", "t", "--tree", home / "build/t-0.32.0").exit_code == 0
    moved = diff.read_bytes()
    assert b"+T3 = 64" in moved
    # init's tree changes that line too: refreshing it would undo the 64 change
    (work / "vllm/tasks.py").write_text(TASKS.replace("T3 = 3", "T3 = 40"))
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 2, r.output
    assert "the series changed vllm/tasks.py since this tree was last refreshed" in r.output
    assert diff.read_bytes() == moved
    # init's tree still holds 32 there, and changes another line: the 64 change is kept
    (work / "vllm/tasks.py").write_text(
        TASKS.replace("T3 = 3", "T3 = 32").replace("T9 = 9", "T9 = 90")
    )
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 0, r.output
    assert "vllm/tasks.py: this tree lacks the series' change" in " ".join(r.output.split())
    text = diff.read_bytes()
    assert b"+T3 = 64" in text and b"+T9 = 90" in text and b"T3 = 32" not in text
