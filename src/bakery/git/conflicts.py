"""Conflicts recorded the way git records them: unmerged entries in the index.

A path with a conflict has no stage-0 entry but up to three others: 1 the common ancestor
(base), 2 ours (the tree before the diff), 3 theirs (the diff's version). ``git status``
shows it as ``UU``, ``git diff`` shows a combined diff, ``git mergetool`` and editors'
merge views find the three sides, and ``git add`` after the resolution clears them, as
after a ``git am -3`` that stopped. The blobs are written by ``git hash-object -w`` and
the entries by ``git update-index --index-info``: git's own formats, never bakery's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bakery.git import cmd

_ZERO = "0" * 40


@dataclass(frozen=True)
class Conflict:
    path: str
    base: bytes | None
    ours: bytes | None
    theirs: bytes | None
    executable: bool = False


def _blob(tree: Path, content: bytes) -> str:
    return cmd.git(tree, "hash-object", "-w", "--stdin", input=content).strip()


def record(tree: Path, conflicts: list[Conflict]) -> None:
    """Replace each path's index entry with its unmerged stages."""
    if not conflicts:
        return
    lines = []
    for c in conflicts:
        mode = "100755" if c.executable else "100644"
        path = os.fsdecode(os.fsencode(c.path))
        lines.append(f"0 {_ZERO}\t{path}")  # drop the stage-0 entry
        for stage, content in ((1, c.base), (2, c.ours), (3, c.theirs)):
            if content is not None:
                lines.append(f"{mode} {_blob(tree, content)} {stage}\t{path}")
    data = "".join(line + "\0" for line in lines).encode("utf-8", errors="surrogateescape")
    cmd.git(tree, "update-index", "-z", "--index-info", input=data)


def stage(tree: Path, paths: list[str]) -> None:
    """git add (or rm) of the paths: their work-tree state becomes the index's."""
    if paths:
        cmd.git(
            tree,
            "update-index",
            "--add",
            "--remove",
            "-z",
            "--stdin",
            input=b"".join(os.fsencode(p) + b"\0" for p in paths),
        )
