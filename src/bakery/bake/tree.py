"""Baking: apply a series to a pristine tree, first in memory, then into a new tree.

The whole series is applied in memory against the pristine files it touches before a
single byte is written, so ``check`` and a conflicting ``apply`` never copy the tree.
A bake that applies is built in a staging folder beside ``--out`` and renamed into place;
anything else (a conflict, an error, SIGINT/SIGTERM) removes the staging folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from bakery.bake.merge import Fallback
from bakery.bake.plan import Events, Plan, plan
from bakery.bake.report import MANIFEST, BakeReport, write_json
from bakery.bake.staging import (
    clean_stale,
    display_path,
    move_into_place,
    refuse_unless_replaceable,
    remove_tree,
    staging_prefix,
    write_files,
)
from bakery.bake.treecopy import copy_tree
from bakery.errors import BakeryError, UsageError
from bakery.git import cmd as gitutil
from bakery.git.index import restat_index
from bakery.git.repo import NEW_CONFIG, clone_local, commit_series, link_objects
from bakery.patch.series import Series
from bakery.safety import paths
from bakery.sources.cache import discard as _discard
from bakery.sources.resolve import Pristine


def _populate(pristine: Pristine, staging: Path) -> str:
    """Fill the staging folder with the pristine tree and its commit; returns the commit."""
    if pristine.repo:
        return _populate_from_repo(pristine, staging)
    if pristine.package_dir is not None:
        _refuse_special(pristine.package_dir)
        (staging / "vllm").mkdir()
        copy_tree(pristine.package_dir, staging / "vllm", exclude={"__pycache__"})
    elif (pristine.tree / ".git").exists():
        listed = gitutil.git(
            pristine.tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard"
        )
        for rel in filter(None, listed.split("\0")):
            # an index is data: an entry may say ../x, or lead through a link
            src = paths.inside(pristine.tree, rel, f"--vllm {pristine.tree}: git index entry")
            if not src.exists() and not src.is_symlink():
                continue  # deleted but not committed (--allow-dirty)
            dst = staging / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir() and not src.is_symlink():  # a submodule: its files, as they are
                _refuse_special(src)
                dst.mkdir()
                copy_tree(src, dst, exclude={".git"})
                continue
            if not src.is_symlink() and not src.is_file():
                paths.regular_file(src, f"--vllm {pristine.tree}")  # a FIFO: one line
            shutil.copy2(src, dst, follow_symlinks=False)
    else:
        _refuse_special(pristine.tree)
        copy_tree(pristine.tree, staging, exclude={".git"})
    label = f"vLLM {pristine.version}" if pristine.version else "vLLM tree"
    return gitutil.init_commit_all(staging, f"pristine {label}")


def _refuse_special(tree: Path) -> None:
    """A local tree holds only folders, files and links: a FIFO, socket or device in it
    is refused with one line (git would refuse it later, less clearly)."""
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            p = Path(dirpath, name)
            mode = p.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                paths.regular_file(p, f"--vllm {tree}")


def _populate_from_repo(pristine: Pristine, staging: Path) -> str:
    """The cached repository's history given to the copy of its files: its objects linked
    (copied across file systems), its HEAD and branch written, its index given the copies'
    stat data. The copy is the only read of the tree, no git command hashes it again, and
    no git process runs (a read-tree index has no stat data: the first commit or status
    would read every file). A repository in another form is cloned by git instead."""
    copy_tree(pristine.tree, staging, exclude={".git"})
    pristine.confirm()  # the cache's look for changed files ran during the copy
    src = pristine.tree / ".git"
    head = gitutil.read_head(src)
    if (
        head is None
        or (src / "objects" / "info" / "alternates").exists()
        or (src / "shallow").exists()
        or (src / "commondir").exists()
    ):
        return clone_local(pristine.tree, staging)
    ref, commit = head
    dst = staging / ".git"
    link_objects(src / "objects", dst / "objects")
    for sub in ("refs/heads", "refs/tags", "info"):
        (dst / sub).mkdir(parents=True, exist_ok=True)
    (dst / ref).parent.mkdir(parents=True, exist_ok=True)
    (dst / ref).write_text(commit + "\n")
    (dst / "HEAD").write_text(f"ref: {ref}\n")
    (dst / "config").write_text(NEW_CONFIG)
    if not restat_index(staging, src / "index"):
        gitutil.git(staging, "read-tree", "HEAD")
    return commit


def write_tree(
    pl: Plan, series: Series, pristine: Pristine, staging: Path, commits: bool = True
) -> None:
    """Write the pristine tree and the planned changes into staging (with commits)."""
    report = pl.report
    report.pristine_commit = _populate(pristine, staging)
    for writes in pl.writes:
        write_files(staging, writes)
        for rel, (content, _) in writes.items():
            if content is None:
                report.files_sha256.pop(rel, None)
            else:
                report.files_sha256[rel] = hashlib.sha256(content).hexdigest()
    report.head = report.pristine_commit
    if commits:
        messages = [f"{d.name}\n\nBakery-Diff-Sha256: {d.sha256}\n" for d in series.load_diffs()]
        ids = commit_series(staging, report.pristine_commit, messages, pl.writes)
        for dres, commit in zip(report.diffs, ids, strict=True):
            dres.commit = commit
        report.head = ids[-1] if ids else report.head
    _exclude_manifest(staging)


#: The subject of the one commit a --keep-failed attempt carries.
ATTEMPT = "bakery: attempt (does not apply; resolve, then `bakery refresh`)"


def write_failed(pl: Plan, series: Series, pristine: Pristine, failed_out: Path) -> None:
    """The attempt, for a person to finish: applied hunks in place, the rest in .rej files
    (or as conflict markers where a three-way merge left them). The attempt is committed
    (one commit over the pristine one) and the manifest records that commit: a later bake
    can then prove the folder unchanged before it replaces or removes it (see
    failed_state); a folder with the user's edits is never touched."""
    staging = Path(
        tempfile.mkdtemp(
            prefix=staging_prefix(failed_out) + f"{os.getpid()}-", dir=failed_out.parent
        )
    )
    try:
        report = pl.report
        report.pristine_commit = _populate(pristine, staging)
        attempt: dict[str, tuple[bytes | None, int | None]] = {}
        for dres, writes in zip(report.diffs, pl.writes, strict=True):
            attempt.update(writes)
            for f in dres.files:
                if f.ok:
                    continue
                if f.conflict is not None:
                    attempt[f.path] = (f.conflict, f.mode)
                elif f.failed_hunks:
                    rel = f.path + ".rej"
                    before = attempt.get(rel, (b"", None))[0] or b""
                    text = f"--- {f.path}\n+++ {f.path}\n" + "".join(
                        h.render() for h in f.failed_hunks
                    )
                    attempt[rel] = (before + text.encode("latin-1"), 0o644)
        write_files(staging, attempt)
        report.head = commit_series(staging, report.pristine_commit, [ATTEMPT + "\n"], [attempt])[0]
        _exclude_manifest(staging)
        write_json(staging / MANIFEST, {**report.manifest(), "status": "conflict"})
        remove_tree(failed_out)  # failed_state() said it may go
        os.replace(staging, failed_out)
    except BaseException:
        _discard(staging)
        raise


