"""The hunk engine: applies one file's hunks to its content, like GNU patch, and says how.

Matching is done on lines without their endings, so a CRLF file takes an LF diff and
stays CRLF. Context lines are copied from the file, never from the diff, so the result is
byte-identical to GNU patch's wherever both apply a hunk at the same place and the diff's
line endings are the file's. Where they are not, added lines take the file's style (and in
a file without any line ending, the diff's most common one: ``_style``), where GNU patch
copies each line's ending from the diff (a diff adding ``a\r\n`` and ``b\n`` to ``x``
gives ``a\nb\nx`` here and ``a\r\nb\nx`` with GNU patch).

Search order for each hunk (GNU patch's, with the same running offset): the stated line
shifted by the offset the previous hunk needed, then ever farther lines either side; a hunk
whose *result* is found instead is ``already-applied``; only then, with ``fuzz`` > 0, the
same search with up to ``fuzz`` context lines dropped at either end.

Ambiguity guard: a hunk found exactly (at its line or at an offset) whose old text (context
plus removed lines) also matches elsewhere in the file is ``ambiguous`` and names those
other lines (numbered as in the file before the diff). GNU patch's choice of place is kept,
so the output stays byte-identical; the outcome only says that nothing but nearness chose it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bakery.model.results import FileResult, HunkResult, Outcome, worst
from bakery.patch.diffs import FilePatch, Hunk

__all__ = ["FileResult", "HunkResult", "Outcome", "apply_file", "apply_hunks", "worst"]


# --- lines ---------------------------------------------------------------------------------


def split_lines(content: bytes) -> tuple[list[str], list[str]]:
    """Lines without endings, and each line's ending ("\\n", "\\r\\n" or "" at EOF)."""
    text = content.decode("latin-1")
    parts = text.split("\n")
    lines: list[str] = []
    eols: list[str] = []
    for part in parts[:-1]:
        if part.endswith("\r"):
            lines.append(part[:-1])
            eols.append("\r\n")
        else:
            lines.append(part)
            eols.append("\n")
    if parts[-1]:
        lines.append(parts[-1])
        eols.append("")
    return lines, eols


def join_lines(lines: list[str], eols: list[str]) -> bytes:
    return "".join(t + e for t, e in zip(lines, eols, strict=True)).encode("latin-1")


def _norm(text: str) -> str:
    return text[:-1] if text.endswith("\r") else text


def _ended_lines(hunks: list[Hunk]) -> list[str]:
    """The hunks' line texts that end with a newline in the diff: not a side's last line
    before '\\ No newline at end of file', which never carries a CR to judge by."""
    out: list[str] = []
    for h in hunks:
        old = [i for i, (k, _) in enumerate(h.lines) if k != "+"]
        new = [i for i, (k, _) in enumerate(h.lines) if k != "-"]
        skip = {old[-1] if h.old_noeol and old else -1, new[-1] if h.new_noeol and new else -1}
        out += [t for i, (_, t) in enumerate(h.lines) if i not in skip]
    return out


def _style(eols: list[str], diff_lines: list[str]) -> str:
    crlf = sum(1 for e in eols if e == "\r\n")
    lf = sum(1 for e in eols if e == "\n")
    if crlf or lf:
        return "\r\n" if crlf > lf else "\n"
    return "\r\n" if diff_lines and all(t.endswith("\r") for t in diff_lines) else "\n"


# --- one hunk ------------------------------------------------------------------------------


@dataclass
class _Pattern:
    """A hunk's lines, possibly with context trimmed for fuzz."""

    lines: list[tuple[str, str]]
    old_noeol: bool
    new_noeol: bool
    top: int = 0  # context lines trimmed from the top
    #: "start" or "end": the hunk may only match at that end of the file (GNU patch's rule
    #: for a hunk with less context on one side: it was made at the file's start or end).
    anchor: str | None = None

    @property
    def old(self) -> list[str]:
        return [_norm(t) for k, t in self.lines if k != "+"]

    @property
    def new(self) -> list[str]:
        return [_norm(t) for k, t in self.lines if k != "-"]


