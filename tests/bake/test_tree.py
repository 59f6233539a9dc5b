"""bake.py as a library: the plan in memory, the staged tree, cached (git) sources, the
manifest, and nothing half-written when something goes wrong."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from bakery.bake import tree as bake_mod
from bakery.bake.plan import plan
from bakery.bake.staging import refuse_unless_replaceable, remove_tree
from bakery.bake.tree import bake
from bakery.bake.treecopy import copy_tree
from bakery.errors import BakeryError, UnsafePathError
from bakery.git import cmd as gitutil
from bakery.model.manifest import read as read_manifest
from bakery.patch.series import load_series
from bakery.sources.pristine import Pristine
from tests.support.repos import commits, git
from tests.support.series import make_series, udiff
from tests.support.trees import Tiny, tree_digest, write_files


def local(tree: Path, version: str | None = None) -> Pristine:
    return Pristine(tree.resolve(), version, str(tree), None)


def cached(tree: Path, version: str) -> Pristine:
    """A tree as the cache holds a release: a repo whose one commit is the pristine tree."""
    gitutil.init_commit_all(tree, f"pristine vLLM {version}")
    return Pristine(
        tree.resolve(),
        version,
        f"https://example.invalid/vllm-{version}.tar.gz",
        "0" * 64,
        repo=True,
    )


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """What the core narrated (bakery.logs): (kind, line) of each record."""
    return [(getattr(r, "event", ""), r.getMessage()) for r in caplog.records]


def test_plan_applies_in_memory_and_writes_nothing(
    tiny: Tiny, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = tree_digest(tmp_path)
    caplog.set_level(logging.INFO, logger="bakery")
    pl = plan(load_series("demo"), local(tiny.src))
    assert tree_digest(tmp_path) == before
    assert pl.report.ok and pl.report.status == "checked"
    assert _events(caplog) == [
        ("diff", "Applying 01-kernel.diff (1/3)"),
        ("diff", "Applying 2-files.diff (2/3)"),
        ("diff", "Applying 10-again.diff (3/3)"),
    ]
    # later diffs see earlier ones: 10-again changes what 01-kernel wrote
    assert pl.writes[2]["vllm/model_executor/k.py"][0] == tiny.baked["vllm/model_executor/k.py"]
    assert pl.writes[1]["vllm/old.py"] == (None, 0o644)
    assert pl.writes[1]["vllm/tools/run.sh"][1] == 0o644


def test_bake_returns_the_report_and_writes_the_manifest(
    tiny: Tiny, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, logger="bakery")
    report = bake(load_series("demo"), local(tiny.src), out)
    assert report.status == "baked" and _events(caplog)[-1][0] == "write"
    manifest = read_manifest(out)
    assert manifest is not None
    assert manifest.head == gitutil.head(out) == report.head
    assert manifest.files == {
        "vllm/model_executor/k.py": _sha(tiny.baked["vllm/model_executor/k.py"]),
        "vllm/model_executor/new.py": _sha(tiny.baked["vllm/model_executor/new.py"]),
        "vllm/tools/run.sh": _sha((tiny.src / "vllm/tools/run.sh").read_bytes()),  # mode
    }
    assert [d.commit for d in report.diffs] == [c for c, _, _ in commits(out)[1:]]
    assert gitutil.dirty(out) == []


def _sha(data: bytes | None) -> str:
    import hashlib

    assert data is not None
    return hashlib.sha256(data).hexdigest()


def test_cached_release_is_cloned_not_changed(tiny: Tiny, tmp_path: Path) -> None:
    pristine = cached(tiny.src, "9.9.9")
    head = gitutil.head(tiny.src)
    before = tree_digest(tiny.src)
    out = tmp_path / "out"
    report = bake(load_series("demo"), pristine, out)
    assert report.status == "baked"
    assert tree_digest(tiny.src) == before
    assert gitutil.head(tiny.src) == head and gitutil.dirty(tiny.src) == []
    log = commits(out)
    assert log[0] == (head, "pristine vLLM 9.9.9", "")
    assert git(out, "remote") == ""  # no link back to the cache
    # files of the bake are not hard links into the cache
    for rel in ("setup.py", "vllm/model_executor/k.py"):
        assert (out / rel).stat().st_ino != (tiny.src / rel).stat().st_ino
    # the same release extracted anywhere gives the same commits
    other = tmp_path / "copy"
    other.mkdir()
    copy_tree(tiny.src, other, exclude={".git"})
    report2 = bake(load_series("demo"), local(other, "9.9.9"), tmp_path / "out2")
    assert commits(tmp_path / "out2") == log
    assert report2.head == report.head


def _fsck_ok(tree: Path) -> None:
    git(tree, "fsck", "--full", "--strict", "--no-dangling")
    assert gitutil.dirty(tree) == []


def test_cached_history_is_linked_not_cloned(tiny: Tiny, tmp_path: Path) -> None:
    """The baked repository is made from the cached one's files, with no git process:
    its objects are hard links (git never rewrites an object file), its branch and HEAD
    those of the cache, and git finds it whole (fsck) and clean (status)."""
    pristine = cached(tiny.src, "9.9.9")
    git(tiny.src, "gc", "-q")  # a pack and packed-refs, as well as loose files
    out = tmp_path / "out"
    bake(load_series("demo"), pristine, out)
    _fsck_ok(out)
    assert git(out, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(out, "config", "--get", "core.bare").strip() == "false"
    packs = list((tiny.src / ".git" / "objects" / "pack").glob("*.pack"))
    assert packs
    for p in packs:
        assert (out / ".git" / "objects" / "pack" / p.name).stat().st_ino == p.stat().st_ino


@pytest.mark.parametrize("form", ["detached", "alternates"])
def test_cache_repository_of_another_form_is_cloned_by_git(
    tiny: Tiny, tmp_path: Path, form: str
) -> None:
    pristine = cached(tiny.src, "9.9.9")
    head = gitutil.head(tiny.src)
    if form == "detached":
        git(tiny.src, "checkout", "-q", "--detach")
    else:
        other = tmp_path / "elsewhere"
        git(tmp_path, "clone", "-q", "--bare", str(tiny.src), str(other))
        (tiny.src / ".git" / "objects" / "info").mkdir(exist_ok=True)
        (tiny.src / ".git" / "objects" / "info" / "alternates").write_text(
            str(other / "objects") + "\n"
        )
    out = tmp_path / "out"
    report = bake(load_series("demo"), pristine, out)
    assert report.pristine_commit == head
    assert commits(out)[0][0] == head
    _fsck_ok(out)


def test_out_on_another_file_system(tiny: Tiny, tmp_path: Path) -> None:
    """Hard links cannot cross file systems: the cached objects are copied instead."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system to bake onto")
    pristine = cached(tiny.src, "9.9.9")
    out = Path(tempfile.mkdtemp(dir=shm)) / "out"
    try:
        report = bake(load_series("demo"), pristine, out)
        assert report.status == "baked"
        _fsck_ok(out)
        assert commits(out)[0][0] == gitutil.head(tiny.src)
    finally:
        shutil.rmtree(out.parent)


