"""What a diff says, as values: its hunks, its file patches (header names, git's modes,
renames and copies) and the diff itself, with its names resolved into tree paths as GNU
patch and git choose them (``Diff.resolve_paths``; parse.py's docstring gives the rules).
The parser that makes these values is :mod:`bakery.patch.parse`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import DiffError, UnsafePathError

DEV_NULL = "/dev/null"


_NO_NEWLINE = "\\ No newline at end of file"


@dataclass
class Hunk:
    index: int
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    #: (kind, text) with kind in " -+" and text without its line ending.
    lines: list[tuple[str, str]]
    diff_line: int
    old_noeol: bool = False
    new_noeol: bool = False

    @property
    def new_lines(self) -> list[str]:
        return [t for k, t in self.lines if k != "-"]

    def leading_context(self) -> int:
        n = 0
        for k, _ in self.lines:
            if k != " ":
                break
            n += 1
        return n

    def trailing_context(self) -> int:
        n = 0
        for k, _ in reversed(self.lines):
            if k != " ":
                break
            n += 1
        return n

    def render(self) -> str:
        """The hunk as unified-diff text (for .rej files and ports)."""

        def rng(start: int, length: int) -> str:
            return f"{start}" if length == 1 else f"{start},{length}"

        out = [f"@@ -{rng(self.old_start, self.old_len)} +{rng(self.new_start, self.new_len)} @@\n"]
        old_seen = new_seen = 0
        for kind, text in self.lines:
            out.append(f"{kind}{text}\n")
            if kind != "+":
                old_seen += 1
            if kind != "-":
                new_seen += 1
            old_end = kind in " -" and old_seen == self.old_len and self.old_noeol
            new_end = kind == "+" and new_seen == self.new_len and self.new_noeol
            if old_end or new_end:
                out.append(_NO_NEWLINE + "\n")
        return "".join(out)


@dataclass
class FilePatch:
    old_name: str  # as written in the header, after unquoting
    new_name: str
    diff_line: int
    hunks: list[Hunk] = field(default_factory=list)
    old_mode: int | None = None
    new_mode: int | None = None
    git: bool = False
    #: ``diff -N``'s way: a side whose header has the epoch timestamp and whose range is
    #: empty does not exist (the file is created, or deleted), as ``/dev/null`` does not.
    created: bool = False
    removed: bool = False
    #: The ``+++`` line ended in CRLF: each line's trailing CR was dropped (GNU patch's way).
    crlf_stripped: bool = False
    #: A git rename or copy: "rename" or "copy", with the names of its ``rename from`` /
    #: ``rename to`` (``copy ...``) lines, as written (stripped one folder less than the
    #: ``---``/``+++`` names, as git strips them).
    move: str | None = None
    move_from: str | None = None
    move_to: str | None = None
    #: The names were those of the from/to lines (a ``diff --git`` line too ambiguous to
    #: split): stripped one folder less, as git strips them.
    move_by_lines: bool = False
    #: Set by the series once the strip count and root are known.
    old_path: str | None = None
    new_path: str | None = None
    #: A plain diff whose two names differ (``x.orig``/``x``): the name not taken.
    other_path: str | None = None

    @property
    def is_new(self) -> bool:
        return self.old_name == DEV_NULL or self.created

    @property
    def is_delete(self) -> bool:
        return self.new_name == DEV_NULL or self.removed

    @property
    def path(self) -> str:
        """Tree-relative path this file patch writes (or deletes)."""
        p = self.old_path if self.is_delete else self.new_path
        assert p is not None, "paths are resolved by Diff.resolve_paths"
        return p

    @property
    def source(self) -> str:
        """The tree-relative path whose content the patch reads: a rename's or copy's
        source, else ``path``."""
        if self.move is not None and self.old_path is not None:
            return self.old_path
        return self.path


@dataclass
class Diff:
    path: Path
    name: str
    sha256: str
    files: list[FilePatch]
    #: This diff's own strip count, where it differs from the series' (found by
    #: series.detect_layout: a diff made one folder higher than the others).
    strip: int | None = None

    def resolve_paths(
        self, strip: int, root: str, exists: Callable[[str], bool] | None = None
    ) -> None:
        """Turn header names into tree-relative paths: drop ``strip`` components (this
        diff's own count where it has one; one less for git's ``rename from`` lines), add
        ``root``. ``exists`` says whether a tree-relative file exists: a plain diff whose
        two names differ patches the one that does (GNU patch's rule); without it, or
        where neither does, GNU's best name."""
        strip = self.strip if self.strip is not None else strip
        for fp in self.files:
            fp.other_path = None
            if fp.move is not None:
                # the diff --git names, as GNU patch takes them; the from/to lines (one
                # folder less to strip) where that line could not be split
                s, a, b = strip, fp.old_name, fp.new_name
                if fp.move_by_lines:
                    assert fp.move_from is not None and fp.move_to is not None
                    s, a, b = max(strip - 1, 0), fp.move_from, fp.move_to
                fp.old_path = _tree_path(self, fp, a, s, root)
                fp.new_path = _tree_path(self, fp, b, s, root)
                if fp.old_path == fp.new_path:
                    raise DiffError(
                        self.path, fp.diff_line, f"a git {fp.move} of {fp.old_path} onto itself"
                    )
                continue
            fp.old_path = None if fp.is_new else _tree_path(self, fp, fp.old_name, strip, root)
            fp.new_path = None if fp.is_delete else _tree_path(self, fp, fp.new_name, strip, root)
            if fp.old_path and fp.new_path and fp.old_path != fp.new_path:
                chosen = _choose(self, fp, strip, exists)
                fp.other_path = fp.new_path if chosen == fp.old_path else fp.old_path
                fp.old_path = fp.new_path = chosen


def _choose(diff: Diff, fp: FilePatch, strip: int, exists: Callable[[str], bool] | None) -> str:
    """The file a plain diff with two different names patches, as GNU patch chooses it:
    of the names that exist, else of both, the one with the fewest folders, then the
    shortest base name, then the shortest name (the old one on a tie)."""
    assert fp.old_path is not None and fp.new_path is not None
    if fp.git:
        raise DiffError(
            diff.path,
            fp.diff_line,
            f"the git diff names {fp.old_path} and {fp.new_path} without 'rename from' "
            "or 'copy from' lines (git refuses it)",
        )
    names = [fp.old_path, fp.new_path]
    present = [n for n in names if exists is not None and exists(n)]
    if not present:
        need = agreeing_strip(fp)
        if need is not None and need > strip:
            raise DiffError(
                diff.path,
                fp.diff_line,
                f"{fp.old_name} and {fp.new_name} are one file once their first {need} folders "
                f"are dropped: this diff needs strip {need} (strip = {need} in series.toml, or "
                "no strip there to have each diff's detected)",
            )
    return min(present or names, key=lambda n: (n.count("/"), len(n.rsplit("/", 1)[-1]), len(n)))


def agreeing_strip(fp: FilePatch) -> int | None:
    """The fewest leading folders to drop so that both header names of fp name the same
    file (``vllm-0.32.0.orig/vllm/x.py`` and ``vllm-0.32.0/vllm/x.py``: 1), or None."""
    old = [p for p in fp.old_name.split("/") if p not in ("", ".")]
    new = [p for p in fp.new_name.split("/") if p not in ("", ".")]
    for n in range(0, min(len(old), len(new))):
        if old[n:] == new[n:]:
            return n
    return None


def _tree_path(diff: Diff, fp: FilePatch, name: str, strip: int, root: str) -> str:
    try:
        # Header names were read one char per byte (latin-1); the tree's names are UTF-8,
        # so "café" must become café, not its mojibake, and other bytes are refused.
        name = name.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise UnsafePathError(
            diff.path, fp.diff_line, f"path {name.encode('latin-1')!r} is not valid UTF-8"
        ) from None
    if name.startswith("/") and name != DEV_NULL:
        # GNU patch would cut the leading "/" as one more folder; a diff of absolute
        # names was made outside any tree, and bakery does not guess which part is the tree
        raise UnsafePathError(
            diff.path, fp.diff_line, f"absolute path {name!r} refused (strip {strip})"
        )
    # GNU's count: each run of "/" ends one component ("./a/b" under strip 1 is "a/b")
    parts = re.split("/+", name)
    if len(parts) <= strip or not [p for p in parts[strip:] if p not in ("", ".")]:
        raise DiffError(
            diff.path,
            fp.diff_line,
            f"path {name!r} has fewer than {strip + 1} parts (strip {strip} leaves no name)",
        )
    parts = [p for p in parts[strip:] if p not in ("", ".")]
    if root:
        parts = [*root.split("/"), *parts]
    check_safe_path(diff.path, fp.diff_line, name, parts)
    return "/".join(parts)


def check_safe_path(diff_path: Path, line: int, name: str, parts: list[str]) -> None:
    """Refuse names that could escape the tree or reach into git's or bakery's own files."""
    if name.startswith("/") and name != DEV_NULL:
        raise UnsafePathError(diff_path, line, f"absolute path {name!r} refused")
    if parts and parts[0].lower() == ".bakery":
        raise UnsafePathError(
            diff_path, line, f"path {name!r} writes into .bakery (bakery's manifest)"
        )
    for part in parts:
        if part == "..":
            raise UnsafePathError(diff_path, line, f"path {name!r} has a '..' component")
        if part.lower() == ".git":
            raise UnsafePathError(diff_path, line, f"path {name!r} writes into .git")
        # Cc: NUL, newline, escapes; Cf: bidi overrides and zero-width characters that
        # make a name read as another.
        if any(unicodedata.category(c) in ("Cc", "Cf") for c in part):
            raise UnsafePathError(diff_path, line, f"path {name!r} has a control character")
        if "\\" in part:
            # a legal POSIX name, but no baked tree's manifest, wheel or Windows checkout
            # can hold it (bakery.safety.paths refuses it in every path it reads back)
            raise UnsafePathError(diff_path, line, f"path {name!r} has a backslash")