def _context(h: Hunk) -> int:
    return max(h.leading_context(), h.trailing_context())


def _trim(h: Hunk, fuzz: int) -> _Pattern:
    """The hunk at fuzz level ``fuzz``, trimmed as GNU patch trims it (locate_hunk): the
    side with less context loses that much less, and a side short of context anchors the
    hunk to that end of the file (the start only for a hunk stated at line 1)."""
    context = _context(h)
    top = fuzz + h.leading_context() - context
    bottom = fuzz + h.trailing_context() - context
    anchor = None
    if top < 0:
        anchor = "start" if h.old_start <= 1 else None
        top = 0
    if bottom < 0:
        anchor = "end"
        bottom = 0
    lines = h.lines[top : len(h.lines) - bottom]
    return _Pattern(lines, h.old_noeol and not bottom, h.new_noeol and not bottom, top, anchor)


def _matches(lines: list[str], eols: list[str], pat: list[str], pos: int, noeol: bool) -> bool:
    end = pos + len(pat)
    if end > len(lines):
        return False
    if lines[pos:end] != pat:
        return False
    if noeol:
        return end == len(lines) and eols[-1] == ""
    # the diff says the last line ends with a newline: the file's must too
    return not (pat and end == len(lines) and eols[-1] == "")


def _search(
    lines: list[str],
    eols: list[str],
    pat: list[str],
    expected: int,
    lo: int,
    noeol: bool,
    anchor: str | None = None,
    within: int | None = None,
) -> int | None:
    """Nearest position >= lo where pat matches, trying ``expected`` first, then farther
    lines, below before above at equal distance (as GNU patch does); with ``within``, only
    positions nearer than that to ``expected``."""
    hi = len(lines) - len(pat)
    if not pat:
        return min(max(expected, lo), len(lines)) if expected <= len(lines) else None
    if hi < lo:
        return None
    if anchor is not None:
        pos = lo if anchor == "start" and lo == 0 else hi if anchor == "end" else -1
        if within is not None and abs(pos - expected) >= within:
            return None
        return pos if pos >= lo and _matches(lines, eols, pat, pos, noeol) else None
    if within is not None:
        lo, hi = max(lo, expected - within + 1), min(hi, expected + within - 1)
        if hi < lo:
            return None
    expected = min(max(expected, lo), hi)
    first = pat[0]
    for d in range(0, max(expected - lo, hi - expected) + 1):
        for pos in (expected + d, expected - d) if d else (expected,):
            if lo <= pos <= hi and lines[pos] == first and _matches(lines, eols, pat, pos, noeol):
                return pos
    return None


class _Places:
    """The ambiguity guard's view of the target file as it was before any hunk: where each
    line text stands, built once per file (a dict; list.index per hunk made a diff with
    many hunks quadratic). A hunk's old text is looked for by its rarest line only.

    Work is bounded: ``budget`` whole-text comparisons per file (proportional to its size,
    as the hunk search's own work is in practice); a hostile file of near-identical lines
    that uses them up gets no ambiguity check for its remaining hunks rather than a bake
    that does not finish."""

    def __init__(self, lines: list[str], eols: list[str]) -> None:
        self.lines = list(lines)
        self.eols = list(eols)
        self._at: dict[str, list[int]] | None = None
        self.budget = 64 * len(lines) + 4096

    def at(self) -> dict[str, list[int]]:
        if self._at is None:
            self._at = {}
            for i, t in enumerate(self.lines):
                self._at.setdefault(t, []).append(i)
        return self._at

    def others(self, pat: _Pattern, pos: int, limit: int = 8) -> list[int]:
        """Other places (0-based, in the file before any hunk) where the pattern's old
        text matches, at most ``limit``; ``pos`` is its own place there."""
        old = pat.old
        if not old or pat.anchor is not None or pat.old_noeol:
            return []  # no text, or a hunk that may match at one end of the file only
        at = self.at()
        j = min(range(len(old)), key=lambda k: len(at.get(old[k], ())))
        out: list[int] = []
        for i in at.get(old[j], ()):
            if self.budget <= 0 or len(out) >= limit:
                break
            start = i - j
            if start == pos or start < 0:
                continue
            self.budget -= 1
            if _matches(self.lines, self.eols, old, start, False):
                out.append(start)
        return out


