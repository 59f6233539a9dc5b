"""Baking: apply a series to a pristine tree, first in memory, then into a new tree.

The whole series is applied in memory against the pristine files it touches before a
single byte is written, so ``check`` and a conflicting ``apply`` never copy the tree.
A bake that applies is built in a staging folder beside ``--out`` and renamed into place;
anything else (a conflict, an error, SIGINT/SIGTERM) removes the staging folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.merge import Fallback, diagnose
from bakery.bake.report import MANIFEST, BakeReport, DiffResult, read_manifest, write_json
from bakery.bake.treecopy import copy_tree
from bakery.errors import BakeryError, UnsafePathError
from bakery.git import cmd as gitutil
from bakery.patch.engine import apply_file
from bakery.patch.parse import Diff, FilePatch
from bakery.patch.series import Series, detect_layout
from bakery.sources.cache import discard as _discard
from bakery.sources.resolve import Pristine

#: Called with (event, detail) as the bake proceeds; the CLI renders these.
Events = Callable[[str, str], None]


@dataclass
class Plan:
    """The in-memory result of applying the series."""

    report: BakeReport
    #: Per diff, the files it writes: path -> (content or None to delete, mode).
    writes: list[dict[str, tuple[bytes | None, int | None]]] = field(default_factory=list)


class _State(dict[str, tuple[bytes | None, int | None]]):
    """Path -> (content or None when deleted, mode), counting the files each folder holds."""

    def __init__(self) -> None:
        super().__init__()
        self.filled: dict[str, int] = {}

    def __setitem__(self, rel: str, value: tuple[bytes | None, int | None]) -> None:
        old = self.get(rel)
        was, now = old is not None and old[0] is not None, value[0] is not None
        if was != now:
            parts = rel.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                self.filled[folder] = self.filled.get(folder, 0) + (1 if now else -1)
        super().__setitem__(rel, value)


class _Overlay:
    """The tree as the series has changed it so far: pristine files plus changes."""

    def __init__(self, pristine: Pristine) -> None:
        self.pristine = pristine
        self.state = _State()

    def read(self, diff: Diff, fp: FilePatch, rel: str) -> tuple[bytes | None, int | None]:
        if rel in self.state:
            return self.state[rel]
        self._check_nesting(diff, fp, rel)
        path = _checked_path(self.pristine, diff, fp, rel)
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(diff.path, fp.diff_line, f"{rel} is not a regular file")
            return path.read_bytes(), stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            return None, None
        except OSError as e:
            raise UnsafePathError(
                diff.path, fp.diff_line, f"cannot read {rel}: {e.strerror}"
            ) from None

    def _check_nesting(self, diff: Diff, fp: FilePatch, rel: str) -> None:
        """Refuse a file inside a file the series created, or over a folder it filled."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            above = self.state.get("/".join(parts[:i]))
            if above is not None and above[0] is not None:
                raise UnsafePathError(
                    diff.path, fp.diff_line, f"{rel}: {'/'.join(parts[:i])} is a file, not a folder"
                )
        if self.state.filled.get(rel, 0) > 0:
            raise UnsafePathError(
                diff.path, fp.diff_line, f"{rel}: is a folder (the series created files in it)"
            )


