"""A baked tree's repository, assembled: objects linked from the cache, a local clone where
the cache's repository has another form, and the series' commits written by one
``git fast-import`` from the planned contents."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bakery.errors import BakeryError
from bakery.git import cmd
from bakery.git.conflicts import stage
from bakery.git.index import restat_index
from bakery.safety import cachepolicy

#: A new repository's config, as git init writes it on Linux.
NEW_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    "\tlogallrefupdates = true\n"
)


def write_new_config(git_dir: Path) -> None:
    """Give a repository bakery made the one configuration it ever has (NEW_CONFIG),
    whatever the installed git's init wrote: intact() then compares it byte for byte."""
    (git_dir / "config").write_text(NEW_CONFIG)


#: What would send git from a cache entry's .git to another repository or program.
_FOREIGN = (
    "config.worktree",
    "commondir",
    "gitdir",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/grafts",
    "worktrees",
    "modules",
)


def intact(git_dir: Path) -> bool:
    """A repository bakery made is still only what it made, as git will read it: a real
    folder (not a link, not a ``gitdir:`` file), its config NEW_CONFIG (a regular file,
    byte for byte: no include), no hook but git's samples, nothing that sends git to
    another repository (``commondir``, alternates, a worktree config), no link where git
    reads. A cache entry that fails this was changed by someone else (a poisoned CI
    cache) and is built again."""
    try:
        if not cachepolicy.is_real_dir(git_dir):
            return False
        if cachepolicy.read_bytes(git_dir / "config", 1 << 16, "config") != NEW_CONFIG.encode():
            return False
        if cachepolicy.regular(git_dir / "HEAD") is None:
            return False
        if not real_store(git_dir):
            return False
        hooks = git_dir / "hooks"
        if os.path.lexists(hooks) and (
            not cachepolicy.is_real_dir(hooks)
            or any(not p.name.endswith(".sample") for p in hooks.iterdir())
        ):
            return False
    except (OSError, cachepolicy.CacheRefused):
        return False
    return not any(os.path.lexists(git_dir / n) for n in _FOREIGN)


def real_store(git_dir: Path) -> bool:
    """objects/ and refs/ are real folders holding only real folders and regular files, all
    the way down: a link anywhere in them (objects/pack, refs/heads) makes git read, and a
    fetch write, another store. One lstat per entry (os.walk never follows a link): a
    cache entry's loose objects, some thousands, take milliseconds."""
    for sub in ("objects", "refs"):
        top = git_dir / sub
        if not cachepolicy.real_dir(git_dir, top):
            return False
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames:
                if not cachepolicy.is_real_dir(Path(dirpath, name)):
                    return False
            for name in filenames:
                if cachepolicy.regular(Path(dirpath, name)) is None:
                    return False
    return True


def link_objects(src: Path, dst: Path) -> None:
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


def clone_local(source: Path, staging: Path) -> str:
    """Give staging the history of the repository at source (a plain-path clone: objects
    hard-linked, copied across file systems), its index restatted for staging's files."""
    side = Path(tempfile.mkdtemp(prefix=".bakery-clone-", dir=staging))
    try:
        # a plain path (not --local): objects are hard-linked, copied across file systems
        cmd.git(side, "clone", "--quiet", "--no-checkout", str(source), ".")
        cmd.git(side, "remote", "remove", "origin")
        os.rename(side / ".git", staging / ".git")
    finally:
        shutil.rmtree(side, ignore_errors=True)
    if not restat_index(staging, source / ".git" / "index"):
        cmd.git(staging, "read-tree", "HEAD")
    return cmd.head(staging)


def _fast_import_path(rel: str) -> bytes:
    path = os.fsencode(rel)
    if b"\n" in path or path.startswith(b'"'):
        return (
            b'"' + path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'
        )
    return path


def commit_series(
    tree: Path,
    parent: str,
    messages: list[str],
    writes: list[dict[str, tuple[bytes | None, int | None]]],
    authors: list[str | None] | None = None,
) -> list[str]:
    """One commit per diff, all written by one git fast-import from the planned contents
    (it reads neither the index nor the work tree, so a long series costs no more reads of
    the tree), then the index brought to the last commit for the paths the series wrote.
    The commits are those `git add` + `git commit` would make. An author ("Name <email>
    seconds +zone", from a format-patch diff) replaces bakery's fixed one for its commit;
    the committer stays fixed. Returns their ids."""
    head = (tree / ".git" / "HEAD").read_text().strip()
    if not head.startswith("ref: refs/heads/"):
        raise BakeryError(f"{tree}: HEAD is not a branch")
    ref = head[5:].encode()
    committer = cmd.identity("COMMITTER")
    stream = []
    for i, (message, changes) in enumerate(zip(messages, writes, strict=True), 1):
        author = (authors[i - 1] if authors else None) or None
        who = b"author %s\ncommitter %s\n" % (
            author.encode() if author else cmd.identity("AUTHOR"),
            committer,
        )
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
    ids = cmd.git(tree, "fast-import", "--quiet", "--done", input=b"".join(stream)).split()
    stage(tree, sorted({rel for changes in writes for rel in changes}))
    return ids
