"""Baking: apply a series to a pristine tree, first in memory, then into a new tree.

The whole series is applied in memory against the pristine files it touches before a
single byte is written, so ``check`` and a conflicting ``apply`` never copy the tree.
A bake that applies is built in a staging folder beside ``--out`` and renamed into place;
anything else (a conflict, an error, SIGINT/SIGTERM) removes the staging folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from bakery.bake.merge import Fallback
from bakery.bake.plan import Plan, plan
from bakery.bake.staging import (
    LocalChanges,
    baked_manifest,
    clean_stale,
    display_path,
    make_staging,
    move_into_place,
    refuse_unless_replaceable,
    remove_tree,
    write_files,
)
from bakery.bake.treecopy import copy_tree
from bakery.errors import BakeryError, UsageError
from bakery.git import cmd as gitutil
from bakery.git import conflicts
from bakery.git.index import restat_index
from bakery.git.repo import NEW_CONFIG, clone_local, commit_series, link_objects
from bakery.logs import muted
from bakery.model.report import MANIFEST, BakeReport, bake_proof, write_json
from bakery.patch import mail
from bakery.patch.series import Series
from bakery.safety import paths
from bakery.sources.cache import discard as _discard
from bakery.sources.pristine import Pristine

_log = logging.getLogger(__name__)


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
    diffs after it are not applied (refresh keeps them as they are). The manifest records
    the head and the hash of every file bakery wrote: a later bake can then prove the
    folder unchanged before it replaces or removes it (see failed_state); a folder with
    the user's edits is never touched. The folder is built beside failed_out, and an old
    attempt (which failed_state said may go) is removed only once the new one is whole."""
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
        rejects: set[str] = set()
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
                rejects.add(f.path + ".rej")
        failed_paths = {f.path for f in dres.files if not f.ok}
        conflicts.stage(staging, sorted(p for p in writes if p not in failed_paths))
        conflicts.record(staging, unresolved)
        # what bakery wrote, so that edits since (the resolution) can be told apart
        written_paths = {p for w in pl.writes[: stop + 1] for p in w} | failed_paths | rejects
        for rel in sorted(written_paths):
            written = staging / rel
            if written.is_file() and not written.is_symlink():
                report.files_sha256[rel] = hashlib.sha256(written.read_bytes()).hexdigest()
        _ignore_bakery(staging)
        manifest = {**report.manifest(), "status": "conflict", "stopped_at": dres.name}
        write_json(staging / MANIFEST, manifest)
        remove_tree(failed_out)  # failed_state() said it may go
        os.replace(staging, failed_out)
    except BaseException:
        _discard(staging)
        raise


def failed_state(failed_out: Path) -> str | None:
    """None when nothing is at failed_out, "unchanged" for an attempt bakery wrote and
    nobody changed since, else why it must be kept (edits, or not bakery's).

    An attempt holds unmerged index entries (git status is never clean there), so
    "unchanged" is decided from the manifest: the same head, every file bakery wrote as
    it wrote it (the hashes the manifest records), and no other file changed or added
    (git diff against the head, and the untracked files, name nothing else)."""
    from bakery.model import manifest as manifests

    if not os.path.lexists(failed_out):
        return None
    if failed_out.is_symlink() or not failed_out.is_dir():
        return "it is not a folder bakery made"
    try:
        m = manifests.read(failed_out)
        if m is None or m.status != "conflict" or m.head is None:
            return "bakery did not make it (or made it before attempts were committed)"
        gitutil.check_foreign(failed_out, str(failed_out))
        if gitutil.head(failed_out) != m.head:
            return "it holds changes made since bakery wrote it (new commits)"
        changed = _changed_files(failed_out, m.files)
        if changed:
            return f"it holds changes made since bakery wrote it ({changed[0]})"
    except BakeryError as e:
        return f"it cannot be checked ({e.message})"
    return "unchanged"


def refuse_to_discard_attempts(folder: Path, what: str) -> None:
    """Before folder (a scratch folder bakery made and remakes whole: a port's
    ``build/port/S-V/``) is removed: every attempt in it (``*.failed``) must be one
    bakery can prove unchanged, as ``apply --keep-failed`` proves it (failed_state:
    the same head, every recorded file as written, nothing else changed or added). An
    attempt the user edited, or a folder bakery did not make, is refused with one line
    naming it, before anything is removed. A folder that is a link is refused too
    (removing it whole would remove through the link)."""
    if not os.path.lexists(folder):
        return
    if os.path.islink(folder) or not folder.is_dir():
        raise BakeryError(f"{what} {folder}: not a folder bakery made; move it away")
    for p in sorted(folder.iterdir()):
        if not p.name.endswith(".failed"):
            continue
        state = failed_state(p)
        if state not in (None, "unchanged"):
            raise BakeryError(
                f"{p}: {state}; bakery will not remove it (refresh it into a port, or move "
                "it away, then run again)"
            )


