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
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bakery import gitutil
from bakery.diffparse import Diff, FilePatch
from bakery.engine import apply_file
from bakery.errors import BakeryError, UnsafePathError
from bakery.merge import Fallback, diagnose
from bakery.report import MANIFEST, BakeReport, DiffResult, read_manifest, write_json
from bakery.series import Series, detect_layout
from bakery.sources import Pristine

#: Called with (event, detail) as the bake proceeds; the CLI renders these.
Events = Callable[[str, str], None]



@dataclass
class Plan:
    """The in-memory result of applying the series."""

    report: BakeReport
    #: Per diff, the files it writes: path -> (content or None to delete, mode).
    writes: list[dict[str, tuple[bytes | None, int | None]]] = field(default_factory=list)


class _Overlay:
    """The tree as the series has changed it so far: pristine files plus changes."""

    def __init__(self, pristine: Pristine) -> None:
        self.pristine = pristine
        self.state: dict[str, tuple[bytes | None, int | None]] = {}

    def read(self, diff: Diff, fp: FilePatch, rel: str) -> tuple[bytes | None, int | None]:
        if rel in self.state:
            return self.state[rel]
        path = _checked_path(self.pristine, diff, fp, rel)
        try:
            st = path.lstat()
        except FileNotFoundError:
            return None, None
        except OSError as e:
            raise UnsafePathError(diff.path, fp.diff_line, f"cannot read {rel}: {e.strerror}") \
                from None
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(diff.path, fp.diff_line, f"{rel} is not a regular file")
        return path.read_bytes(), stat.S_IMODE(st.st_mode)


def _checked_path(pristine: Pristine, diff: Diff, fp: FilePatch, rel: str) -> Path:
    """The file's path in the pristine tree, refusing any symlink on the way (as GNU patch
    and git apply do since their CVE fixes: a link could point outside the tree)."""
    full = pristine.file(rel)
    base = pristine.package_dir if pristine.package_dir is not None else pristine.tree
    parts = full.relative_to(base).parts
    cur = base
    for part in parts:
        cur = cur / part
        if cur.is_symlink():
            raise UnsafePathError(diff.path, fp.diff_line,
                                  f"{rel}: refusing to write through the symlink {cur.relative_to(base)}")
        if not cur.exists():
            break
    return full


def plan(series: Series, pristine: Pristine, *, fuzz: int = 0,
         fallback: Fallback | None = None, events: Events | None = None) -> Plan:
    """Apply the whole series in memory. Raises DiffError for bad diffs.

    ``fallback`` (merge.Fallback) merges and diagnoses files that do not apply cleanly and
    warns about upstream drift; without it, failed hunks are still diagnosed."""
    diffs = series.load_diffs()
    strip, root, detected = detect_layout(series, pristine.tree if pristine.package_dir is None
                                          else pristine.tree)
    if pristine.package_dir is not None and root == "":
        root = "vllm"
    for d in diffs:
        d.resolve_paths(strip, root)
    report = BakeReport(series.name, _display(series.path), version=pristine.version,
                        source=pristine.source, sha256=pristine.sha256,
                        port=_display(series.port) if series.port else None,
                        layout={"strip": strip, "root": root, "detected": detected})
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
            if fres.ok and (fres.content is not None or fres.deleted):
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
            shutil.rmtree(p, ignore_errors=True)


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
            raise BakeryError(f"--out {out}: the baked tree has local changes "
                              "(refresh them into a port, move the tree, or pass --force)")