def _checked_path(pristine: Pristine, diff: Diff, fp: FilePatch, rel: str) -> Path:
    """The file's path in the pristine tree, refusing any symlink on the way (as GNU patch
    and git apply do since their CVE fixes: a link could point outside the tree)."""
    full = pristine.file(rel)
    base = pristine.package_dir if pristine.package_dir is not None else pristine.tree
    parts = full.relative_to(base).parts
    cur = base
    for part in parts:
        cur = cur / part
        try:
            st = cur.lstat()
        except FileNotFoundError:
            break
        except OSError as e:  # a name too long, a file used as a folder, a loop
            raise UnsafePathError(
                diff.path, fp.diff_line, f"cannot read {rel}: {e.strerror}"
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(
                diff.path,
                fp.diff_line,
                f"{rel}: refusing to write through the symlink {cur.relative_to(base)}",
            )
    return full


def plan(
    series: Series,
    pristine: Pristine,
    *,
    fuzz: int = 0,
    fallback: Fallback | None = None,
    events: Events | None = None,
) -> Plan:
    """Apply the whole series in memory. Raises DiffError for bad diffs.

    ``fallback`` (merge.Fallback) merges and diagnoses files that do not apply cleanly and
    warns about upstream drift; without it, failed hunks are still diagnosed."""
    diffs = series.load_diffs()
    strip, root, detected = detect_layout(
        series, pristine.tree if pristine.package_dir is None else pristine.tree
    )
    if pristine.package_dir is not None and root == "":
        root = "vllm"
    for d in diffs:
        d.resolve_paths(strip, root)
    report = BakeReport(
        series.name,
        _display(series.path),
        version=pristine.version,
        source=pristine.source,
        sha256=pristine.sha256,
        port=_display(series.port) if series.port else None,
        layout={"strip": strip, "root": root, "detected": detected},
    )
    if detected and events:
        events("detected", f"strip {strip}, root {root or '.'!r} (no series.toml setting)")
    overlay = _Overlay(pristine)
    result = Plan(report)
    for i, d in enumerate(diffs, 1):
        if events:
            events("diff", f"Applying {d.name} ({i}/{len(diffs)})")
        dres = DiffResult(d.name, d.sha256)
        writes: dict[str, tuple[bytes | None, int | None]] = {}
        for fp in d.files:
            old, mode = overlay.read(d, fp, fp.path)
            fres = apply_file(fp, old, fuzz, mode)
            if not fres.ok:
                if fallback is not None:
                    fres = fallback.resolve(d, fp, old, fres)
                else:
                    diagnose(fres, fp, pristine, None)
            dres.files.append(fres)
            # A file with failed hunks carries the hunks that did apply forward, as GNU
            # patch leaves them: later diffs see them, and --keep-failed writes them.
            if fres.content is not None or fres.deleted:
                value = (None if fres.deleted else fres.content, fres.mode)
                if (old, mode) != value:
                    writes[fp.path] = value
                    overlay.state[fp.path] = value
        if fallback is not None and dres.ok:
            dres.warnings = fallback.warnings(d)
        report.diffs.append(dres)
        result.writes.append(writes)
    report.status = "checked" if report.ok else "conflict"
    return result


def _display(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- writing trees ---------------------------------------------------------------------------


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.bakery-"


def _clean_stale(out: Path) -> None:
    """Remove staging folders left by bakes that were killed (SIGKILL leaves them)."""
    parent = out.parent
    if not parent.is_dir():
        return
    for p in parent.glob(_staging_prefix(out) + "*"):
        m = re.match(re.escape(_staging_prefix(out)) + r"(?:old-)?(\d+)-", p.name)
        if not m:
            continue
        pid = int(m.group(1))
        alive = True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            alive = False
        except PermissionError:
            pass
        if not alive or pid == os.getpid():
            # A child of the killed bake (cp, git) may still be writing there: a new name
            # stops cp's writes by path; what is written meanwhile, _discard waits out.
            gone = p if p.name.endswith("-gone") else p.with_name(p.name + "-gone")
            try:
                os.replace(p, gone)
            except OSError:
                continue  # another bake is cleaning it
            _discard(gone)


def check_out(out: Path, force: bool = False) -> None:
    """Refuse to replace anything at --out but an unchanged earlier bake."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise BakeryError(f"--out {out}: exists and is not a folder")
    if read_manifest(out) is None:
        if any(out.iterdir()):
            raise BakeryError(f"--out {out}: exists and is not a baked tree; choose another --out")
        return
    if not force and (out / ".git").exists():
        manifest = read_manifest(out) or {}
        try:
            changed = gitutil.dirty(out)
            moved = gitutil.head(out) != manifest.get("head")
        except gitutil.GitError:
            changed, moved = [], True
        if changed or moved:
            raise BakeryError(
                f"--out {out}: the baked tree has local changes "
                "(refresh them into a port, move the tree, or pass --force)"
            )


def _move_into_place(staging: Path, out: Path) -> None:
    """Replace out with staging. Another bake of the same --out may put its tree there
    between the removal and the rename: remove that one too (the last bake wins; each is
    complete)."""
    for attempt in range(20):
        remove_tree(out)
        try:
            os.replace(staging, out)
            return
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and attempt < 19:
                continue
            raise BakeryError(
                f"--out {out}: cannot move the baked tree into place: {e.strerror}"
            ) from None


def remove_tree(path: Path) -> None:
    """Remove a tree by renaming it out of the way first, so it is never seen half-deleted."""
    if not path.exists() and not path.is_symlink():
        return
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
            return
        trash = path.parent / f"{_staging_prefix(path)}old-{os.getpid()}-{os.urandom(3).hex()}"
        os.replace(path, trash)
    except FileNotFoundError:
        return  # removed meanwhile, by another bake of the same --out
    try:
        _discard(trash)
    except BaseException:  # interrupted: still leave nothing beside the tree
        _discard(trash)
        raise


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
        return _clone_with_git(pristine, staging)
    ref, commit = head
    dst = staging / ".git"
    _link_tree(src / "objects", dst / "objects")
    for sub in ("refs/heads", "refs/tags", "info"):
        (dst / sub).mkdir(parents=True, exist_ok=True)
    (dst / ref).parent.mkdir(parents=True, exist_ok=True)
    (dst / ref).write_text(commit + "\n")
    (dst / "HEAD").write_text(f"ref: {ref}\n")
    (dst / "config").write_text(_CONFIG)
    if not _restat_index(staging, src / "index"):
        gitutil.git(staging, "read-tree", "HEAD")
    return commit


#: A new repository's config, as git init writes it on Linux.
_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    "\tlogallrefupdates = true\n"
)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file under src into dst (git never changes an object file in
    place; git clone does the same), copying where a link cannot be made."""
    for root, _dirs, files in os.walk(src):
        here = dst / os.path.relpath(root, src)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(os.path.join(root, name), here / name)
            except OSError:  # another file system, or links not allowed
                shutil.copy2(os.path.join(root, name), here / name)


def _clone_with_git(pristine: Pristine, staging: Path) -> str:
    side = Path(tempfile.mkdtemp(prefix=".bakery-clone-", dir=staging))
    try:
        # a plain path (not --local): objects are hard-linked, copied across file systems
        gitutil.git(side, "clone", "--quiet", "--no-checkout", str(pristine.tree), ".")
        gitutil.git(side, "remote", "remove", "origin")
        os.rename(side / ".git", staging / ".git")
    finally:
        shutil.rmtree(side, ignore_errors=True)
    if not _restat_index(staging, pristine.tree / ".git" / "index"):
        gitutil.git(staging, "read-tree", "HEAD")
    return gitutil.head(staging)


_STAT = struct.Struct(">10I")  # an index entry's ctime s/ns, mtime s/ns, dev, ino, mode, uid,
#                                gid, size; then the object id (20), flags (2), the path


def _restat_index(tree: Path, source: Path) -> bool:
    """Write tree's .git/index as a copy of source (the cached repository's index, which git
    keeps true to the cached files) with the stat data of tree's copies. A copy is trusted
    only where its type, size and mtime are those source recorded (cp -a keeps mtimes);
    any other keeps no stat data, so git reads it. False where the index is in a form this
    does not handle (not version 2 or 3, conflicts, a split index): use read-tree then."""
    try:
        data = bytearray(source.read_bytes())
    except OSError:
        return False
    if len(data) < 32 or data[:4] != b"DIRC":
        return False
    version, count = struct.unpack_from(">II", data, 4)
    end = len(data) - 20
    trailer = bytes(data[end:])
    if version not in (2, 3) or trailer not in (bytes(20), hashlib.sha1(data[:end]).digest()):
        return False
    base = os.fsencode(tree) + b"/"
    off = 12
    for _ in range(count):
        fields = _STAT.unpack_from(data, off)
        mode, size = fields[6], fields[9]
        flags = int.from_bytes(data[off + 60 : off + 62], "big")
        if flags & 0x3000 or (flags & 0x4000 and version < 3):
            return False
        name = off + 62 + (2 if flags & 0x4000 else 0)
        nul = data.index(0, name)
        try:
            st = os.lstat(base + bytes(data[name:nul]))
        except OSError:
            st = None
        if (
            st is not None
            and stat.S_IFMT(st.st_mode) == stat.S_IFMT(mode)
            and st.st_size & 0xFFFFFFFF == size
            and st.st_mtime_ns // 10**9 == fields[2]
            and fields[3] in (0, st.st_mtime_ns % 10**9)
        ):
            ctime = divmod(st.st_ctime_ns, 10**9)
            _STAT.pack_into(
                data,
                off,
                ctime[0] & 0xFFFFFFFF,
                ctime[1],
                fields[2],
                st.st_mtime_ns % 10**9,
                st.st_dev & 0xFFFFFFFF,
                st.st_ino & 0xFFFFFFFF,
                mode,
                st.st_uid & 0xFFFFFFFF,
                st.st_gid & 0xFFFFFFFF,
                size,
            )
        elif stat.S_IFMT(mode) != 0o160000:  # a submodule's entry has no file to stat
            _STAT.pack_into(data, off, 0, 0, 0, 0, 0, 0, mode, 0, 0, 0)
        off = (nul + 8 - off) // 8 * 8 + off
    while off < end:  # extensions: a split index points at another file
        if data[off : off + 4] == b"link":
            return False
        off += 8 + int.from_bytes(data[off + 4 : off + 8], "big")
    if trailer != bytes(20):
        data[end:] = hashlib.sha1(data[:end]).digest()
    index = tree / ".git" / "index"
    tmp = index.with_name("index.bakery-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, index)
    return True


def _write_files(tree: Path, writes: dict[str, tuple[bytes | None, int | None]]) -> None:
    for rel, (content, mode) in writes.items():
        path = tree / rel
        cur = tree
        for part in Path(rel).parts[:-1]:
            cur = cur / part
            if cur.is_symlink():
                raise UnsafePathError(rel, None, f"refusing to write through the symlink {part}")
        if path.is_symlink() or path.exists():
            path.unlink()  # never write through a link shared with the cache
        if content is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(
                path,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                mode if mode is not None else 0o644,
            )
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
            os.chmod(path, mode if mode is not None else 0o644)
        except OSError as e:  # the plan should have refused it; never a traceback
            raise BakeryError(f"cannot write {rel}: {e.strerror}") from None


def write_tree(
    pl: Plan, series: Series, pristine: Pristine, staging: Path, commits: bool = True
) -> None:
    """Write the pristine tree and the planned changes into staging (with commits)."""
    report = pl.report
    report.pristine_commit = _populate(pristine, staging)
    for writes in pl.writes:
        _write_files(staging, writes)
        for rel, (content, _) in writes.items():
            if content is None:
                report.files_sha256.pop(rel, None)
            else:
                report.files_sha256[rel] = hashlib.sha256(content).hexdigest()
    report.head = report.pristine_commit
    if commits:
        messages = [f"{d.name}\n\nBakery-Diff-Sha256: {d.sha256}\n" for d in series.load_diffs()]
        ids = _commit_series(staging, report.pristine_commit, messages, pl.writes)
        for dres, commit in zip(report.diffs, ids, strict=True):
            dres.commit = commit
        report.head = ids[-1] if ids else report.head
    exclude = staging / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("/.bakery/\n")


def _fast_import_path(rel: str) -> bytes:
    path = os.fsencode(rel)
    if b"\n" in path or path.startswith(b'"'):
        return (
            b'"' + path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'
        )
    return path


def _commit_series(
    tree: Path,
    parent: str,
    messages: list[str],
    writes: list[dict[str, tuple[bytes | None, int | None]]],
) -> list[str]:
    """One commit per diff, all written by one git fast-import from the planned contents
    (it reads neither the index nor the work tree, so a long series costs no more reads of
    the tree), then the index brought to the last commit for the paths the series wrote.
    The commits are those `git add` + `git commit` would make. Returns their ids."""
    head = (tree / ".git" / "HEAD").read_text().strip()
    if not head.startswith("ref: refs/heads/"):
        raise BakeryError(f"{tree}: HEAD is not a branch")
    ref = head[5:].encode()
    who = b"author %s\ncommitter %s\n" % (gitutil.identity("AUTHOR"), gitutil.identity("COMMITTER"))
    stream = []
    for i, (message, changes) in enumerate(zip(messages, writes, strict=True), 1):
        msg = message.encode()
        stream += [b"commit %s\nmark :%d\n%sdata %d\n" % (ref, i, who, len(msg)), msg, b"\n"]
        if i == 1:
            stream.append(b"from %s\n" % parent.encode())
        for rel, (content, mode) in sorted(changes.items()):
            if content is None:
                stream.append(b"D %s\n" % _fast_import_path(rel))
            else:
                kind = b"100755" if (mode or 0) & 0o100 else b"100644"
                stream += [
                    b"M %s inline %s\ndata %d\n" % (kind, _fast_import_path(rel), len(content)),
                    content,
                    b"\n",
                ]
    stream += [b"get-mark :%d\n" % i for i in range(1, len(messages) + 1)]
    stream.append(b"done\n")
    ids = gitutil.git(tree, "fast-import", "--quiet", "--done", input=b"".join(stream)).split()
    paths = sorted({rel for changes in writes for rel in changes})
    if paths:
        gitutil.git(
            tree,
            "update-index",
            "--add",
            "--remove",
            "-z",
            "--stdin",
            input=b"".join(os.fsencode(p) + b"\0" for p in paths),
        )
    return ids


def write_failed(pl: Plan, series: Series, pristine: Pristine, failed_out: Path) -> None:
    """The attempt, for a person to finish: applied hunks in place, the rest in .rej files
    (or as conflict markers where a three-way merge left them)."""
    remove_tree(failed_out)
    staging = Path(
        tempfile.mkdtemp(
            prefix=_staging_prefix(failed_out) + f"{os.getpid()}-", dir=failed_out.parent
        )
    )
    try:
        report = pl.report
        report.pristine_commit = _populate(pristine, staging)
        for dres, writes in zip(report.diffs, pl.writes, strict=True):
            _write_files(staging, writes)
            for f in dres.files:
                if f.ok:
                    continue
                if f.conflict is not None:
                    _write_files(staging, {f.path: (f.conflict, f.mode)})
                elif f.failed_hunks:
                    rej = staging / (f.path + ".rej")
                    rej.parent.mkdir(parents=True, exist_ok=True)
                    fp_text = f"--- {f.path}\n+++ {f.path}\n" + "".join(
                        h.render() for h in f.failed_hunks
                    )
                    with rej.open("a", encoding="latin-1") as fh:
                        fh.write(fp_text)
        write_json(staging / MANIFEST, {**report.manifest(), "status": "conflict"})
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
    _clean_stale(out)
    check_out(out, force)
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
            report.failed_out = _display(failed_out)
        return report
    staging = Path(
        tempfile.mkdtemp(prefix=_staging_prefix(out) + f"{os.getpid()}-", dir=out.parent)
    )
    try:
        if events:
            events("write", f"Writing {_display(out)}")
        write_tree(pl, series, pristine, staging)
        confirm()  # before the tree takes its place
        report.status = "baked"
        report.out = _display(out)
        write_json(staging / MANIFEST, report.manifest())
        _move_into_place(staging, out)
    except BaseException:
        _discard(staging)
        raise
    with contextlib.suppress(OSError):
        remove_tree(failed_out)
    return report
