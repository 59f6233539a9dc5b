"""Strict parser for plain unified diffs (``diff -u``, ``git diff``).

Why not unidiff's parser as the source of truth: unidiff is lenient by design (it keeps
unknown lines as "patch info", so a line past a hunk's counts is silently dropped), its
errors carry no diff line number, and its binary-line pattern is quadratic on long lines.
bakery must refuse bad input with one line naming the diff file and line, so it parses
here, byte for byte (latin-1 is a lossless bytes<->str mapping), and uses unidiff as the
reference it is checked against in the tests.

Everything the engine cannot apply exactly is refused here, before anything is written:
binary patches (naming the binary file), ed scripts, context diffs, symlinks and submodules
(git modes 120000 and 160000). README "What diffs bakery takes" lists every case.

Read as GNU patch reads them (each checked against GNU patch 2.7 in tests/patch):

- ``diff -uN`` writes a file that one side lacks as ``--- a/x<TAB>1970-01-01 00:00:00.000000000
  +0000`` with an empty range (``@@ -0,0 +1,9 @@``): a side whose timestamp is the epoch
  (in any timezone offset) and whose range is empty does not exist, as ``/dev/null`` does not.
- A file patch whose ``+++`` line ends in CRLF is a CRLF copy of a diff (made on Windows,
  or by an editor): the trailing CR of each of its lines is dropped and the file patch says
  so (``crlf_stripped``), as GNU patch does ("Stripping trailing CRs from patch"). Lines of
  a diff *of* CRLF files (LF headers, CRLF lines) keep their CR: it is content.
- Names as GNU patch and ``git apply`` choose them: the strip counts runs of ``/`` as GNU
  does (``./a/b`` under strip 1 is ``a/b``); a plain diff whose two names differ
  (``x.orig``/``x``, ``a``/``b``) patches the one that exists in the tree, else GNU's best
  name (fewest folders, then the shortest base name, then the shortest name); a git diff
  takes its ``diff --git`` names and is refused where its ``---``/``+++`` names disagree
  with them (git refuses it); ``rename from``/``copy from`` names are stripped one folder
  less, as git does.
- git renames and copies, with or without hunks; several file patches for one file in one
  diff (``git format-patch --stdout`` of several commits, concatenated patches), applied in
  order; git modes normalised as git does (a regular file is 100644 or 100755 by its owner
  execute bit, so 100660 is 100644).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import DiffError
from bakery.patch.diffs import _NO_NEWLINE, DEV_NULL, Diff, FilePatch, Hunk
from bakery.patch.headers import MAX_NAME, header_name, shared_tail, unquote

#: Longest diff line bakery reads; longer ones are refused in linear time.
MAX_LINE = 1 << 20
#: Largest line number a hunk header may state.
MAX_LINENO = 10**8

_CUT_RE = re.compile(" b/")
_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ED_RE = re.compile(r"\d+(,\d+)?[acd]$")
_GIT_MOVES = {"rename from ": "from", "rename to ": "to", "copy from ": "from", "copy to ": "to"}
_GIT_IGNORED = ("index ", "similarity index ", "dissimilarity index ")
#: git's modes for what a baked tree of regular files cannot hold, and why.
_GIT_TYPES = {
    0o120000: "a symlink (git mode 120000)",
    0o160000: "a submodule (git mode 160000)",
    0o040000: "a directory (git mode 040000)",
}


def read_diff(path: Path, data: bytes | None = None) -> Diff:
    """Parse one diff file; raises DiffError naming ``path`` and the line."""
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise DiffError(path, None, f"cannot read: {e.strerror}") from None
    sha = hashlib.sha256(data).hexdigest()
    files = _Parser(path, data).parse()
    return Diff(path=path, name=path.name, sha256=sha, files=files)


def _split_lines(path: Path, data: bytes) -> list[str]:
    text = data.decode("latin-1")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it starts no new one
    # A last line without its newline (as in the user's dcp2 diff) is simply the last line.
    for i, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise DiffError(path, i, f"line longer than {MAX_LINE} bytes refused")
    return lines


@dataclass
class _GitHeader:
    """A ``diff --git`` header as read so far: its line, its text, and the modes its
    extended lines gave (old_mode, new_mode, new_file, deleted)."""

    line: int
    header: str
    modes: dict[str, int] = field(default_factory=dict)
    #: "rename" or "copy", and the names of its from/to lines (unquoted).
    move: str | None = None
    moves: dict[str, str] = field(default_factory=dict)
    by_lines: bool = False  # the names are the from/to lines' (see FilePatch.move_by_lines)


class _Parser:
    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.lines = _split_lines(path, data)
        self.i = 0  # index of the next line
        self.hunk_end = -1  # index of the line right after the last hunk read
        self._ed_ahead: list[bool | None] | None = None  # see _looks_like_ed
        self.strip_cr = False  # within a file patch whose +++ line ends in CRLF

    def err(self, line: int, problem: str) -> DiffError:
        return DiffError(self.path, line, problem)

    def parse(self) -> list[FilePatch]:
        files: list[FilePatch] = []
        git_hdr: _GitHeader | None = None
        n = len(self.lines)
        while self.i < n:
            lineno = self.i + 1
            line = self.lines[self.i]
            if line.startswith("diff --git "):
                if git_hdr is not None:
                    files.extend(self._hunkless_git(git_hdr))
                git_hdr = _GitHeader(line=lineno, header=line)
                self.i += 1
                continue
            if git_hdr is not None and self._git_extended(git_hdr, line, lineno):
                self.i += 1
                continue
            if (
                line.startswith("--- ")
                and self.i + 1 < n
                and self.lines[self.i + 1].startswith("+++ ")
            ):
                files.append(self._file(git_hdr))
                git_hdr = None
                continue
            if line.startswith("@@ "):
                raise self.err(lineno, "hunk without a file header (--- / +++)")
            self._refuse_other_formats(line, lineno, git_hdr)
            if git_hdr is not None:
                files.extend(self._end_of_git_header(git_hdr, line, lineno))
                git_hdr = None
            self.i += 1  # prose between files, as in mails and `git format-patch`
        if git_hdr is not None:
            files.extend(self._hunkless_git(git_hdr))
        if not files:
            raise self.err(1 if n else 0, "no unified diff found (empty file or prose only)")
        return files

    def _end_of_git_header(self, git_hdr: _GitHeader, line: str, lineno: int) -> list[FilePatch]:
        """A git header that no ``---``/``+++`` pair follows: a mode change, an empty file
        or a rename without hunks, ended where prose (a mail's "-- ") begins; a header
        whose line is half a file header, or that needs hunks, is refused."""
        if line.startswith(("--- ", "+++ ")):
            raise self.err(
                lineno,
                f"git diff header lacks filename information: {line[:60]!r} "
                f"without its {'+++' if line.startswith('---') else '---'} line",
            )
        if not ({"new_file", "deleted", "new_mode"} & set(git_hdr.modes) or git_hdr.move):
            raise self.err(lineno, f"unexpected line in git header: {line[:60]!r}")
        return self._hunkless_git(git_hdr)

    def _refuse_other_formats(self, line: str, lineno: int, git_hdr: _GitHeader | None) -> None:
        if line.startswith(("GIT binary patch", "Binary files ", "Binary file ")):
            raise self.err(lineno, f"binary patch refused: {self._binary_name(line, git_hdr)}")
        if (
            line.startswith("*** ")
            and self.i + 1 < len(self.lines)
            and (
                self.lines[self.i + 1].startswith("--- ")
                or self.lines[self.i + 1].startswith("****")
            )
        ):
            raise self.err(lineno, "context-format diff refused; regenerate it with `diff -u`")
        if line.startswith("***************"):
            raise self.err(lineno, "context-format diff refused; regenerate it with `diff -u`")
        if _ED_RE.match(line) and self._looks_like_ed(self.i):
            raise self.err(lineno, "ed script refused (bakery never runs ed commands)")
        # Only the line right after a hunk: prose elsewhere (a format-patch diffstat after
        # "---", a mail's "- item" list) may start with any of these.
        if (
            line.startswith(("+", "-", " ", "\\"))
            and line.rstrip("\r") != "-- "
            and self.i == self.hunk_end
        ):
            raise self.err(lineno, "line beyond the counts in the hunk header")

    def _binary_name(self, line: str, git_hdr: _GitHeader | None) -> str:
        """Which file a binary patch line is about, for its refusal."""
        name = None
        if git_hdr is not None:
            try:
                name = self._git_names(git_hdr)[1]
            except DiffError:
                name = None
        m = re.match(r"Binary files? (.*) and (.*) differ", line.rstrip("\r"))
        if name is None and m:
            name = m.group(2) if m.group(2) != DEV_NULL else m.group(1)
        what = f"{name[:120]!r} is binary" if name else "a binary file"
        return f"{what}; bakery applies text diffs only (the diff holds no text to apply)"

    def _looks_like_ed(self, i: int) -> bool:
        # An ed command line followed by text and a lone "." (or another command).
        # What comes first after each line (a lone ".": True, a hunk or file header: False)
        # is found once for all lines, backwards: scanning ahead from every command-like
        # line was quadratic ("1a\n" * 10**5 took minutes).
        if self._ed_ahead is None:
            ahead: list[bool | None] = [None] * len(self.lines)
            cur: bool | None = None
            for j in range(len(self.lines) - 1, -1, -1):
                ahead[j] = cur
                line = self.lines[j]
                if line == ".":
                    cur = True
                elif line.startswith("--- ") or _HUNK_RE.match(line):
                    cur = False
            self._ed_ahead = ahead
        found = self._ed_ahead[i]
        return found if found is not None else self.lines[i].endswith("d")

    def _git_extended(self, hdr: _GitHeader, line: str, lineno: int) -> bool:
        for prefix, side in _GIT_MOVES.items():
            if line.startswith(prefix):
                kind = prefix.split(" ", 1)[0]
                if (hdr.move not in (None, kind)) or side in hdr.moves:
                    raise self.err(
                        lineno,
                        f"git header {line.strip()[:60]!r} repeats or contradicts an earlier line",
                    )
                hdr.move = kind
                name = line[len(prefix) :].rstrip("\r")
                hdr.moves[side] = unquote(self.path, lineno, name)
                return True
        for key, prefix in (
            ("old_mode", "old mode "),
            ("new_mode", "new mode "),
            ("new_file", "new file mode "),
            ("deleted", "deleted file mode "),
        ):
            if line.startswith(prefix):
                mode = self._git_mode(lineno, line[len(prefix) :].strip())
                if key in hdr.modes or {key, *hdr.modes} >= {"new_file", "deleted"}:
                    raise self.err(
                        lineno,
                        f"git header {line.strip()[:60]!r} repeats or contradicts an earlier line",
                    )
                hdr.modes[key] = mode
                return True
        if line.startswith("index "):
            m = re.fullmatch(r"index [0-9a-fA-F]+\.\.[0-9a-fA-F]+ ([0-7]+)", line.rstrip("\r"))
            if m:  # "index 1a2b..3c4d 160000": a submodule pointer is refused here
                self._git_mode(lineno, m.group(1))
            return True
        return line.startswith(_GIT_IGNORED)

    def _git_mode(self, lineno: int, mode: str) -> int:
        """A git mode as the tree's permission bits, normalised as git normalises it: a
        regular file is 644 or 755 by its owner execute bit (100660 is 100644); symlinks,
        submodules and directories are refused, as a baked tree holds regular files only."""
        if not re.fullmatch(r"[0-7]{1,7}", mode):
            raise self.err(lineno, f"invalid file mode {mode[:20]!r} (git writes 100644 or 100755)")
        value = int(mode, 8)
        kind = value & 0o170000
        if kind in _GIT_TYPES:
            raise self.err(
                lineno,
                f"{_GIT_TYPES[kind]} refused: a baked tree holds regular files only "
                "(README: What diffs bakery takes)",
            )
        if kind != 0o100000:
            raise self.err(lineno, f"file mode {mode} is no git file mode (100644 or 100755)")
        return 0o755 if value & 0o100 else 0o644

    def _git_move(self, fp: FilePatch, hdr: _GitHeader) -> None:
        """A rename or copy: its from/to lines, both required (git requires them)."""
        if set(hdr.moves) != {"from", "to"}:
            raise self.err(hdr.line, f"git {hdr.move} without its '{hdr.move} from/to' lines")
        # from or to /dev/null: a creation or deletion in disguise (it read as one)
        if {"new_file", "deleted"} & set(hdr.modes) or DEV_NULL in hdr.moves.values():
            raise self.err(hdr.line, f"a git {hdr.move} may not also create or delete a file")
        fp.move, fp.move_from, fp.move_to = hdr.move, hdr.moves["from"], hdr.moves["to"]
        fp.move_by_lines = hdr.by_lines

    def _git_names(self, hdr: _GitHeader, moved: bool = False) -> tuple[str, str]:
        """The two names of a ``diff --git`` line. A rename's or copy's names may hold
        spaces that make the line ambiguous; its from/to lines name the files then (as
        git apply takes them): where the line cannot be split, or where its split names
        do not end in the from/to names ('a/a b/c.py b/d.py' is "a b/c.py" to "d.py")."""
        if moved:
            try:
                a, b = self._git_names(hdr)
                if a.endswith(hdr.moves.get("from", "")) and b.endswith(hdr.moves.get("to", "")):
                    return a, b
            except DiffError:
                pass
            hdr.by_lines = True
            return hdr.moves.get("from", ""), hdr.moves.get("to", "")
        lineno = hdr.line
        rest = hdr.header[len("diff --git ") :].rstrip("\r")  # git quotes a name's own CR
        if rest.startswith('"'):
            end = rest.find('" ', 1)
            if end < 0:
                raise self.err(lineno, "bad quoted name in 'diff --git' header")
            a, b = rest[: end + 1], rest[end + 2 :]
        else:
            half = (len(rest) - 1) // 2
            a, b = rest[:half], rest[half + 1 :]
            # names that differ (a rename, `git diff --no-index x y`): cut at the " b/"
            # after which the two names share the most trailing parts, as git compares them
            # once stripped ('a/x b/m b/y/m' is x b/m and y/m); a tie, the first (within a
            # name's length of the start, the first 64: bounded work)
            differ = a.split("/", 1)[-1] != b.split("/", 1)[-1]
            cuts = [m.start() for m in _CUT_RE.finditer(rest, 0, MAX_NAME + 2)] if differ else []
            if cuts:
                cut = max(cuts[:64], key=lambda i: shared_tail(rest[:i], rest[i + 1 :]))
                a, b = rest[:cut], rest[cut + 1 :]
            if not a or not b or rest[len(a) : len(a) + 1] != " ":
                raise self.err(lineno, "malformed 'diff --git' header: expected two names")
        return unquote(self.path, lineno, a), unquote(self.path, lineno, b)

    def _hunkless_git(self, hdr: _GitHeader) -> list[FilePatch]:
        """A git header without ---/+++: mode change, or new/deleted empty file."""
        lineno = hdr.line
        modes = hdr.modes
        a, b = self._git_names(hdr, hdr.move is not None)
        fp = FilePatch(old_name=a, new_name=b, diff_line=lineno, git=True)
        if hdr.move is not None:
            self._git_move(fp, hdr)
            if "new_mode" in modes:
                fp.old_mode = modes.get("old_mode")
                fp.new_mode = modes["new_mode"]
        elif "new_file" in modes:
            fp.old_name, fp.new_mode = DEV_NULL, modes["new_file"]
        elif "deleted" in modes:
            fp.new_name, fp.old_mode = DEV_NULL, modes["deleted"]
        elif "new_mode" in modes:
            fp.old_mode = modes.get("old_mode")
            fp.new_mode = modes["new_mode"]
        else:
            raise self.err(
                lineno, "git header with nothing to apply (no hunks, mode or file change)"
            )
        return [fp]

    def _file(self, git_hdr: _GitHeader | None) -> FilePatch:
        lineno = self.i + 1
        old, old_epoch = header_name(self.path, lineno, self.lines[self.i][4:])
        new, new_epoch = header_name(self.path, lineno + 1, self.lines[self.i + 1][4:])
        self.strip_cr = self.lines[self.i + 1].endswith("\r")
        self.i += 2
        fp = FilePatch(old_name=old, new_name=new, diff_line=lineno, git=git_hdr is not None)
        fp.crlf_stripped = self.strip_cr
        if git_hdr is not None:
            self._git_agree(fp, git_hdr, lineno)
            self._git_modes(fp, git_hdr, lineno)
            if git_hdr.move is not None:
                self._git_move(fp, git_hdr)
        if old == DEV_NULL and new == DEV_NULL:
            raise self.err(lineno, "both sides are /dev/null")
        while self.i < len(self.lines) and self.lines[self.i].startswith("@@"):
            fp.hunks.append(self._hunk(fp, len(fp.hunks) + 1))
        self.strip_cr = False
        if not fp.hunks:
            raise self.err(lineno, "file header without hunks")
        if git_hdr is None and old != DEV_NULL and new != DEV_NULL:
            fp.created = old_epoch and len(fp.hunks) == 1 and fp.hunks[0].old_len == 0
            fp.removed = new_epoch and all(h.new_len == 0 for h in fp.hunks)
        self.hunk_end = self.i
        self._check_order(fp)
        return fp

    def _git_agree(self, fp: FilePatch, hdr: _GitHeader, lineno: int) -> None:
        """git takes a file patch's names from its ``diff --git`` line and refuses one
        whose ``---``/``+++`` names disagree with it ("inconsistent new filename")."""
        rest = hdr.header[len("diff --git ") :].rstrip("\r")
        if DEV_NULL not in (fp.old_name, fp.new_name) and rest == f"{fp.old_name} {fp.new_name}":
            return  # unquoted names, spaces and all, exactly as the headers have them
        try:
            a, b = self._git_names(hdr)
        except DiffError:
            if hdr.move is not None:
                return  # ambiguous names with spaces: the ---/+++ names say which files
            raise
        for side, name, ours in (("---", fp.old_name, a), ("+++", fp.new_name, b)):
            if name != DEV_NULL and name != ours:
                raise self.err(
                    lineno if side == "---" else lineno + 1,
                    f"the {side} name {name[:80]!r} disagrees with the 'diff --git' line's "
                    f"{ours[:80]!r} (git refuses such a diff)",
                )

    def _git_modes(self, fp: FilePatch, git_hdr: _GitHeader, lineno: int) -> None:
        """The modes of git's extended header, checked against the ---/+++ names."""
        modes = git_hdr.modes
        if "new_file" in modes:
            fp.new_mode = modes["new_file"]
        if "deleted" in modes:
            fp.old_mode = modes["deleted"]
        if "new_mode" in modes:
            fp.old_mode = modes.get("old_mode")
            fp.new_mode = modes["new_mode"]
        if ("new_file" in modes) != (fp.old_name == DEV_NULL):
            raise self.err(lineno, "'new file mode' and the --- header disagree")
        if ("deleted" in modes) != (fp.new_name == DEV_NULL):
            raise self.err(lineno, "'deleted file mode' and the +++ header disagree")

    def _check_order(self, fp: FilePatch) -> None:
        prev_end = 0
        for h in fp.hunks:
            start = h.old_start if h.old_len else h.old_start + 1
            if start < prev_end:
                raise self.err(
                    h.diff_line,
                    f"hunk {h.index} overlaps or precedes hunk "
                    f"{h.index - 1} (hunks must be in order)",
                )
            prev_end = h.old_start + h.old_len if h.old_len else h.old_start + 1
        if fp.is_new and (len(fp.hunks) != 1 or fp.hunks[0].old_len):
            raise self.err(fp.hunks[0].diff_line, "a new file must have one hunk starting at -0,0")
        if fp.is_delete and (len(fp.hunks) != 1 or fp.hunks[0].new_len):
            raise self.err(
                fp.hunks[0].diff_line, "a deleted file must have one hunk ending at +0,0"
            )

    def _hunk_header(self, lineno: int) -> tuple[int, int, int, int]:
        """The four numbers of the ``@@ -a,b +c,d @@`` line at ``lineno``, checked."""
        header = self.lines[lineno - 1]
        m = _HUNK_RE.match(header)
        if not m:
            raise self.err(lineno, f"malformed hunk header {header[:80]!r}")
        # digits counted before int() reads them: Python refuses to convert more than 4,300
        # digits (a ValueError, not a refusal naming the line)
        if any(len(g) > 9 for g in m.groups() if g):
            raise self.err(lineno, "line number in hunk header too large")
        nums = [int(g) if g is not None else 1 for g in m.groups()]
        if any(x > MAX_LINENO for x in nums):
            raise self.err(lineno, "line number in hunk header too large")
        old_start, old_len, new_start, new_len = nums
        if (old_len and not old_start) or (new_len and not new_start):
            raise self.err(lineno, "hunk header starts at line 0 but has lines")
        return old_start, old_len, new_start, new_len

    def _hunk(self, fp: FilePatch, index: int) -> Hunk:
        lineno = self.i + 1
        old_start, old_len, new_start, new_len = self._hunk_header(lineno)
        self.i += 1
        lines: list[tuple[str, str]] = []
        old_seen = new_seen = 0
        old_noeol = new_noeol = False
        last_kind = ""
        while old_seen < old_len or new_seen < new_len:
            if self.i >= len(self.lines):
                raise self.err(
                    self.i,
                    f"hunk {index} is truncated: expected {old_len} old and "
                    f"{new_len} new lines, got {old_seen} and {new_seen}",
                )
            ln = self.i + 1
            line = self.lines[self.i]
            if self.strip_cr and line.endswith("\r"):
                line = line[:-1]
            kind = line[:1] if line else " "  # an empty line is empty context (some mailers)
            if line.startswith(_NO_NEWLINE[:2]) and lines:
                self._noeol(ln, last_kind, old_seen, old_len, new_seen, new_len)
                if last_kind in " -":
                    old_noeol = True
                if last_kind in " +":
                    new_noeol = True
                last_kind = "\\"  # a second marker in a row follows no line: refused
                self.i += 1
                continue
            if kind not in " -+":
                raise self.err(
                    ln, f"bad line in hunk {index}: {line[:60]!r} (expected ' ', '-', '+' or '\\')"
                )
            if kind != "+":
                old_seen += 1
            if kind != "-":
                new_seen += 1
            if old_seen > old_len or new_seen > new_len:
                raise self.err(
                    ln,
                    f"hunk {index} has more lines than its header (-{old_len} +{new_len}) states",
                )
            if (old_noeol and kind != "+") or (new_noeol and kind != "-"):
                raise self.err(ln, "line after '\\ No newline at end of file'")
            lines.append((kind, line[1:]))
            last_kind = kind
            self.i += 1
        if self.i < len(self.lines) and self.lines[self.i].startswith(_NO_NEWLINE[:2]):
            ln = self.i + 1
            self._noeol(ln, last_kind, old_seen, old_len, new_seen, new_len)
            if last_kind in " -":
                old_noeol = True
            if last_kind in " +":
                new_noeol = True
            self.i += 1
        if not lines:
            raise self.err(lineno, f"hunk {index} is empty")
        return Hunk(
            index, old_start, old_len, new_start, new_len, lines, lineno, old_noeol, new_noeol
        )

    def _noeol(
        self,
        ln: int,
        last_kind: str,
        old_seen: int,
        old_len: int,
        new_seen: int,
        new_len: int,
    ) -> None:
        """A ``\\ No newline`` marker (the callers read it by its ``"\\ "``) at line ``ln``:
        it may only follow the last old or the last new line."""
        at_old_end = last_kind in " -" and old_seen == old_len
        at_new_end = last_kind in " +" and new_seen == new_len
        if not (at_old_end or at_new_end):
            raise self.err(ln, "'\\ No newline at end of file' is not after a last line")