def remove_tree(path: Path) -> None:
    """Remove a tree by renaming it out of the way first, so it is never seen half-deleted."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    trash = path.parent / f"{_staging_prefix(path)}old-{os.getpid()}-{os.urandom(3).hex()}"
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def copy_tree(src: Path, dst: Path, exclude: set[str] | None = None) -> None:
    """Copy src's entries into the existing folder dst: links stay links (no loop is ever
    followed), modes and times are kept, and copy-on-write is used where the filesystem
    has it."""
    names = [n for n in os.listdir(src) if n not in (exclude or set())]
    if not names:
        return
    if shutil.which("cp"):
        proc = subprocess.run(["cp", "-a", "--reflink=auto", "--no-preserve=ownership", "--",
                               *[str(src / n) for n in names], str(dst)],
                              capture_output=True, check=False)
        if proc.returncode == 0:
            return
        raise BakeryError(f"copying {src} failed: {proc.stderr.decode(errors='replace').strip()}")
    for n in names:  # pragma: no cover - systems without GNU cp
        s = src / n
        if s.is_dir() and not s.is_symlink():
            shutil.copytree(s, dst / n, symlinks=True)
        else:
            shutil.copy2(s, dst / n, follow_symlinks=False)


def _populate(pristine: Pristine, staging: Path) -> str:
    """Fill the staging folder with the pristine tree and its commit; returns the commit."""
    if pristine.repo:
        gitutil.git(staging, "clone", "--quiet", "--local", "--no-checkout",
                    str(pristine.tree), ".")
        gitutil.git(staging, "remote", "remove", "origin")
        copy_tree(pristine.tree, staging, exclude={".git"})
        gitutil.git(staging, "read-tree", "HEAD")
        return gitutil.head(staging)
    if pristine.package_dir is not None:
        (staging / "vllm").mkdir()
        copy_tree(pristine.package_dir, staging / "vllm", exclude={"__pycache__"})
    elif (pristine.tree / ".git").exists():
        listed = gitutil.git(pristine.tree, "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard")
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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     mode if mode is not None else 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(path, mode if mode is not None else 0o644)


def write_tree(pl: Plan, series: Series, pristine: Pristine, staging: Path,
               commits: bool = True) -> None:
    """Write the pristine tree and the planned changes into staging (with commits)."""
    report = pl.report
    report.pristine_commit = _populate(pristine, staging)
    for d, dres, writes in zip(series.load_diffs(), report.diffs, pl.writes, strict=True):
        _write_files(staging, writes)
        if commits:
            dres.commit = gitutil.commit_paths(
                staging, sorted(writes), f"{d.name}\n\nBakery-Diff-Sha256: {d.sha256}\n")
        for rel, (content, _) in writes.items():
            if content is None:
                report.files_sha256.pop(rel, None)
            else:
                report.files_sha256[rel] = hashlib.sha256(content).hexdigest()
    report.head = gitutil.head(staging)
    exclude = staging / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("/.bakery/\n")


def write_failed(pl: Plan, series: Series, pristine: Pristine, failed_out: Path) -> None:
    """The attempt, for a person to finish: applied hunks in place, the rest in .rej files
    (or as conflict markers where a three-way merge left them)."""
    remove_tree(failed_out)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(failed_out) + f"{os.getpid()}-",
                                    dir=failed_out.parent))
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
                        h.render() for h in f.failed_hunks)
                    with rej.open("a", encoding="latin-1") as fh:
                        fh.write(fp_text)
        write_json(staging / MANIFEST, {**report.manifest(), "status": "conflict"})
        os.replace(staging, failed_out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def bake(series: Series, pristine: Pristine, out: Path, *, fuzz: int = 0,
         keep_failed: bool = False, force: bool = False, fallback: Fallback | None = None,
         events: Events | None = None) -> BakeReport:
    """Bake the series into out. Returns the report; out holds a tree only if it applied."""
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(out)
    check_out(out, force)
    pl = plan(series, pristine, fuzz=fuzz, fallback=fallback, events=events)
    report = pl.report
    failed_out = out.with_name(out.name + ".failed")
    if not report.ok:
        report.status = "conflict"
        remove_tree(out)
        if keep_failed:
            write_failed(pl, series, pristine, failed_out)
            report.failed_out = _display(failed_out)
        return report
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out) + f"{os.getpid()}-",
                                    dir=out.parent))
    try:
        if events:
            events("write", f"Writing {_display(out)}")
        write_tree(pl, series, pristine, staging)
        report.status = "baked"
        report.out = _display(out)
        write_json(staging / MANIFEST, report.manifest())
        remove_tree(out)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with contextlib.suppress(OSError):
        remove_tree(failed_out)
    return report
