"""Copy a tree as fast as the machine allows: several ``cp -a`` at once.

Copying a 7,000-file vLLM tree is almost all of a warm bake, and one ``cp`` spends it in
system calls on one core. The tree is cut into parts of about equal file counts (whole
folders where they are small enough, the files of a folder otherwise), the folders above
the parts are made first, then one ``cp -a --parents`` per core copies its parts. Links stay
links (never followed), modes and times are kept, copy-on-write is used where the
filesystem has it. An interruption kills every cp before it goes on (see gitutil.run_all).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bakery import gitutil
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


def _count(path: str) -> int:
    """Entries under a folder (d_type only: no stat)."""
    n = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    n += 1
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue  # cp reports it
    return n


def _parts(src: Path, names: list[str], share: int) -> tuple[list[str], list[tuple[int, str]]]:
    """(folders to make first, (entries, path) parts to copy), paths relative to src."""
    folders: list[str] = []
    parts: list[tuple[int, str]] = []
    todo = [(n, os.path.join(src, n)) for n in names]
    while todo:
        rel, full = todo.pop()
        if os.path.isdir(full) and not os.path.islink(full):
            n = _count(full) + 1
            if n > share:
                folders.append(rel)
                with os.scandir(full) as it:
                    todo += [(f"{rel}/{e.name}", e.path) for e in it]
                continue
            parts.append((n, rel))
        else:
            parts.append((1, rel))
    return sorted(folders), parts


def copy_tree(src: Path, dst: Path, exclude: set[str] | None = None,
              jobs: int | None = None) -> None:
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
    total = sum(_count(str(src / n)) + 1 if (src / n).is_dir() else 1 for n in names) \
        if jobs > 1 else 0
    if jobs == 1 or total < _SMALL:
        cmds = [[*cp, "--", *[str(src / n) for n in names], str(dst)]]
    else:
        folders, parts = _parts(src, names, max(total // (jobs * _PARTS_PER_JOB), 1))
        for rel in folders:  # made here, so that no two cp race to make one
            os.mkdir(dst / rel)
        groups: list[list[str]] = [[] for _ in range(jobs)]
        load = [0] * jobs
        for size, rel in sorted(parts, reverse=True):  # largest first, to the least loaded
            i = load.index(min(load))
            groups[i].append(rel)
            load[i] += size
        cmds = [[*cp, "--parents", "--", *g, str(dst)] for g in groups if g]
    for proc in gitutil.run_all(cmds, cwd=src):
        if proc.returncode != 0:
            raise BakeryError(f"copying {src} failed: "
                              f"{proc.stderr.decode(errors='replace').strip()}")
    if len(cmds) > 1:
        for rel in reversed(folders):  # the folders bakery made: their modes and times
            shutil.copystat(src / rel, dst / rel, follow_symlinks=False)
