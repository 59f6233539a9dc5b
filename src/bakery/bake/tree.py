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
from pathlib import Path

from bakery.bake.merge import Fallback
from bakery.bake.plan import Events, Plan, plan
from bakery.bake.report import MANIFEST, BakeReport, write_json
from bakery.bake.staging import (
    clean_stale,
    display_path,
    make_staging,
    move_into_place,
    refuse_unless_replaceable,
    remove_tree,
    write_files,
)
from bakery.bake.treecopy import copy_tree
from bakery.errors import BakeryError
from bakery.git import cmd as gitutil
from bakery.git import conflicts
from bakery.git.index import restat_index
from bakery.git.repo import NEW_CONFIG, clone_local, commit_series, link_objects
from bakery.patch import mail
from bakery.patch.series import Series
from bakery.sources.cache import discard as _discard
from bakery.sources.resolve import Pristine


def _populate(pristine: Pristine, staging: Path) -> str:
    """Fill the staging folder with the pristine tree and its commit; returns the commit."""
    if pristine.repo:
        return _populate_from_repo(pristine, staging)
    if pristine.package_dir is not None:
        (staging / "vllm").mkdir()
        copy_tree(pristine.package_dir, staging / "vllm", exclude={"__pycache__"})
    elif (pristine.tree / ".git").exists():
        listed = gitutil.git(
            pristine.tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard"
        )
        for rel in filter(None, listed.split("\0")):
            src = pristine.tree / rel
            if not src.exists() and not src.is_symlink():
                continue  # deleted but not committed (--allow-dirty)
            dst = staging / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    else:
        copy_tree(pristine.tree, staging)
    label = f"vLLM {pristine.version}" if pristine.version else "vLLM tree"
    return gitutil.init_commit_all(staging, f"pristine {label}")


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


def _messages(series: Series) -> tuple[list[str], list[str | None]]:
    """Each diff's commit message and author (a format-patch file's own, as git am takes
    them; bakery's fixed identity for a plain diff)."""
    messages: list[str] = []
    authors: list[str | None] = []
    for d in series.load_diffs():
        try:
            info = mail.read(d.path.read_bytes())
        except OSError:
            info = None
        messages.append(mail.commit_message(d.name, d.sha256, info))
        authors.append(info.author if info else None)
    return messages, authors


def _ignore_bakery(staging: Path) -> None:
    exclude = staging / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("/.bakery/\n")


def _commit(pl: Plan, series: Series, staging: Path, upto: int) -> None:
    """The first upto diffs as commits, one each, on the pristine commit."""
    report = pl.report
    messages, authors = _messages(series)
    ids = commit_series(
        staging, str(report.pristine_commit), messages[:upto], pl.writes[:upto], authors[:upto]
    )
    for dres, commit in zip(report.diffs, ids, strict=False):
        dres.commit = commit
    report.head = ids[-1] if ids else report.pristine_commit


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
        _commit(pl, series, staging, len(pl.writes))
    _ignore_bakery(staging)


def write_failed(pl: Plan, series: Series, pristine: Pristine, failed_out: Path) -> None:
    """The attempt, for a person to finish, stopped the way ``git am -3`` stops: the diffs
    before the first that does not apply are commits; that one is applied as far as it
    goes, its clean files staged, its three-way conflicts in git's index as unmerged
    entries (and diff3 markers in the file), its other failed hunks in .rej files; the
    diffs after it are not applied (refresh keeps them as they are)."""
    remove_tree(failed_out)
    staging = make_staging(failed_out)
    try:
        report = pl.report
        stop = next(i for i, d in enumerate(report.diffs) if not d.ok)
        report.pristine_commit = _populate(pristine, staging)
        for writes in pl.writes[:stop]:
            write_files(staging, writes)
        _commit(pl, series, staging, stop)
        dres, writes = report.diffs[stop], pl.writes[stop]
        write_files(staging, writes)
        unresolved: list[conflicts.Conflict] = []
        for f in dres.files:
            if f.ok:
                continue
            if f.conflict is not None:
                write_files(staging, {f.path: (f.conflict, f.mode)})
                if f.sides is not None:
                    unresolved.append(
                        conflicts.Conflict(f.path, *f.sides, executable=bool((f.mode or 0) & 0o100))
                    )
            elif f.failed_hunks:
                rej = staging / (f.path + ".rej")
                rej.parent.mkdir(parents=True, exist_ok=True)
                fp_text = f"--- {f.path}\n+++ {f.path}\n" + "".join(
                    h.render() for h in f.failed_hunks
                )
                with rej.open("a", encoding="latin-1") as fh:
                    fh.write(fp_text)
        failed_paths = {f.path for f in dres.files if not f.ok}
        conflicts.stage(staging, sorted(p for p in writes if p not in failed_paths))
        conflicts.record(staging, unresolved)
        # what bakery wrote, so that edits since (the resolution) can be told apart
        for rel in sorted({p for w in pl.writes[: stop + 1] for p in w} | failed_paths):
            written = staging / rel
            if written.is_file() and not written.is_symlink():
                report.files_sha256[rel] = hashlib.sha256(written.read_bytes()).hexdigest()
        _ignore_bakery(staging)
        manifest = {**report.manifest(), "status": "conflict", "stopped_at": dres.name}
        write_json(staging / MANIFEST, manifest)
        os.replace(staging, failed_out)
    except BaseException:
        _discard(staging)
        raise


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
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(out)
    refuse_unless_replaceable(out, force)
    pl = plan(series, pristine, fuzz=fuzz, fallback=fallback, events=events)
    report = pl.report
    failed_out = out.with_name(out.name + ".failed")
    base = fallback.base if fallback is not None else None

    def confirm() -> None:
        """The cached trees read (target, base) were unchanged (cache.CacheChanged if not)."""
        pristine.confirm()
        if base is not None:
            base.confirm()

    if not report.ok:
        confirm()
        report.status = "conflict"
        remove_tree(out)
        if keep_failed:
            write_failed(pl, series, pristine, failed_out)
            report.failed_out = display_path(failed_out)
        return report
    staging = make_staging(out)
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
    with contextlib.suppress(OSError):
        remove_tree(failed_out)
    return report