def test_conflict_leaves_nothing_and_no_staging(tiny: Tiny, tmp_path: Path) -> None:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("    return 14\n", "    return 14  # upstream\n"))
    out = tmp_path / "build" / "out"
    report = bake(load_series("demo"), local(tiny.src), out)
    assert report.status == "conflict" and not report.ok
    assert report.failed_hunks() == [
        ("01-kernel.diff", "vllm/model_executor/k.py", 2, 51, "failed")
    ]
    assert list((tmp_path / "build").iterdir()) == []


def test_keep_failed_carries_applied_hunks_forward(tiny: Tiny, tmp_path: Path) -> None:
    # Hunk 1 of 01-kernel applies, hunk 2 fails; 10-again builds on hunk 1 and so applies
    # in the report. The attempt stops the way git am stops (issue 16): 01-kernel's hunk 1
    # in place with the .rej of hunk 2, the diffs after it not applied.
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("    return 14\n", "    return 14  # upstream\n"))
    out = tmp_path / "out"
    report = bake(load_series("demo"), local(tiny.src), out, keep_failed=True)
    statuses = [(d.name, h.status.value) for d in report.diffs for f in d.files for h in f.hunks]
    assert statuses[-1] == ("10-again.diff", "applied")
    failed = tmp_path / "out.failed"
    text = (failed / "vllm/model_executor/k.py").read_text()
    assert "return 2 + 0\n" in text and "return 14  # upstream\n" in text
    assert not (failed / "vllm/model_executor/new.py").exists()  # 2-files waits
    assert (failed / "vllm/old.py").exists()
    assert (failed / "vllm/model_executor/k.py.rej").is_file()
    assert not out.exists()