def _changed_files(tree: Path, recorded: dict[str, str]) -> list[str]:
    """The files of an attempt that differ from what bakery wrote there: a recorded file
    with another hash (or gone), and any other file that differs from the head or is new."""
    changed = [rel for rel, sha in sorted(recorded.items()) if _sha256_of(tree, rel) != sha]
    against_head = gitutil.git(
        tree, "--no-optional-locks", "diff", "--name-only", "-z", "--no-renames", "HEAD", "--"
    )
    untracked = gitutil.git(
        tree, "--no-optional-locks", "ls-files", "-z", "--others", "--exclude-standard"
    )
    for rel in filter(None, (against_head + "\0" + untracked).split("\0")):
        if rel not in recorded and rel not in changed:
            changed.append(rel)
    return changed


def _sha256_of(tree: Path, rel: str) -> str | None:
    """The sha256 of a regular file under tree (None for anything else: a FIFO is never
    opened, a link never followed)."""
    path = paths.inside(tree, rel, f"{tree}: manifest files")
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _plan_over(
    out: Path,
    force: bool,
    series: Series,
    pristine: Pristine,
    fuzz: int,
    fallback: Fallback | None,
    confirm: Callable[[], None],
) -> Plan:
    """The plan, once out is known replaceable (staging.refuse_unless_replaceable)."""
    try:
        refuse_unless_replaceable(out, force)
    except LocalChanges:
        # a tree whose changes were refreshed into the diffs being baked holds nothing
        # that this bake loses: it is replaced without --force
        with muted():  # the plan again, to compare: narrated once
            pl = _plan_confirmed(series, pristine, fuzz, fallback, confirm)
        if not _equals_plan(out, pl, pristine):
            raise
        return pl
    return _plan_confirmed(series, pristine, fuzz, fallback, confirm)


def _equals_plan(out: Path, pl: Plan, pristine: Pristine) -> bool:
    """Every file changed in the baked tree at out (against its head) already holds what
    the plan writes there: its edits were refreshed into the diffs being baked."""
    try:
        manifest = baked_manifest(out)
        if not pl.report.ok or gitutil.head(out) != (manifest.head if manifest else None):
            return False  # new commits are the user's work
    except gitutil.GitError:
        return False
    final: dict[str, bytes | None] = {}
    for writes in pl.writes:
        final.update({rel: content for rel, (content, _mode) in writes.items()})
    for rel in _changed_files(out, {}):
        if rel.startswith(".bakery/"):
            continue
        if rel in final:
            want = final[rel]
        else:
            f = pristine.file(rel)
            want = f.read_bytes() if f.is_file() and not f.is_symlink() else None
        path = paths.inside(out, rel, f"--out {out}")
        got = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        if got != want:
            return False
    return True


def _check_out(out: Path, pristine: Pristine) -> None:
    """--out is outside the pristine tree, and its folder can be made and written."""
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


def _plan_confirmed(
    series: Series,
    pristine: Pristine,
    fuzz: int,
    fallback: Fallback | None,
    confirm: Callable[[], None],
) -> Plan:
    """plan(); where it fails, the cached trees are confirmed first: a changed cached
    tree (a file replaced by a link) is the cause, not the series, so CacheChanged wins
    and the entry is extracted again (commands.apply)."""
    try:
        return plan(series, pristine, fuzz=fuzz, fallback=fallback)
    except BakeryError:
        confirm()
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
) -> BakeReport:
    """Bake the series into out. Returns the report; out holds a tree only if it applied."""
    out = out.absolute()
    _check_out(out, pristine)
    clean_stale(out)
    base = fallback.base if fallback is not None else None

    def confirm() -> None:
        """The cached trees read (target, base) were unchanged (cache.CacheChanged if not)."""
        pristine.confirm()
        if base is not None:
            base.confirm()

    pl = _plan_over(out, force, series, pristine, fuzz, fallback, confirm)
    report = pl.report
    failed_out = out.with_name(out.name + ".failed")
    failed = failed_state(failed_out)

    if not report.ok:
        confirm()
        report.status = "conflict"
        report.proof = None
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
    staging = make_staging(out)
    try:
        _log.info(f"Writing {display_path(out)}", extra={"event": "write"})
        write_tree(pl, series, pristine, staging)
        confirm()  # before the tree takes its place
        report.status = "baked"
        report.out = display_path(out)
        report.proof = bake_proof(report)
        write_json(staging / MANIFEST, report.manifest())
        move_into_place(staging, out)
    except BaseException:
        _discard(staging)
        raise
    if failed == "unchanged":  # only an attempt bakery made and nobody touched
        with contextlib.suppress(OSError):
            remove_tree(failed_out)
    elif failed is not None:
        _log.info(f"kept {display_path(failed_out)}: {failed}", extra={"event": "detected"})
    return report
