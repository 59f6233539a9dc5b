"""Tree writes that are never seen half-done: staging folders beside ``--out`` renamed into
place, stale ones from killed bakes removed, ``--out`` replaced only when it is an unchanged
earlier bake, and the ``--keep-failed`` attempt."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from bakery.errors import BakeryError, UnsafePathError
from bakery.git import cmd as gitutil
from bakery.model import manifest as manifests
from bakery.model.manifest import Manifest
from bakery.sources.cache import discard as _discard


def staging_prefix(out: Path) -> str:
    return f".{out.name}.bakery-"


def umask() -> int:
    """The process's umask, read without changing it where Linux tells it (another thread
    may be creating files); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def make_staging(out: Path) -> Path:
    """A new staging folder beside out, with the mode a folder made by mkdir gets (the
    umask's), not mkdtemp's 0700: the baked tree takes this folder's place."""
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(out) + f"{os.getpid()}-", dir=out.parent))
    os.chmod(staging, 0o777 & ~umask())
    return staging


def clean_stale(out: Path) -> None:
    """Remove staging folders left by bakes that were killed (SIGKILL leaves them)."""
    parent = out.parent
    if not parent.is_dir():
        return
    for p in parent.glob(staging_prefix(out) + "*"):
        m = re.match(re.escape(staging_prefix(out)) + r"(?:old-)?(\d+)-", p.name)
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


class LocalChanges(BakeryError):
    """--out is a baked tree with changes since (bake.tree lets it go only when the
    changes are exactly what the new bake writes: a tree refreshed into the series)."""


def baked_manifest(out: Path) -> Manifest | None:
    """The manifest of the baked tree at out; None when out is no tree bakery baked (no
    manifest, or one that is not what bakery writes: such a folder is not replaced)."""
    try:
        return manifests.read(out)
    except manifests.ManifestError:
        return None


def refuse_unless_replaceable(out: Path, force: bool = False) -> None:
    """Refuse to replace anything at --out but an unchanged earlier bake."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise BakeryError(f"--out {out}: exists and is not a folder")
    manifest = baked_manifest(out)
    if manifest is None:
        if any(out.iterdir()):
            raise BakeryError(f"--out {out}: exists and is not a baked tree; choose another --out")
        return
    if not force and (out / ".git").exists():
        gitutil.check_foreign(out, f"--out {out}")  # a tree bakery made, since changed
        try:
            changed = gitutil.dirty(out)
            moved = gitutil.head(out) != manifest.head
        except gitutil.GitError:
            changed, moved = [], True
        if changed or moved:
            raise LocalChanges(
                f"--out {out}: the baked tree has local changes "
                "(refresh them into a port, move the tree, or pass --force)"
            )


def move_into_place(staging: Path, out: Path) -> None:
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
        trash = path.parent / f"{staging_prefix(path)}old-{os.getpid()}-{os.urandom(3).hex()}"
        os.replace(path, trash)
    except FileNotFoundError:
        return  # removed meanwhile, by another bake of the same --out
    try:
        _discard(trash)
    except BaseException:  # interrupted: still leave nothing beside the tree
        _discard(trash)
        raise


def write_files(tree: Path, writes: dict[str, tuple[bytes | None, int | None]]) -> None:
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
            # a file the series creates gets the umask's mode, as patch and git give it
            mode = mode if mode is not None else 0o666 & ~umask()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
            os.chmod(path, mode)
        except OSError as e:  # the plan should have refused it; never a traceback
            raise BakeryError(f"cannot write {rel}: {e.strerror}") from None


def display_path(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