def test_keep_failed_for_a_new_file_that_exists(tiny: Tiny, tmp_path: Path) -> None:
    write_files(tiny.src, {"vllm/model_executor/new.py": "NEW = 2\n"})
    report = bake(load_series("demo"), local(tiny.src), tmp_path / "out", keep_failed=True)
    assert ("2-files.diff", "vllm/model_executor/new.py", 1, 1, "failed") in report.failed_hunks()
    failed = tmp_path / "out.failed"
    assert (failed / "vllm/model_executor/new.py").read_text() == "NEW = 2\n"
    rej = (failed / "vllm/model_executor/new.py.rej").read_text()
    assert "@@ -0,0 +1,2 @@\n+NEW = 1\n+OLD = 0\n" in rej


def test_error_while_writing_leaves_nothing(
    tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(bake_mod, "commit_series", boom)
    with pytest.raises(KeyboardInterrupt):
        bake(load_series("demo"), local(tiny.src), tmp_path / "build" / "out")
    assert list((tmp_path / "build").iterdir()) == []


def test_stale_staging_of_dead_bakes_is_removed(tiny: Tiny, tmp_path: Path) -> None:
    dead = 2**22 + 12345  # above the default pid_max of most systems
    while True:
        try:
            os.kill(dead, 0)
        except ProcessLookupError:
            break
        dead += 1
    build = tmp_path / "build"
    stale = build / f".out.bakery-{dead}-abc"
    live = build / ".out.bakery-1-abc"  # pid 1 is alive
    other = build / ".unrelated"
    for p in (stale, live, other):
        p.mkdir(parents=True)
    bake(load_series("demo"), local(tiny.src), build / "out")
    assert not stale.exists() and live.exists() and other.exists()


def test_out_replace_rules(tiny: Tiny, tmp_path: Path) -> None:
    refuse_unless_replaceable(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    refuse_unless_replaceable(tmp_path / "empty")
    write_files(tmp_path / "full", {"x": "y"})
    with pytest.raises(BakeryError, match="not a baked tree"):
        refuse_unless_replaceable(tmp_path / "full")
    os.symlink(tmp_path / "empty", tmp_path / "link")
    with pytest.raises(BakeryError, match="not a folder"):
        refuse_unless_replaceable(tmp_path / "link")
    out = tmp_path / "out"
    bake(load_series("demo"), local(tiny.src), out)
    refuse_unless_replaceable(out)
    (out / "setup.py").write_text("changed\n")
    with pytest.raises(BakeryError, match="local changes"):
        refuse_unless_replaceable(out)
    refuse_unless_replaceable(out, force=True)


def test_remove_tree(tmp_path: Path) -> None:
    write_files(tmp_path / "t", {"a/b": "c"})
    remove_tree(tmp_path / "t")
    remove_tree(tmp_path / "never")
    assert sorted(os.listdir(tmp_path)) == ["home"]


def test_copy_tree_keeps_links_and_modes(tmp_path: Path) -> None:
    src = write_files(tmp_path / "src", {"run.sh": ("x", 0o755), "d/f": "y"})
    os.symlink("d/f", src / "link")
    os.symlink(src, src / "d" / "loop")
    dst = tmp_path / "dst"
    dst.mkdir()
    copy_tree(src, dst)
    assert stat.S_IMODE((dst / "run.sh").stat().st_mode) == 0o755
    assert os.readlink(dst / "link") == "d/f"
    assert (dst / "d" / "loop").is_symlink()


@pytest.mark.parametrize("jobs", [1, 2, 3, 5])
def test_copy_tree_in_parallel_is_an_exact_copy(
    tmp_path: Path, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut into parts for several cp at once, the copy is the same as one cp's: every file,
    link, empty folder, mode and time, and nothing from an excluded name."""
    import bakery.bake.treecopy as tc

    monkeypatch.setattr(tc, "_SMALL", 10)  # split even this small tree
    files: dict[str, str | tuple[str, int]] = {
        f"big/sub{i}/f{j}.py": f"{i} {j}\n" for i in range(6) for j in range(9)
    }
    files |= {
        "big/sub0/deep/er/x.sh": ("#!/bin/sh\n", 0o755),
        "top.txt": "t\n",
        "small/a": "a\n",
        ".git/HEAD": "ref\n",
    }
    src = write_files(tmp_path / "src", files)
    (src / "big" / "empty").mkdir()
    os.chmod(src / "big" / "sub1", 0o750)
    os.symlink("../top.txt", src / "big" / "link")
    os.utime(src / "big" / "sub2", ns=(10**18, 10**18))
    dst = tmp_path / "dst"
    dst.mkdir()
    copy_tree(src, dst, exclude={".git"}, jobs=jobs)

    def state(root: Path) -> dict[str, tuple[int, int | str]]:
        out: dict[str, tuple[int, int | str]] = {}
        for p in root.rglob("*"):
            st = p.lstat()
            what = (
                os.readlink(p)
                if p.is_symlink()
                else st.st_mtime_ns
                if p.is_dir()
                else p.read_text()
            )
            out[str(p.relative_to(root))] = (st.st_mode, what)
        return out

    want = {k: v for k, v in state(src).items() if not k.startswith(".git")}
    assert state(dst) == want


def test_writing_through_a_symlinked_folder_is_refused(tmp_path: Path, home: Path) -> None:
    outside = write_files(tmp_path / "outside", {"k.py": "a\nb\n"})
    src = write_files(tmp_path / "src", {"README": "x\n"})
    os.symlink(outside, src / "pkg")
    make_series(home, "s", {"1-a.diff": udiff("pkg/k.py", "a\nb\n", "a\nB\n", "a", "b")})
    before = tree_digest(outside)
    with pytest.raises(UnsafePathError, match="symlink pkg"):
        bake(load_series("s"), local(src), tmp_path / "out")
    assert tree_digest(outside) == before
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, home: Path) -> None:
    src = tmp_path / "src"
    (src / "k.py").mkdir(parents=True)
    make_series(home, "s", {"1-a.diff": udiff("k.py", "a\n", "b\n", "a", "b")})
    with pytest.raises(UnsafePathError, match="not a regular file"):
        plan(load_series("s"), local(src))


def test_package_folder_source_bakes_under_vllm(tiny: Tiny, tmp_path: Path) -> None:
    pkg = Pristine(
        tiny.src, None, str(tiny.src / "vllm"), None, package_dir=(tiny.src / "vllm").resolve()
    )
    report = bake(load_series("demo"), pkg, tmp_path / "out")
    assert report.status == "baked"
    assert sorted(os.listdir(tmp_path / "out")) == [".bakery", ".git", "vllm"]


def test_two_diffs_touching_one_file_commit_separately(tiny: Tiny, tmp_path: Path) -> None:
    out = tmp_path / "out"
    bake(load_series("demo"), local(tiny.src), out)
    log = commits(out)
    changed = [git(out, "show", "--name-only", "--format=", c).split() for c, _, _ in log[1:]]
    assert changed == [
        ["vllm/model_executor/k.py"],
        ["vllm/model_executor/new.py", "vllm/old.py", "vllm/tools/run.sh"],
        ["vllm/model_executor/k.py"],
    ]


def test_bake_module_has_no_print(
    capsys: pytest.CaptureFixture[str], tiny: Tiny, tmp_path: Path
) -> None:
    bake(load_series("demo"), local(tiny.src), tmp_path / "out")
    assert capsys.readouterr() == ("", "")
    assert bake_mod.__doc__


def test_copy_jobs_follow_set_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix worker copies with its share of the cores: set_jobs(1) means one cp."""
    import bakery.bake.treecopy as tc

    monkeypatch.setattr(tc, "_SMALL", 10)
    monkeypatch.setattr(tc, "_jobs", None)
    src = write_files(tmp_path / "src", {f"d{i}/f{j}": "x" for i in range(4) for j in range(5)})
    seen: list[int] = []
    real = tc.process.run_all

    def counting(cmds: list[list[str]], **kw: object) -> object:
        seen.append(len(cmds))
        return real(cmds, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tc.process, "run_all", counting)
    for n, name in ((3, "a"), (1, "b")):
        tc.set_jobs(n)
        (tmp_path / name).mkdir()
        copy_tree(src, tmp_path / name)
        assert tree_digest(tmp_path / name) == tree_digest(src)
    assert seen == [3, 1]