def failed_state(failed_out: Path) -> str | None:
    """None when nothing is at failed_out, "unchanged" for an attempt bakery wrote and
    nobody changed since, else why it must be kept (edits, or not bakery's)."""
    from bakery.bake import manifest as manifests

    if not os.path.lexists(failed_out):
        return None
    if failed_out.is_symlink() or not failed_out.is_dir():
        return "it is not a folder bakery made"
    try:
        m = manifests.read(failed_out)
        if m is None or m.status != "conflict" or m.head is None:
            return "bakery did not make it (or made it before attempts were committed)"
        gitutil.check_foreign(failed_out, str(failed_out))
        if gitutil.head(failed_out) != m.head or gitutil.dirty(failed_out):
            return "it holds changes made since bakery wrote it"
    except BakeryError as e:
        return f"it cannot be checked ({e.message})"
    return "unchanged"


def _exclude_manifest(tree: Path) -> None:
    exclude = tree / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("/.bakery/\n")


def bake(
    series: Series,
    pristine: Pristine,
    out: Path,
    *,
    fuzz: int = 0,
    keep_failed: bool = False,
    force: bool = False,
    fallback: Fallback | None = None,
    events: Events | None = None,
) -> BakeReport:
    """Bake the series into out. Returns the report; out holds a tree only if it applied."""
    out = out.absolute()
    source = (pristine.package_dir or pristine.tree).resolve()
    if out.resolve() == source or source in out.resolve().parents:
        raise BakeryError(
            f"--out {out}: inside the pristine tree {source}, which bakery "
            "never changes; choose another --out"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"--out {out}: cannot make its folder {out.parent}: {e.strerror}"
        ) from None
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write in {out.parent} (permission denied)")
    clean_stale(out)
    refuse_unless_replaceable(out, force)
    pl = plan(series, pristine, fuzz=fuzz, fallback=fallback, events=events)
    report = pl.report
    failed_out = out.with_name(out.name + ".failed")
    failed = failed_state(failed_out)
    base = fallback.base if fallback is not None else None

    def confirm() -> None:
        """The cached trees read (target, base) were unchanged (cache.CacheChanged if not)."""
        pristine.confirm()
        if base is not None:
            base.confirm()

    if not report.ok:
        confirm()
        report.status = "conflict"
        if keep_failed and failed not in (None, "unchanged"):
            # before anything is removed: the user's attempt is worth more than ours
            raise UsageError(
                f"{failed_out}: {failed}; bakery will not overwrite it (refresh it into a "
                "port, or move it away, then bake again with --keep-failed)"
            )
        remove_tree(out)
        if keep_failed:
            write_failed(pl, series, pristine, failed_out)
            report.failed_out = display_path(failed_out)
        return report
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(out) + f"{os.getpid()}-", dir=out.parent))
    try:
        if events:
            events("write", f"Writing {display_path(out)}")
        write_tree(pl, series, pristine, staging)
        confirm()  # before the tree takes its place
        report.status = "baked"
        report.out = display_path(out)
        write_json(staging / MANIFEST, report.manifest())
        move_into_place(staging, out)
    except BaseException:
        _discard(staging)
        raise
    if failed == "unchanged":  # only an attempt bakery made and nobody touched
        with contextlib.suppress(OSError):
            remove_tree(failed_out)
    elif failed is not None and events:
        events("detected", f"kept {display_path(failed_out)}: {failed}")
    return report