def _splice(lines: list[str], eols: list[str], pat: _Pattern, pos: int, style: str) -> None:
    """Replace the matched old lines at pos with the pattern's new lines, in place."""
    new_lines: list[str] = []
    new_eols: list[str] = []
    src = pos
    for kind, text in pat.lines:
        if kind == " ":
            new_lines.append(lines[src])
            new_eols.append(eols[src])
            src += 1
        elif kind == "-":
            src += 1
        else:
            new_lines.append(_norm(text))
            new_eols.append(style)
    at_eof = src == len(lines)
    if at_eof and new_lines:
        if pat.new_noeol:
            new_eols[-1] = ""
        elif new_eols[-1] == "":
            new_eols[-1] = style
    lines[pos:src] = new_lines
    eols[pos:src] = new_eols


def apply_hunks(
    fp: FilePatch, content: bytes, fuzz: int = 0
) -> tuple[bytes, list[HunkResult], list[Hunk]]:
    """Apply fp's hunks to content. Returns new content, per-hunk results, failed hunks."""
    lines, eols = split_lines(content)
    style = _style(eols, _ended_lines(fp.hunks))
    results: list[HunkResult] = []
    failed: list[Hunk] = []
    delta = 0  # lines added minus removed by the hunks done so far
    run = 0  # the offset the previous hunk needed (GNU patch's running offset)
    lo = 0  # hunks never match above the end of the previous one
    places = _Places(lines, eols)
    shift = 0  # lines the spliced hunks so far added (the file's own lines: see _Places)
    for h in fp.hunks:
        base = h.old_start - 1 if h.old_len else h.old_start
        stated = base + delta
        res = None
        for level in range(0, min(fuzz, _context(h)) + 1):
            pat = _trim(h, level)
            # max(lo, top): the hunk with its dropped context must still start in the file.
            pos = _search(
                lines,
                eols,
                pat.old,
                stated + run + pat.top,
                max(lo, pat.top),
                pat.old_noeol,
                pat.anchor,
            )
            already = None
            # Only a result nearer than the match can win, so look no farther than that:
            # searching the whole file after every applied hunk made big diffs quadratic.
            near = None if pos is None else abs(pos - stated - run)
            if level == 0 and pat.new != pat.old and pat.new and near != 0:
                already = _search(
                    lines, eols, pat.new, stated + run, lo, pat.new_noeol, pat.anchor, within=near
                )
            if already is not None and (
                pos is None or abs(already - stated - run) < abs(pos - stated - run)
            ):
                offset = already - stated
                res = HunkResult(
                    h.index,
                    Outcome.ALREADY,
                    already + 1,
                    offset,
                    0,
                    "the hunk's result is already in the file",
                )
                run = offset
                lo = already + len(pat.new)
                delta += len(pat.new) - len(pat.old)
                break
            if pos is not None:
                start = pos - pat.top
                offset = start - stated
                status = (
                    Outcome.FUZZ if level else (Outcome.APPLIED if offset == 0 else Outcome.OFFSET)
                )
                others = [] if level else places.others(pat, pos - shift)
                _splice(lines, eols, pat, pos, style)
                shift += len(pat.new) - len(pat.old)
                res = HunkResult(h.index, status, start + 1, offset, level)
                if others:
                    res.status = Outcome.AMBIGUOUS
                    res.also_matches = [p + 1 for p in others]
                    res.reason = (
                        f"its old text also matches at line{'s' if len(others) > 1 else ''} "
                        f"{', '.join(map(str, res.also_matches))}; the nearest place was taken"
                    )
                run = offset
                lo = pos + len(pat.new)
                delta += len(pat.new) - len(pat.old)
                break
        if res is None:
            res = HunkResult(
                h.index,
                Outcome.FAILED,
                h.old_start,
                0,
                0,
                "context not found" + (f" within fuzz {fuzz}" if fuzz else ""),
            )
            failed.append(h)
        results.append(res)
    return join_lines(lines, eols), results, failed


