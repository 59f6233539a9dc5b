"""Hunks that overlap by one line (issue 50): a diff whose second hunk starts on the last
line of the first is refused by the parser; one that starts on the line after is taken.
The engine never matches a hunk on a line the one before it changed, also where only the
file's text (not the stated lines) would put it there, as GNU patch does."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakery.errors import DiffError
from bakery.patch.engine import apply_file, split_lines
from bakery.patch.parse import read_diff
from tests.support.gnupatch import assert_same_as_gnu, fpatch, gnu, needs_patch, outcomes

FILE = "".join(f"{c}\n" for c in "abcdefghij")


def _hunk(old_start: int, first: int, count: int) -> str:
    """A hunk over lines first..first+count-1 of FILE (1-based) that uppercases the
    middle one, stated at old_start; count 0: one line inserted after old_start."""
    if count == 0:
        return f"@@ -{old_start},0 +{old_start + 1},1 @@\n+new after {old_start}\n"
    lines = [FILE.splitlines()[i - 1] for i in range(first, first + count)]
    mid = count // 2
    body = [f" {x}" for x in lines[:mid]] + [f"-{lines[mid]}", f"+{lines[mid].upper()}"]
    body += [f" {x}" for x in lines[mid + 1 :]]
    return f"@@ -{old_start},{count} +{old_start},{count} @@\n" + "\n".join(body) + "\n"


def _diff(*hunks: tuple[int, int]) -> bytes:
    """(start, count) per hunk, each stated where its lines are."""
    text = "--- a/f.txt\n+++ b/f.txt\n" + "".join(_hunk(s, s, n) for s, n in hunks)
    return text.encode()


@pytest.mark.parametrize(
    ("hunks", "overlap"),
    [
        (((1, 3), (3, 3)), True),  # hunk 2 starts on hunk 1's last line (3)
        (((1, 3), (4, 3)), False),  # on the line after it
        (((2, 3), (4, 2)), True),
        (((2, 3), (5, 2)), False),
        (((1, 3), (2, 0)), True),  # an insertion after line 2, inside hunk 1
        (((1, 3), (3, 0)), False),  # an insertion after hunk 1's last line
        (((2, 0), (2, 2)), True),  # insertion after line 2, then line 2 changed
        (((2, 0), (3, 2)), False),
        (((1, 2), (3, 2), (4, 2)), True),  # the third overlaps the second by one
        (((1, 2), (3, 2), (5, 2)), False),
    ],
)
def test_hunks_that_overlap_by_one_line_are_refused(
    hunks: tuple[tuple[int, int], ...], overlap: bool
) -> None:
    data = _diff(*hunks)
    if overlap:
        with pytest.raises(
            DiffError, match=r"overlaps or precedes hunk \d \(hunks must be in order"
        ):
            read_diff(Path("t.diff"), data)
        return
    (fp,) = read_diff(Path("t.diff"), data).files
    assert [(h.old_start, h.old_len) for h in fp.hunks] == list(hunks)


@needs_patch
@pytest.mark.parametrize("hunks", [((1, 3), (4, 3)), ((2, 3), (5, 3)), ((1, 3), (3, 0))])
def test_adjacent_hunks_apply_as_gnu_patch_applies_them(
    tmp_path: Path, hunks: tuple[tuple[int, int], ...]
) -> None:
    data = _diff(*hunks)
    res = apply_file(fpatch(data), FILE.encode())
    assert res.ok and all(o[0] == "applied" for o in outcomes(res)), outcomes(res)
    assert_same_as_gnu(tmp_path, FILE.encode(), data, res)


@needs_patch
@pytest.mark.parametrize(
    ("second", "applies"),
    [
        # old text "C d e": found only on the line hunk 1 changed (c -> C): never there
        ("@@ -6,3 +6,3 @@\n C\n-d\n+D\n e\n", False),
        # old text "e f g", stated 2 lines low: found below hunk 1, taken with an offset
        ("@@ -7,3 +7,3 @@\n e\n-f\n+F\n g\n", True),
    ],
)
def test_a_hunk_never_matches_on_a_line_the_one_before_changed(
    tmp_path: Path, second: str, applies: bool
) -> None:
    """Hunk 2 is stated after hunk 1 (the parser takes it), but the file puts its old
    text where hunk 1 wrote: it fails, as with GNU patch, rather than rewrite hunk 1's
    line; one line below hunk 1, it applies with its offset."""
    data = ("--- a/f.txt\n+++ b/f.txt\n" + _hunk(2, 2, 3) + second).encode()
    res = apply_file(fpatch(data), FILE.encode())
    if applies:
        assert [o[0] for o in outcomes(res)] == ["applied", "offset"], outcomes(res)
        assert_same_as_gnu(tmp_path, FILE.encode(), data, res)
        return
    assert [o[0] for o in outcomes(res)] == ["applied", "failed"], outcomes(res)
    assert split_lines(res.content or b"")[0][:5] == ["a", "b", "C", "d", "e"]
    rc, out, report = gnu(tmp_path, FILE.encode(), data)
    assert rc != 0 and report[2][0] == "FAILED" and out == res.content, report
