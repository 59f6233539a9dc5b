"""A file patch's header lines read as GNU patch and git write them (``patch/headers.py``):
git's quoted names and their escapes, the refusals that name the diff and its line, Linux's
limits on a name, the epoch timestamp of a side ``diff -N`` says does not exist, and the
trailing parts two names share (where git's ``diff --git a/x b/y`` line is cut)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakery.errors import DiffError
from bakery.patch.headers import STAMP_RE, header_name, is_epoch, shared_tail, unquote

DIFF = Path("series/01.diff")


@pytest.mark.parametrize(
    ("quoted", "name"),
    [
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ('"t\\tn\\n"', "t\tn\n"),
        ('"caf\\303\\251"', "caf\xc3\xa9"),  # octal bytes, kept as latin-1 text
        ("plain name", "plain name"),
    ],
)
def test_git_quoted_names_are_unquoted_escape_by_escape(quoted: str, name: str) -> None:
    assert unquote(DIFF, 3, quoted) == name


@pytest.mark.parametrize(
    ("quoted", "problem"),
    [
        ('"a\\q"', "bad escape in quoted name '\"a\\\\q\"'"),
        ('"a\\"', "bad quoted name '\"a\\\\\"'"),
    ],
)
def test_a_bad_escape_is_refused_naming_the_diff_and_its_line(quoted: str, problem: str) -> None:
    with pytest.raises(DiffError) as e:
        unquote(DIFF, 7, quoted)
    assert (e.value.path, e.value.line, e.value.problem) == (str(DIFF), 7, problem)
    assert e.value.message == f"{DIFF}:7: {problem}"


def test_a_long_name_of_short_parts_is_taken_and_a_part_past_255_is_not() -> None:
    short_parts = "/".join(["x" * 200] * 3)  # 602 characters, each part under NAME_MAX
    assert unquote(DIFF, 1, short_parts) == short_parts
    with pytest.raises(DiffError, match="file name too long"):
        unquote(DIFF, 1, "a/" + "y" * 256)


def test_a_header_name_refusal_names_its_line() -> None:
    with pytest.raises(DiffError) as e:
        header_name(DIFF, 12, '"a/\\q"\t2024-01-01 00:00:00')
    assert e.value.line == 12


def test_an_unterminated_quoted_name_is_shown_cut_to_80_characters() -> None:
    name = '"' + "n" * 100
    with pytest.raises(DiffError) as e:
        header_name(DIFF, 2, name)
    assert e.value.problem == f"unterminated quoted name {name[:80]!r}"


@pytest.mark.parametrize(
    ("rest", "name", "epoch"),
    [
        ("a/x.py\t1970-01-01 00:00:00.000000000 +0000", "a/x.py", True),
        ("a/x.py\t1970-01-01 01:00:00.000000000 +0100", "a/x.py", True),
        ("a/x.py\t1970-01-01 00:00:05.000000000 +0000", "a/x.py", False),
        ("a/x.py\t1970-01-01 00:00:00.5 +0000", "a/x.py", False),
        ("a/x.py\t2024-01-01 00:00:00", "a/x.py", False),
        ('"a/"sub/x.py\t2024-01-01 00:00:00', "a/sub/x.py", False),
        ("a/x y.py 2024-01-01 10:00:00 +0000", "a/x y.py", False),
    ],
)
def test_a_header_gives_its_name_and_whether_its_side_is_the_epoch(
    rest: str, name: str, epoch: bool
) -> None:
    assert header_name(DIFF, 1, rest) == (name, epoch)


def test_only_the_first_second_of_1970_utc_is_the_epoch() -> None:
    def epoch(stamp: str) -> bool:
        m = STAMP_RE.search(stamp)
        assert m is not None
        return is_epoch(m)

    assert epoch("\t1970-01-01 00:00:00")
    assert not epoch("\t1970-01-01 00:00:01")
    assert not epoch("\t1970-01-01 00:01:00")
    assert not epoch("\t1970-02-30 00:00:00")  # no such day: not the epoch, not a crash


@pytest.mark.parametrize(
    ("a", "b", "shared"),
    [
        ("x/c.py", "y/x/c.py", 2),
        ("x/c.py", "q/r/x/c.py", 2),
        ("c.py", "q/r/c.py", 1),
        ("x/c.py", "x/d.py", 0),
        ("a/b/c", "a/b/c", 3),
    ],
)
def test_shared_tail_counts_the_trailing_parts_two_names_share(a: str, b: str, shared: int) -> None:
    assert shared_tail(a, b) == shared