def _create(fp: FilePatch, old: bytes | None, mode: int | None) -> FileResult:
    """A file the diff creates: written, already there as the diff has it, or in the way."""
    path = fp.path
    h = fp.hunks[0] if fp.hunks else None
    body = b"" if h is None else _new_file_content(h)
    if old is not None:
        if old == body:
            return FileResult(
                path,
                [HunkResult(1, Outcome.ALREADY, 1, 0, 0, "the new file already exists")],
                old,
                mode,
            )
        return FileResult(
            path,
            [
                HunkResult(
                    1, Outcome.FAILED, 1, 0, 0, "the new file already exists with other content"
                )
            ],
            None,
            mode,
            failed_hunks=[h] if h else [],
        )
    return FileResult(
        path, [HunkResult(1, Outcome.APPLIED, 1, 0, 0)], body, mode if mode is not None else 0o644
    )


def apply_file(
    fp: FilePatch, old: bytes | None, fuzz: int = 0, old_mode: int | None = None
) -> FileResult:
    """Apply one FilePatch to the file's current content (None: the file does not exist)."""
    path = fp.path
    mode = fp.new_mode if fp.new_mode is not None else old_mode
    if fp.is_new:
        return _create(fp, old, mode)
    if old is None and not fp.is_delete and len(fp.hunks) == 1 and not fp.hunks[0].old_len:
        # GNU patch: a missing file whose one hunk adds to nothing (@@ -0,0 +1,N @@, without
        # diff -N's epoch date) is patched as an empty file, so it is created
        return FileResult(
            path,
            [HunkResult(1, Outcome.APPLIED, 1, 0, 0)],
            _new_file_content(fp.hunks[0]),
            mode if mode is not None else 0o644,
        )
    if old is None:
        return _missing(fp, mode)
    if not fp.hunks:  # a git mode change, or deletion of an empty file
        if fp.is_delete:
            if old:
                return FileResult(
                    path,
                    [HunkResult(1, Outcome.FAILED, 1, 0, 0, "the file to delete is not empty")],
                    None,
                    mode,
                    reason="not empty",
                )
            return FileResult(
                path, [HunkResult(1, Outcome.APPLIED, 1, 0, 0)], None, mode, deleted=True
            )
        # a git rename or copy without hunks is applied; a mode change already made is not
        same = mode == old_mode and fp.move is None
        status = Outcome.ALREADY if same else Outcome.APPLIED
        return FileResult(path, [HunkResult(1, status, 1, 0, 0)], old, mode)
    new, results, failed = apply_hunks(fp, old, fuzz)
    if fp.is_delete and not failed:
        if new:
            results = [
                HunkResult(
                    r.index,
                    Outcome.FAILED,
                    r.line,
                    0,
                    0,
                    "the file to delete has more lines than the diff removes",
                )
                for r in results
            ]
            return FileResult(path, results, None, mode, failed_hunks=list(fp.hunks))
        return FileResult(path, results, None, mode, deleted=True)
    return FileResult(path, results, new, mode, failed_hunks=failed)


def _missing(fp: FilePatch, mode: int | None) -> FileResult:
    """A file patch whose file is not there: failed, or already done for a deletion."""
    reason = "the file to patch does not exist"
    if fp.move is not None:
        reason = f"the file to {fp.move} ({fp.source}) does not exist"
    status = Outcome.ALREADY if fp.is_delete else Outcome.FAILED
    if fp.is_delete:
        reason = "the file to delete is already gone"
    return FileResult(
        fp.path,
        [HunkResult(h.index, status, h.old_start, 0, 0, reason) for h in fp.hunks]
        or [HunkResult(1, status, 1, 0, 0, reason)],
        None,
        mode,
        failed_hunks=list(fp.hunks),
        reason=reason,
    )


def _new_file_content(h: Hunk) -> bytes:
    lines = [t for k, t in h.lines if k == "+"]
    if not lines:
        return b""
    style = _style([], lines[: len(lines) - h.new_noeol])  # a last line without EOL: no CR
    eols = [style] * len(lines)
    if h.new_noeol:
        eols[-1] = ""
    return join_lines([_norm(t) for t in lines], eols)
