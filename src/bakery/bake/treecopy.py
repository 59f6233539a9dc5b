"""Copy a tree as fast as the machine allows: several ``cp -a`` at once.

Copying a 7,000-file vLLM tree is almost all of a warm bake, and one ``cp`` spends it in
system calls on one core. The tree is cut into parts of about equal file counts (whole
folders where they are small enough, the files of a folder otherwise), the folders above
the parts are made first, then one ``cp -a --parents`` per core copies its parts. Links stay
links (never followed), modes and times are kept, copy-on-write is used where the
filesystem has it. An interruption kills every cp before it goes on (see bakery.process.run_all).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bakery import process
from bakery.errors import BakeryError

#: A part is at most 1/_PARTS_PER_JOB of a job's share of the files.
_PARTS_PER_JOB = 4
#: Below this many entries one cp is as fast (starting processes costs more).
_SMALL = 2000
#: cp processes per copy: one per core, unless set_jobs says otherwise.
_jobs: Callable[[], int] | None = None


def set_jobs(jobs: int | Callable[[], int]) -> None:
    """The cp processes a copy may use, or a function that says it when the copy starts
    (a matrix worker shares the cores with the other workers still baking)."""
    global _jobs
    _jobs = jobs if callable(jobs) else (lambda: max(jobs, 1))


class _Walk:
    """One walk of the tree (d_type only: no stat): the count of entries under each
    folder."""

    def __init__(self, src: Path, names: list[str]) -> None:
        self.src = src
        self.names = names
        self.size: dict[str, int] = {}
        subdirs: dict[str, list[str]] = {}
        flat: dict[str, int] = {}
        stack = [n for n in names if (src / n).is_dir() and not (src / n).is_symlink()]
        order = []
        while stack:
            rel = stack.pop()
            order.append(rel)
            subs: list[str] = []
            n = 0
            try:
                with os.scandir(src / rel) as it:
                    for e in it:
                        n += 1
                        if e.is_dir(follow_symlinks=False):
                            subs.append(f"{rel}/{e.name}")
            except OSError:
                pass  # cp reports it
            subdirs[rel], flat[rel] = subs, n
            stack += subs
        for rel in reversed(order):  # a folder after the folders in it
            self.size[rel] = 1 + flat[rel] + sum(self.size[d] - 1 for d in subdirs[rel])

    def total(self) -> int:
        return sum(self.size.get(n, 1) for n in self.names)

    def parts(self, share: int) -> tuple[list[str], list[tuple[int, str]]]:
        """(folders to make first, (entries, path) parts to copy): a folder larger than
        share is made, and its entries become parts (or are cut again)."""
        folders: list[str] = []
        parts: list[tuple[int, str]] = []
        todo = list(self.names)
        while todo:
            rel = todo.pop()
            n = self.size.get(rel, 1)
            if n > share and rel in self.size:
                folders.append(rel)
                todo += [f"{rel}/{name}" for name in os.listdir(self.src / rel)]
            else:
                parts.append((n, rel))
        return sorted(folders), parts


def copy_tree(
    src: Path, dst: Path, exclude: set[str] | None = None, jobs: int | None = None
) -> None:
    """Copy src's entries (but those named in exclude) into the existing folder dst."""
    names = sorted(n for n in os.listdir(src) if n not in (exclude or set()))
    if not names:
        return
    if not shutil.which("cp"):  # pragma: no cover - systems without GNU cp
        for n in names:
            s = src / n
            if s.is_dir() and not s.is_symlink():
                shutil.copytree(s, dst / n, symlinks=True)
            else:
                shutil.copy2(s, dst / n, follow_symlinks=False)
        return
    cp = ["cp", "-a", "--reflink=auto", "--no-preserve=ownership"]
    jobs = jobs or (_jobs() if _jobs is not None else min(os.cpu_count() or 1, 8))
    walk = _Walk(src, names) if jobs > 1 else None
    total = walk.total() if walk is not None else 0
    if walk is None or total < _SMALL:
        cmds = [[*cp, "--", *[str(src / n) for n in names], str(dst)]]
    else:
        folders, parts = walk.parts(max(total // (jobs * _PARTS_PER_JOB), 1))
        for rel in folders:  # made here, so that no two cp race to make one
            os.mkdir(dst / rel)
        groups: list[list[str]] = [[] for _ in range(jobs)]
        load = [0] * jobs
        for size, rel in sorted(parts, reverse=True):  # largest first, to the least loaded
            i = load.index(min(load))
            groups[i].append(rel)
            load[i] += size
        cmds = [[*cp, "--parents", "--", *g, str(dst)] for g in groups if g]
    for proc in process.run_all(cmds, cwd=src):
        if proc.returncode != 0:
            raise BakeryError(
                f"copying {src} failed: {proc.stderr.decode(errors='replace').strip()}"
            )
    if len(cmds) > 1:
        for rel in reversed(folders):  # the folders bakery made: their modes and times
            shutil.copystat(src / rel, dst / rel, follow_symlinks=False)
