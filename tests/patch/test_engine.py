"""The hunk engine: every outcome, files created and deleted, line endings, modes, and
byte-for-byte agreement with GNU patch wherever both apply a diff cleanly."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

from bakery.model import records
from bakery.patch.diffs import FilePatch
from bakery.patch.engine import FileResult, HunkResult, Outcome, apply_file, split_lines, worst
from bakery.patch.parse import read_diff
from tests.support.gnupatch import assert_same_as_gnu, fpatch, gnu, needs_patch, outcomes
from tests.support.paths import SAMPLES

BASE30 = "".join(f"line {i}\n" for i in range(1, 31))


def sample(name: str) -> FilePatch:
    diff = read_diff(SAMPLES / name)
    diff.resolve_paths(1, "")
    return diff.files[0]


def udiff(old: list[str], new: list[str], context: int = 3) -> str:
    return "".join(difflib.unified_diff(old, new, "a/f", "b/f", n=context))


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# --- outcomes ------------------------------------------------------------------------------


def content_of(res: FileResult) -> bytes:
    """The patched content of a file the diff does not delete."""
    assert res.content is not None
    return res.content


@needs_patch
def test_applied_at_the_stated_lines(tmp_path: Path) -> None:
    fp = sample("two_hunks.diff")
    res = apply_file(fp, BASE30.encode())
    assert outcomes(res) == [("applied", 2, 0, 0), ("applied", 22, 0, 0)]
    assert res.status is Outcome.APPLIED
    assert b"line five\n" in content_of(res) and b"line 24\nadded after 24\n" in content_of(res)
    assert_same_as_gnu(tmp_path, BASE30.encode(), (SAMPLES / "two_hunks.diff").read_bytes(), res)


@needs_patch
def test_offset_is_reported_and_carried_to_the_next_hunk(tmp_path: Path) -> None:
    fp = sample("two_hunks.diff")
    shifted = "".join(f"new {i}\n" for i in range(5)) + BASE30
    res = apply_file(fp, shifted.encode())
    assert outcomes(res) == [("offset", 7, 5, 0), ("offset", 27, 5, 0)]
    assert res.status is Outcome.OFFSET and res.ok
    assert_same_as_gnu(tmp_path, shifted.encode(), (SAMPLES / "two_hunks.diff").read_bytes(), res)


@needs_patch
def test_running_offset_beats_a_decoy_near_the_stated_line(tmp_path: Path) -> None:
    # Hunk 2's context also appears 2 lines above its stated line, but hunk 1 needed +5:
    # like GNU patch, the search for hunk 2 starts at its stated line + 5, not at the decoy.
    # The decoy makes hunk 2 ambiguous (issue 19): same place, but the other one is named.
    base = lines(BASE30)
    decoy = base[21:27]  # "line 22".."line 27", hunk 2's old lines
    target = [f"new {i}\n" for i in range(5)] + base[:14] + decoy + base[14:]
    content = "".join(target).encode()
    res = apply_file(sample("two_hunks.diff"), content)
    assert outcomes(res) == [("offset", 7, 5, 0), ("ambiguous", 33, 11, 0)]
    assert res.hunks[1].also_matches == [20] and res.status is Outcome.AMBIGUOUS and res.ok
    got = split_lines(content_of(res))[0]
    assert got[19:25] == [t.rstrip("\n") for t in decoy]  # the decoy is untouched
    assert got[35] == "added after 24"
    assert_same_as_gnu(tmp_path, content, (SAMPLES / "two_hunks.diff").read_bytes(), res)


@needs_patch
def test_equal_distance_prefers_the_later_match_like_gnu(tmp_path: Path) -> None:
    old = [f"l{i}\n" for i in range(1, 21)]
    new = [("X\n" if x == "l10\n" else x) for x in old]
    diff = udiff(old, new)
    block = old[6:13]  # l7..l13, the hunk's old lines
    target = ["f1\n", "f2\n", *block, "g\n", *block, "h1\n", "h2\n", "h3\n"]
    content = "".join(target).encode()
    res = apply_file(fpatch(diff), content)
    assert outcomes(res) == [("ambiguous", 11, 4, 0)]  # GNU's place; the other one named
    assert res.hunks[0].also_matches == [3]
    assert_same_as_gnu(tmp_path, content, diff, res)


@needs_patch
@pytest.mark.parametrize("fuzz", [0, 1, 2])
def test_fuzz_only_when_asked(tmp_path: Path, fuzz: int) -> None:
    old = [f"l{i}\n" for i in range(1, 21)]
    new = [("X\n" if x == "l10\n" else x) for x in old]
    diff = udiff(old, new)
    target = "".join(("L7\n" if x == "l7\n" else x) for x in old).encode()
    res = apply_file(fpatch(diff), target, fuzz=fuzz)
    if fuzz == 0:
        assert outcomes(res) == [("failed", 7, 0, 0)]
        assert res.hunks[0].reason == "context not found"
        rc, _, _ = gnu(tmp_path, target, diff, "-F", "0")
        assert rc == 1
    else:
        assert outcomes(res) == [("fuzz", 7, 0, 1)]
        assert res.status is Outcome.FUZZ and res.ok
        assert_same_as_gnu(tmp_path, target, diff, res, fuzz)


def test_failed_hunk_with_fuzz_says_so() -> None:
    old = [f"l{i}\n" for i in range(1, 21)]
    diff = udiff(old, [("X\n" if x == "l10\n" else x) for x in old])
    target = "".join(x.upper() for x in old).encode()
    res = apply_file(fpatch(diff), target, fuzz=2)
    assert outcomes(res) == [("failed", 7, 0, 0)]
    assert res.hunks[0].reason == "context not found within fuzz 2"


def test_already_applied_is_recognised_and_not_ok() -> None:
    fp = sample("two_hunks.diff")
    new = apply_file(fp, BASE30.encode()).content
    res = apply_file(fp, new)
    assert [h.status for h in res.hunks] == [Outcome.ALREADY, Outcome.ALREADY]
    assert not res.ok and res.status is Outcome.ALREADY
    assert res.content == new  # nothing changed


def test_one_hunk_already_applied_the_other_applies() -> None:
    fp = sample("two_hunks.diff")
    half = BASE30.replace("line 5\n", "line five\n").encode()
    res = apply_file(fp, half)
    assert outcomes(res) == [("already-applied", 2, 0, 0), ("applied", 22, 0, 0)]
    assert not res.ok


def test_failed_hunk_keeps_the_others_and_names_its_line() -> None:
    fp = sample("two_hunks.diff")
    broken = BASE30.replace("line 24\n", "line twenty-four\n").encode()
    res = apply_file(fp, broken)
    assert outcomes(res) == [("applied", 2, 0, 0), ("failed", 22, 0, 0)]
    assert res.failed_hunks == [fp.hunks[1]]
    assert res.status is Outcome.FAILED and not res.ok
    assert b"line five\n" in content_of(res)


def test_missing_file_fails_every_hunk() -> None:
    res = apply_file(sample("two_hunks.diff"), None)
    assert [h.status for h in res.hunks] == [Outcome.FAILED, Outcome.FAILED]
    assert res.reason == "the file to patch does not exist"


@needs_patch
def test_hunk_made_at_the_start_of_a_file_stays_there(tmp_path: Path) -> None:
    # One line of context below, none above: the diff saw the file's first line, so (like
    # GNU patch) the hunk may not move down to the middle of a file.
    diff = udiff(["a\n", "b\n", "c\n", "d\n"], ["new\n", "a\n", "b\n", "c\n", "d\n"])
    assert diff.splitlines()[2] == "@@ -1,3 +1,4 @@"
    shifted = b"x\ny\na\nb\nc\nd\n"
    res = apply_file(fpatch(diff), shifted)
    assert outcomes(res) == [("failed", 1, 0, 0)]
    assert gnu(tmp_path, shifted, diff, "-F", "0")[0] == 1


@needs_patch
def test_hunk_made_at_the_end_of_a_file_stays_there(tmp_path: Path) -> None:
    old = [f"l{i}\n" for i in range(1, 11)]
    diff = udiff(old, [*old, "end\n"])
    longer = "".join([*old, "x\n", "y\n"]).encode()
    res = apply_file(fpatch(diff), longer)
    assert outcomes(res) == [("failed", 8, 0, 0)]
    assert gnu(tmp_path, longer, diff, "-F", "0")[0] == 1
    moved = "".join(["x\n", "y\n", *old]).encode()  # still at the end: fine, with an offset
    res = apply_file(fpatch(diff), moved)
    assert outcomes(res) == [("offset", 10, 2, 0)]
    assert_same_as_gnu(tmp_path, moved, diff, res)


def test_insertion_without_context() -> None:
    fp = fpatch("--- a/f\n+++ b/f\n@@ -2,0 +3,2 @@\n+x\n+y\n")
    res = apply_file(fp, b"a\nb\nc\n")
    assert res.content == b"a\nb\nx\ny\nc\n"
    assert outcomes(res) == [("applied", 3, 0, 0)]


# --- new and deleted files -----------------------------------------------------------------


def test_new_file_from_git_header_gets_its_mode() -> None:
    diff = read_diff(SAMPLES / "git_files.diff")
    diff.resolve_paths(1, "")
    new = diff.files[2]
    res = apply_file(new, None)
    assert res.content == b"#!/bin/sh\necho new\n"
    assert res.mode == 0o755
    assert outcomes(res) == [("applied", 1, 0, 0)]


def test_new_file_from_plain_diff_is_0644_and_keeps_no_newline() -> None:
    fp = fpatch(
        "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n"
    )
    res = apply_file(fp, None)
    assert (res.content, res.mode) == (b"one\ntwo", 0o644)


def test_new_file_that_exists() -> None:
    fp = fpatch("--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+one\n")
    same = apply_file(fp, b"one\n")
    assert [h.status for h in same.hunks] == [Outcome.ALREADY]
    other = apply_file(fp, b"something else\n")
    assert [h.status for h in other.hunks] == [Outcome.FAILED]
    assert other.failed_hunks == fp.hunks


def test_deleted_file() -> None:
    diff = read_diff(SAMPLES / "git_files.diff")
    diff.resolve_paths(1, "")
    gone = diff.files[1]
    res = apply_file(gone, b"obsolete\nstuff\n", old_mode=0o644)
    assert res.deleted and res.content is None and res.ok
    more = apply_file(gone, b"obsolete\nstuff\nand more\n")
    assert not more.deleted and not more.ok
    assert "more lines" in (more.hunks[0].reason or "")
    already = apply_file(gone, None)
    assert [h.status for h in already.hunks] == [Outcome.ALREADY]


def test_deleting_an_empty_file_without_hunks() -> None:
    text = "diff --git a/e b/e\ndeleted file mode 100644\nindex e69de29..0000000\n"
    fp = fpatch(text)
    assert apply_file(fp, b"", old_mode=0o644).deleted
    assert not apply_file(fp, b"x\n", old_mode=0o644).ok


# --- what a hunk that did not apply reports ------------------------------------------------


def test_a_new_file_already_there_reports_its_hunk_and_keeps_the_file() -> None:
    fp = fpatch("--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+one\n")
    same = apply_file(fp, b"one\n", old_mode=0o755)
    assert same.hunks == [HunkResult(1, Outcome.ALREADY, 1, 0, 0, "the new file already exists")]
    assert (same.content, same.mode) == (b"one\n", 0o755)
    other = apply_file(fp, b"two\n", old_mode=0o755)
    assert other.hunks == [
        HunkResult(1, Outcome.FAILED, 1, 0, 0, "the new file already exists with other content")
    ]
    assert (other.content, other.mode, other.failed_hunks) == (None, 0o755, fp.hunks)


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        (
            "--- a/f\n+++ b/f\n@@ -3 +3 @@\n-a\n+b\n@@ -9,2 +9,2 @@\n-c\n+d\n x\n",
            Outcome.FAILED,
            "the file to patch does not exist",
        ),
        (
            "diff --git a/e b/f\nsimilarity index 50%\nrename from e\nrename to f\n"
            "--- a/e\n+++ b/f\n@@ -3 +3 @@\n-a\n+b\n@@ -9,2 +9,2 @@\n-c\n+d\n x\n",
            Outcome.FAILED,
            "the file to rename (e) does not exist",
        ),
        (
            "diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
            "--- a/f\n+++ b/f\n@@ -3 +3 @@\n-a\n+b\n@@ -9,2 +9,2 @@\n-c\n+d\n x\n",
            Outcome.FAILED,
            "the file to patch does not exist",
        ),
        (
            "--- a/f\n+++ /dev/null\n@@ -3,2 +0,0 @@\n-a\n-b\n",
            Outcome.ALREADY,
            "the file to delete is already gone",
        ),
    ],
)
def test_a_missing_file_reports_each_hunk_at_its_stated_line_and_why(
    text: str, status: Outcome, reason: str
) -> None:
    fp = fpatch(text)
    res = apply_file(fp, None, old_mode=0o600)
    want = [HunkResult(h.index, status, h.old_start, 0, 0, reason) for h in fp.hunks]
    assert [h.old_start for h in fp.hunks] in ([3, 9], [3])
    assert res.hunks == want
    assert (res.reason, res.content, res.failed_hunks) == (reason, None, fp.hunks)
    # the mode the diff gives the file, else the one it had
    assert res.mode == (fp.new_mode if fp.new_mode is not None else 0o600)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n", 0o644),
        (
            "diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
            "--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n",
            0o755,
        ),
    ],
)
def test_an_empty_range_on_a_missing_file_creates_it_with_the_diffs_mode_or_0644(
    text: str, mode: int
) -> None:
    res = apply_file(fpatch(text), None)
    assert (res.content, res.mode) == (b"x\ny\n", mode)
    assert res.hunks == [HunkResult(1, Outcome.APPLIED, 1, 0, 0)]


def test_deleting_a_file_reports_hunk_one_at_line_one() -> None:
    fp = fpatch("diff --git a/e b/e\ndeleted file mode 100644\nindex e69de29..0000000\n")
    assert apply_file(fp, b"", old_mode=0o644).hunks == [HunkResult(1, Outcome.APPLIED, 1, 0, 0)]
    assert apply_file(fp, b"x\n", old_mode=0o644).hunks == [
        HunkResult(1, Outcome.FAILED, 1, 0, 0, "the file to delete is not empty")
    ]


def test_a_file_to_delete_with_more_lines_fails_each_hunk_where_it_matched() -> None:
    fp = fpatch("--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n")
    res = apply_file(fp, b"z\na\nb\n", old_mode=0o644)
    why = "the file to delete has more lines than the diff removes"
    assert res.hunks == [HunkResult(1, Outcome.FAILED, 2, 0, 0, why)]
    assert (res.deleted, res.content, res.failed_hunks) == (False, None, fp.hunks)


def test_an_already_applied_hunk_says_so_and_the_next_never_matches_above_it() -> None:
    # hunk 1's result is at lines 4-6; hunk 2's old text ("X", "q", "r") is at line 5 too,
    # nearer its stated line 8 than its other place (21): hunks never match above the end
    # of the hunk before, applied or already applied
    old = [f"l{i}\n" for i in range(1, 31)]
    old[3:7] = ["p\n", "X\n", "q\n", "r\n"]
    old[20:23] = ["X\n", "q\n", "r\n"]
    diff = "--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n p\n-x\n+X\n q\n@@ -8,3 +8,3 @@\n X\n-q\n+Q\n r\n"
    res = apply_file(fpatch(diff), "".join(old).encode())
    assert res.hunks[0] == HunkResult(
        1, Outcome.ALREADY, 4, 0, 0, "the hunk's result is already in the file"
    )
    assert (res.hunks[1].status, res.hunks[1].line, res.hunks[1].offset) == (
        Outcome.AMBIGUOUS,
        21,
        13,
    )
    assert res.hunks[1].also_matches == [5]
    assert content_of(res).decode().splitlines()[3:6] == ["p", "X", "q"]
    assert content_of(res).decode().splitlines()[21] == "Q"


@pytest.mark.parametrize("copies", [2, 3, 9, 10, 30])
def test_an_ambiguous_hunk_names_at_most_eight_other_places(copies: int) -> None:
    body = "".join(f"u{i}\nsame\n" for i in range(copies)).encode()
    res = apply_file(fpatch("--- a/f\n+++ b/f\n@@ -2 +2 @@\n-same\n+new\n"), body)
    (h,) = res.hunks
    assert (h.status, h.line) == (Outcome.AMBIGUOUS, 2)
    assert h.also_matches == [2 * i + 2 for i in range(1, min(copies, 9))]
    where = ", ".join(map(str, h.also_matches))
    plural = "s" if copies > 2 else ""
    assert (
        h.reason
        == f"its old text also matches at line{plural} {where}; the nearest place was taken"
    )


@pytest.mark.parametrize("before", ["pristine", "with hunks 1 and 2 already applied"])
def test_a_hunk_after_hunks_that_added_lines_is_placed_and_named_in_the_right_numbering(
    before: str,
) -> None:
    # hunks 1 and 2 add three lines above hunk 3, whose old text (k1 same k2) is also at
    # lines 12-14 of the pristine file: its stated line is shifted by three, no offset, and
    # the other place is named in the file as it was before the diff
    old = [f"l{i}\n" for i in range(1, 41)]
    old[11:14] = old[24:27] = ["k1\n", "same\n", "k2\n"]
    diff = (
        "--- a/f\n+++ b/f\n@@ -3,2 +3,4 @@\n l3\n+i1\n+i2\n l4\n"
        "@@ -8,2 +10,3 @@\n l8\n+i3\n l9\n@@ -25,3 +28,3 @@\n k1\n-same\n+new\n k2\n"
    )
    fp = fpatch(diff)
    start = "".join(old)
    if before != "pristine":
        start = content_of(apply_file(fpatch(diff.split("@@ -25")[0]), start.encode())).decode()
    res = apply_file(fp, start.encode())
    first = "applied" if before == "pristine" else "already-applied"
    other = 12 if before == "pristine" else 15  # in the file as the diff found it
    assert [(h.status.value, h.line, h.offset) for h in res.hunks] == [
        (first, 3, 0),
        (first, 10, 0),
        ("ambiguous", 28, 0),
    ]
    assert res.hunks[2].also_matches == [other]
    assert content_of(res).decode().splitlines()[26:30] == ["l24", "k1", "new", "k2"]


@pytest.mark.parametrize(
    ("content", "status"), [(b"a\nc", "already-applied"), (b"a\nc\n", "failed")]
)
def test_a_result_already_there_counts_only_with_the_last_newline_the_diff_gives_it(
    content: bytes, status: str
) -> None:
    fp = fpatch("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n")
    assert [h.status.value for h in apply_file(fp, content).hunks] == [status]


@pytest.mark.parametrize(
    ("content", "status", "line"),
    [(b"A\nb\nz\n", "already-applied", 1), (b"x\nA\nb\nz\n", "failed", 1)],
)
def test_a_hunk_made_at_the_start_of_a_file_is_already_applied_only_there(
    content: bytes, status: str, line: int
) -> None:
    # no context above: the diff saw the file's first line, so its result counts only there
    fp = fpatch("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n")
    assert [(h.status.value, h.line) for h in apply_file(fp, content).hunks] == [(status, line)]


@pytest.mark.parametrize(
    ("content", "hunk", "also"),
    [
        # the other place at the file's first line
        ("same\nu\nsame\nv\n", "@@ -3 +3 @@\n-same\n+new\n", [1]),
        # the hunk's rarest line is not its first: the other place is where the text starts
        ("c\nr\nc\nc\nr\nc\n", "@@ -1,3 +1,3 @@\n c\n-r\n+n\n c\n", [4]),
        # its rarest line at the file's end, with no room for the rest of the text: no place
        ("a\nrare\nq\nz\nq\nz\nq\nz\nrare\n", "@@ -2,3 +2,3 @@\n rare\n-q\n+y\n z\n", []),
    ],
)
def test_an_ambiguous_hunks_other_places_are_where_its_whole_old_text_is(
    content: str, hunk: str, also: list[int]
) -> None:
    res = apply_file(fpatch("--- a/f\n+++ b/f\n" + hunk), content.encode())
    (h,) = res.hunks
    assert (h.status is Outcome.AMBIGUOUS, h.also_matches) == (bool(also), also)


@needs_patch
def test_a_hunk_made_at_a_files_start_is_not_ambiguous_for_its_text_elsewhere(
    tmp_path: Path,
) -> None:
    # no context above and stated at line 1: it can only be at the start, so nothing else
    # could have been chosen
    content = b"a\nb\nc\nx\na\nb\nc\n"
    diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n"
    res = apply_file(fpatch(diff), content)
    assert outcomes(res) == [("applied", 1, 0, 0)]
    assert_same_as_gnu(tmp_path, content, diff, res)


@needs_patch
@pytest.mark.parametrize("start", [2, 3])
def test_a_hunk_short_of_context_above_but_stated_below_line_1_may_move(
    tmp_path: Path, start: int
) -> None:
    # less context above than below, but not made at line 1: GNU patch does not hold it
    # to the file's start
    content = b"z\nq\nb\nc\nd\n"
    diff = f"--- a/f\n+++ b/f\n@@ -{start},2 +{start},2 @@\n-b\n+B\n c\n"
    res = apply_file(fpatch(diff), content)
    assert outcomes(res) == [("applied" if start == 3 else "offset", 3, 3 - start, 0)]
    assert_same_as_gnu(tmp_path, content, diff, res)


@pytest.mark.parametrize(
    ("content", "after"),
    [
        (b"a\r\nb\n", b"a\r\nb\nn\n"),  # a tie: LF
        (b"a\r\nb\r\nc\nd\ne\n", b"a\r\nb\r\nc\nd\ne\nn\n"),  # CRLF fewer: LF
        (b"a\r\nb\r\nc\n", b"a\r\nb\r\nc\nn\r\n"),  # CRLF more: CRLF
    ],
)
def test_added_lines_take_the_files_majority_ending_lf_on_a_tie(
    content: bytes, after: bytes
) -> None:
    n = content.count(b"\n")
    last = content.rstrip(b"\r\n").rsplit(b"\n", 1)[-1].rstrip(b"\r").decode()
    fp = fpatch(f"--- a/f\n+++ b/f\n@@ -{n} +{n},2 @@\n {last}\n+n\n")
    assert content_of(apply_file(fp, content)) == after


def test_crlf_diff_lines_longer_than_one_character_lose_only_their_cr_on_an_lf_file() -> None:
    fp = fpatch(b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n aa\r\n-bb\r\n+cc\r\n")
    assert content_of(apply_file(fp, b"aa\nbb\n")) == b"aa\ncc\n"


GIT_NEW = "diff --git a/f b/f\nnew file mode 100755\nindex 0000000..e69de29\n"
GIT_GONE = "diff --git a/f b/f\ndeleted file mode 100644\nindex e69de29..0000000\n"
GIT_MODE = "diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
GIT_MOVE = "diff --git a/e b/f\nsimilarity index 100%\nrename from e\nrename to f\n"
PLAIN = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
GONE = "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
NEW = "--- /dev/null\n+++ b/f\n@@ -0,0 +1,3 @@\n+x\n+y\n+z\n\\ No newline at end of file\n"
WHY_NEW = "the new file already exists with other content"
WHY_MISSING = "the file to patch does not exist"


@pytest.mark.parametrize(
    ("diff", "old", "hunks", "content", "mode", "deleted", "reason"),
    [
        (NEW, None, [("applied", 1, None)], b"x\ny\nz", 0o644, False, None),
        (
            NEW,
            b"x\ny\nz",
            [("already-applied", 1, "the new file already exists")],
            b"x\ny\nz",
            0o600,
            False,
            None,
        ),
        (NEW, b"q\n", [("failed", 1, WHY_NEW)], None, 0o600, False, None),
        (GIT_NEW, None, [("applied", 1, None)], b"", 0o755, False, None),
        (
            GIT_NEW,
            b"",
            [("already-applied", 1, "the new file already exists")],
            b"",
            0o755,
            False,
            None,
        ),
        (GIT_NEW, b"q\n", [("failed", 1, WHY_NEW)], None, 0o755, False, None),
        (
            "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+x\n",
            None,
            [("applied", 1, None)],
            b"x\n",
            0o644,
            False,
            None,
        ),
        (PLAIN, None, [("failed", 1, WHY_MISSING)], None, None, False, WHY_MISSING),
        (GIT_MODE, None, [("failed", 1, WHY_MISSING)], None, 0o755, False, WHY_MISSING),
        (
            GIT_MOVE,
            None,
            [("failed", 1, "the file to rename (e) does not exist")],
            None,
            None,
            False,
            "the file to rename (e) does not exist",
        ),
        (
            GIT_GONE,
            None,
            [("already-applied", 1, "the file to delete is already gone")],
            None,
            None,
            False,
            "the file to delete is already gone",
        ),
        (GIT_GONE, b"", [("applied", 1, None)], None, 0o600, True, None),
        (
            GIT_GONE,
            b"a\n",
            [("failed", 1, "the file to delete is not empty")],
            None,
            0o600,
            False,
            "not empty",
        ),
        (GIT_MODE, b"a\n", [("applied", 1, None)], b"a\n", 0o755, False, None),
        (GIT_MOVE, b"a\n", [("applied", 1, None)], b"a\n", 0o600, False, None),
        (PLAIN, b"a\n", [("applied", 1, None)], b"b\n", 0o600, False, None),
        (PLAIN, b"q\n", [("failed", 1, "context not found")], b"q\n", 0o600, False, None),
        (GONE, b"a\n", [("applied", 1, None)], None, 0o600, True, None),
        (
            GONE,
            b"a\nz\n",
            [("failed", 1, "the file to delete has more lines than the diff removes")],
            None,
            0o600,
            False,
            None,
        ),
    ],
)
def test_every_result_names_its_file_hunks_content_mode_and_why(
    diff: str,
    old: bytes | None,
    hunks: list[tuple[str, int, str | None]],
    content: bytes | None,
    mode: int,
    deleted: bool,
    reason: str | None,
) -> None:
    fp = fpatch(diff)
    # a file that is not there has no mode; one that is, 600
    res = apply_file(fp, old, old_mode=None if old is None else 0o600)
    assert res.path == fp.path == "f"
    assert [(h.index, h.status.value, h.line, h.offset, h.fuzz, h.reason) for h in res.hunks] == [
        (1, status, line, 0, 0, why) for status, line, why in hunks
    ]
    assert (res.content, res.mode, res.deleted, res.reason) == (content, mode, deleted, reason)
    failed = [h for h in res.hunks if h.status is Outcome.FAILED]
    assert res.failed_hunks == (list(fp.hunks) if failed or reason else [])


# --- line endings ------------------------------------------------------------------------------


@needs_patch
@pytest.mark.parametrize(
    ("name", "before", "after"),
    [
        ("noeol_old.diff", b"one\ntwo\nthree", b"one\ntwo\nthree\nfour\n"),
        ("noeol_new.diff", b"one\ntwo\nthree\n", b"one\ntwo\nTHREE"),
        ("noeol_both.diff", b"one\ntwo\nthree", b"one\ntwo\nTHREE"),
    ],
)
def test_no_newline_at_end_of_file(tmp_path: Path, name: str, before: bytes, after: bytes) -> None:
    res = apply_file(sample(name), before)
    assert res.content == after
    assert_same_as_gnu(tmp_path, before, (SAMPLES / name).read_bytes(), res)


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("noeol_old.diff", b"one\ntwo\nthree\n"),  # the diff says the file lacks its newline
        ("noeol_new.diff", b"one\ntwo\nthree"),  # the diff says the file has it
    ],
)
def test_no_newline_mismatch_fails(name: str, wrong: bytes) -> None:
    res = apply_file(sample(name), wrong)
    assert [h.status for h in res.hunks] == [Outcome.FAILED]


def test_last_line_of_the_diff_without_newline() -> None:
    res = apply_file(sample("last_line_no_newline.diff"), b"a\nb\nc\n")
    assert res.content == b"a\nB\nc\n"
    assert outcomes(res) == [("applied", 1, 0, 0)]


def test_lf_diff_on_a_crlf_file_keeps_crlf() -> None:
    fp = sample("two_hunks.diff")
    crlf = BASE30.replace("\n", "\r\n").encode()
    res = apply_file(fp, crlf)
    assert res.ok
    assert res.content == content_of(apply_file(fp, BASE30.encode())).replace(b"\n", b"\r\n")
    assert b"\r\nline five\r\n" in content_of(res)
    assert b"\nadded after 24\r\n" in content_of(res)


@needs_patch
def test_crlf_diff_on_a_crlf_file_matches_gnu_binary(tmp_path: Path) -> None:
    content = b"a\r\nb\r\nc\r\n"
    res = apply_file(sample("crlf_lines.diff"), content)
    assert res.content == b"a\r\nB\r\nc\r\nd\r\n"
    assert_same_as_gnu(
        tmp_path, content, (SAMPLES / "crlf_lines.diff").read_bytes(), res, 0, "--binary"
    )


def test_crlf_diff_on_an_lf_file_keeps_lf() -> None:
    res = apply_file(sample("crlf_lines.diff"), b"a\nb\nc\n")
    assert res.content == b"a\nB\nc\nd\n"


def test_mixed_endings_keep_each_lines_own_ending() -> None:
    fp = fpatch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    res = apply_file(fp, b"a\r\nb\nc\r\n")
    assert res.content == b"a\r\nB\r\nc\r\n"  # new lines take the file's majority ending


def test_a_last_line_the_hunk_keeps_keeps_its_own_ending() -> None:
    fp = fpatch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n")
    res = apply_file(fp, b"a\r\nb\r\nc\n")
    assert res.content == b"A\r\nb\r\nc\n"  # context is the file's: c keeps its LF at the end


def test_new_crlf_file_from_a_crlf_diff() -> None:
    fp = fpatch(b"--- /dev/null\n+++ b/w.txt\n@@ -0,0 +1,2 @@\n+a\r\n+b\r\n")
    assert apply_file(fp, None).content == b"a\r\nb\r\n"


@pytest.mark.parametrize(
    ("body", "content"),
    [("+a\r\n+b\n\\ No newline at end of file\n", b"a\r\nb"), ("+a\r\n+b\r\n", b"a\r\nb\r\n")],
)
def test_a_new_crlf_file_whose_last_line_has_no_newline_stays_crlf(
    body: str, content: bytes
) -> None:
    fp = fpatch(("--- /dev/null\n+++ b/w.txt\n@@ -0,0 +1,2 @@\n" + body).encode("latin-1"))
    assert apply_file(fp, None).content == content


# --- modes -------------------------------------------------------------------------------------


def test_mode_is_kept_without_a_mode_header() -> None:
    res = apply_file(sample("two_hunks.diff"), BASE30.encode(), old_mode=0o755)
    assert res.mode == 0o755


def test_git_mode_change_with_hunks() -> None:
    text = (
        "diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n"
        "--- a/s.sh\n+++ b/s.sh\n@@ -1 +1 @@\n-echo a\n+echo b\n"
    )
    res = apply_file(fpatch(text), b"echo a\n", old_mode=0o644)
    assert (res.content, res.mode, res.ok) == (b"echo b\n", 0o755, True)


def test_git_mode_change_alone() -> None:
    diff = read_diff(SAMPLES / "git_files.diff")
    diff.resolve_paths(1, "")
    run = diff.files[3]
    res = apply_file(run, b"#!/bin/sh\necho hi\n", old_mode=0o644)
    assert (res.content, res.mode) == (b"#!/bin/sh\necho hi\n", 0o755)
    assert outcomes(res) == [("applied", 1, 0, 0)]
    again = apply_file(run, b"#!/bin/sh\necho hi\n", old_mode=0o755)
    assert [h.status for h in again.hunks] == [Outcome.ALREADY]


@needs_patch
@pytest.mark.parametrize(
    ("before", "hunks", "after"),
    [
        (b"a", "@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+b\r\n+c\r\n", b"b\r\nc\r\n"),
        (b"", "@@ -0,0 +1,2 @@\n+b\r\n+c\r\n", b"b\r\nc\r\n"),
        (
            b"a",
            "@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n"
            "+b\r\n+c\n\\ No newline at end of file\n",
            b"b\r\nc",
        ),
        # the lines of every hunk count: one LF line in hunk 1 makes the diff's style LF
        (
            b"a",
            "@@ -0,0 +1 @@\n+b\n@@ -1,2 +2,2 @@\n-a\r\n-zz\n\\ No newline at end of file\n"
            "+y\r\n+zz\r\n",
            b"b\na",
        ),
        # hunk 2 fails, but its lines that end in the diff (a CR) still say the diff's style
        (
            b"a",
            "@@ -0,0 +1 @@\n+b\r\n@@ -1,2 +2,2 @@\n-a\r\n-zz\n\\ No newline at end of file\n"
            "+y\r\n+zz\r\n",
            b"b\r\na",
        ),
    ],
)
def test_lines_added_to_a_file_without_endings_keep_the_diffs_crlf_as_gnu_writes_them(
    tmp_path: Path, before: bytes, hunks: str, after: bytes
) -> None:
    # a side's last line before '\ No newline at end of file' carries no CR to judge the
    # diff's style by: only the lines that end in the diff count
    diff = "--- a/f\n+++ b/f\n" + hunks
    res = apply_file(fpatch(diff), before)
    assert content_of(res) == after
    assert gnu(tmp_path, before, diff)[1] == after


# --- small pieces ------------------------------------------------------------------------------


def test_split_lines_keeps_every_ending() -> None:
    assert split_lines(b"a\r\nb\nc") == (["a", "b", "c"], ["\r\n", "\n", ""])
    assert split_lines(b"") == ([], [])


def test_worst_and_ok() -> None:
    assert worst([Outcome.APPLIED, Outcome.OFFSET, Outcome.FUZZ]) is Outcome.FUZZ
    assert worst([Outcome.OFFSET, Outcome.ALREADY]) is Outcome.ALREADY
    assert worst([Outcome.ALREADY, Outcome.FAILED]) is Outcome.FAILED
    assert worst([]) is Outcome.APPLIED
    assert [o.ok for o in Outcome] == [True, True, True, True, True, True, False, False]
    assert Outcome.MERGED_SYNTAX.ok
    assert worst([Outcome.MERGED, Outcome.MERGED_SYNTAX]) is Outcome.MERGED_SYNTAX
    assert worst([Outcome.FUZZ, Outcome.AMBIGUOUS]) is Outcome.AMBIGUOUS
    assert worst([Outcome.AMBIGUOUS, Outcome.MERGED]) is Outcome.MERGED


def test_hunk_result_json_uses_the_contract_words() -> None:
    res = apply_file(sample("two_hunks.diff"), ("x\n" + BASE30).encode())
    assert records.plain(res.hunks[0]) == {
        "index": 1,
        "status": "offset",
        "line": 3,
        "offset": 1,
        "fuzz": 0,
    }


# --- agreement with GNU patch ------------------------------------------------------------------


def _random_case(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """An old file, a new file, and a target that differs from old elsewhere (lines added,
    removed, or a block repeated so that contexts appear twice)."""
    vocab = [f"w{i}\n" for i in range(6)]
    old = [rng.choice(vocab) for _ in range(rng.randint(0, 25))]
    new = list(old)
    for _ in range(rng.randint(1, 4)):
        i = rng.randint(0, len(new))
        r = rng.random()
        if r < 0.4:
            new.insert(i, rng.choice(["NEW\n", "X\n", "w1\n"]))
        elif new and r < 0.7:
            del new[min(i, len(new) - 1)]
        elif new:
            new[min(i, len(new) - 1)] = "CH\n"
    target = list(old)
    if len(target) > 1 and rng.random() < 0.5:
        i, j = sorted(rng.sample(range(len(target) + 1), 2))
        k = rng.randint(0, len(target))
        target[k:k] = target[i:j]
    for _ in range(rng.randint(0, 3)):
        i = rng.randint(0, len(target))
        if rng.random() < 0.7:
            target.insert(i, rng.choice([*vocab, "Z\n"]))
        elif target:
            del target[min(i, len(target) - 1)]
    if rng.random() < 0.2 and old and new and target:  # no newline at the end
        old[-1], new[-1], target[-1] = old[-1][:-1], new[-1][:-1], target[-1][:-1]
    return old, new, target


@needs_patch
@pytest.mark.parametrize("seed", range(4))
def test_random_diffs_agree_with_gnu_patch(tmp_path: Path, seed: int) -> None:
    """Wherever bakery applies every hunk, GNU patch does too, at the same lines, offsets
    and fuzz, with the same bytes; where GNU patch applies and bakery does not, bakery has
    found a hunk already applied."""
    rng = random.Random(seed)
    checked = 0
    for _ in range(60):
        old, new, target = _random_case(rng)
        if old == new:
            continue
        diff = _unified(old, new)
        content = "".join(target).encode()
        fuzz = rng.choice([0, 0, 1, 2])
        res = apply_file(fpatch(diff), content, fuzz=fuzz)
        if res.ok:
            assert_same_as_gnu(tmp_path, content, diff, res, fuzz)
            checked += 1
        else:
            rc, _, _ = gnu(tmp_path, content, diff, "-F", str(fuzz))
            assert rc != 0 or any(h.status is Outcome.ALREADY for h in res.hunks), diff
    assert checked > 10


def _unified(old: list[str], new: list[str]) -> str:
    """difflib's unified diff with ``\\ No newline at end of file`` markers, as diff -u."""
    out = []
    for line in difflib.unified_diff(old, new, "a/f", "b/f", n=3):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)
