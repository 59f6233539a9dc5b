"""The strict unified-diff parser: good samples match unidiff's reading; bad ones are
refused with one line naming the diff file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
import unidiff

from bakery.errors import DiffError, UnsafePathError
from bakery.patch.diffs import DEV_NULL
from bakery.patch.parse import read_diff
from tests.support.paths import PROJECT, SAMPLES

GOOD = [
    "two_hunks.diff",
    "git_files.diff",
    "noeol_old.diff",
    "noeol_new.diff",
    "noeol_both.diff",
    "crlf_lines.diff",
]

#: sample -> (line the error names, words the message holds)
BAD = {
    "bad_beyond_counts.diff": (7, "beyond the counts"),
    "bad_truncated.diff": (6, "truncated"),
    "bad_hunk_header.diff": (3, "malformed hunk header"),
    "bad_binary.diff": (3, "binary patch refused"),
    "bad_git_binary.diff": (3, "binary patch refused"),
    "bad_context_format.diff": (1, "context-format diff refused"),
    "bad_ed.diff": (1, "ed script refused"),
    "bad_hunk_order.diff": (7, "hunks must be in order"),
    "bad_prose_only.diff": (1, "no unified diff found"),
    "bad_hunk_without_header.diff": (2, "hunk without a file header"),
    "bad_symlink_mode.diff": (2, "a symlink (git mode 120000) refused"),
    "bad_noeol_middle.diff": (6, "is not after a last line"),
    "bad_line_kind.diff": (5, "bad line in hunk 1"),
    "bad_empty.diff": (None, "no unified diff found"),
}

UNSAFE = {
    "unsafe_absolute.diff": "absolute path",
    "unsafe_dotdot.diff": "'..' component",
    "unsafe_dotgit.diff": "writes into .git",
}


def parse(text: str | bytes, name: str = "t.diff") -> list:
    path = Path(name)
    data = text.encode() if isinstance(text, str) else text
    return read_diff(path, data).files


@pytest.mark.parametrize("sample", GOOD)
def test_good_samples_read_as_unidiff_reads_them(sample: str) -> None:
    diff = read_diff(SAMPLES / sample)
    ref = unidiff.PatchSet(
        (SAMPLES / sample).read_bytes().decode("latin-1").splitlines(keepends=True)
    )
    assert len(diff.files) == len(ref)
    for fp, rf in zip(diff.files, ref, strict=True):
        assert (fp.old_name, fp.new_name) == (rf.source_file, rf.target_file)
        assert fp.is_new == rf.is_added_file
        assert fp.is_delete == rf.is_removed_file
        assert len(fp.hunks) == len(rf)
        for h, rh in zip(fp.hunks, rf, strict=True):
            assert (h.old_start, h.old_len, h.new_start, h.new_len) == (
                rh.source_start,
                rh.source_length,
                rh.target_start,
                rh.target_length,
            )
            ref_lines = [
                (ln.line_type, ln.value.rstrip("\n")) for ln in rh if ln.line_type in " -+"
            ]
            assert h.lines == ref_lines


def test_sha256_and_name_are_of_the_file_bytes() -> None:
    import hashlib

    diff = read_diff(SAMPLES / "two_hunks.diff")
    assert diff.name == "two_hunks.diff"
    assert diff.sha256 == hashlib.sha256((SAMPLES / "two_hunks.diff").read_bytes()).hexdigest()


def test_git_headers_give_modes_new_and_deleted_files() -> None:
    files = read_diff(SAMPLES / "git_files.diff").files
    app, old, new, run = files
    assert (app.old_mode, app.new_mode, app.git) == (None, None, True)
    assert old.is_delete and old.old_mode == 0o644 and old.new_name == DEV_NULL
    assert new.is_new and new.new_mode == 0o755 and new.old_name == DEV_NULL
    assert (run.old_mode, run.new_mode, run.hunks) == (0o644, 0o755, [])


def test_format_patch_mail_with_diffstat_and_signature() -> None:
    files = read_diff(SAMPLES / "format_patch.diff").files
    assert [f.new_name for f in files] == [
        "b/pkg/app.py",
        DEV_NULL,
        "b/tools/new.sh",
        "b/tools/run.sh",
    ]
    assert files[3].new_mode == 0o755


def test_prose_with_dash_items_and_a_signature_around_a_diff() -> None:
    (fp,) = read_diff(SAMPLES / "prose_around.diff").files
    assert fp.hunks[0].lines == [(" ", "a"), ("-", "b"), ("+", "B"), (" ", "c")]


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_mails_signature_right_after_the_last_hunk_ends_the_diff_in_lf_and_crlf(eol: str) -> None:
    hunk = ["--- a/x", "+++ b/x", "@@ -1 +1 @@", "-a", "+b"]
    text = eol.join([*hunk, "-- ", "2.40.0", ""])
    (fp,) = parse(text)
    assert [(k, t.rstrip("\r")) for k, t in fp.hunks[0].lines] == [("-", "a"), ("+", "b")]
    # any other '-' line there is one line too many for the hunk's counts
    with pytest.raises(DiffError, match="beyond the counts") as info:
        parse(text.replace("-- ", "-- x"))
    assert info.value.line == 6


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("3d\n", 1),
        ("1,2d\n5d\n", 1),
        ("prose\n4,9d\n", 2),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n7d\n", 6),
    ],
)
def test_an_ed_script_of_deletions_only_is_refused(text: str, line: int) -> None:
    # no lone "." follows a deletion, as one follows an append or a change
    with pytest.raises(DiffError) as info:
        parse(text)
    assert (info.value.line, info.value.problem) == (
        line,
        "ed script refused (bakery never runs ed commands)",
    )


@pytest.mark.parametrize("command", ["3a", "1,2c", "7d"])
def test_prose_that_looks_like_an_ed_command_before_a_diff_is_prose(command: str) -> None:
    # what follows decides: a unified diff's header before any lone "."
    text = f"Fixes the cache.\n{command}\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert [fp.new_name for fp in parse(text)] == ["b/x"]
    with pytest.raises(DiffError, match="ed script refused"):
        parse(f"{command}\ntext\n.\n")


@pytest.mark.parametrize("last", ["*** end of message ***", "*** "])
def test_a_last_line_of_stars_after_a_diff_is_prose(last: str) -> None:
    (fp,) = parse(f"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n{last}\n")
    assert fp.hunks[0].lines == [("-", "a"), ("+", "b")]


def test_last_line_without_newline_is_accepted() -> None:
    (fp,) = read_diff(SAMPLES / "last_line_no_newline.diff").files
    h = fp.hunks[0]
    assert h.lines[-1] == (" ", "c")
    assert not h.old_noeol and not h.new_noeol


def test_the_users_dcp2_diff_parses() -> None:
    path = (
        PROJECT
        / "launcher"
        / "dcp2"
        / "diffs"
        / "02-model_executor_kernels_attention_dsa_candidate_blocks.py.diff"
    )
    assert not path.read_bytes().endswith(b"\n")  # the case this test is about
    (fp,) = read_diff(path).files
    assert fp.old_name == "baked-ours/model_executor/kernels/attention/dsa/candidate_blocks.py"
    assert [h.old_start for h in fp.hunks] == [1, 27, 43, 137, 174, 196]
    assert fp.hunks[-1].lines[-1] == (" ", "        return")


@pytest.mark.parametrize(
    ("sample", "old_noeol", "new_noeol"),
    [
        ("noeol_old.diff", True, False),
        ("noeol_new.diff", False, True),
        ("noeol_both.diff", True, True),
    ],
)
def test_no_newline_markers(sample: str, old_noeol: bool, new_noeol: bool) -> None:
    (fp,) = read_diff(SAMPLES / sample).files
    h = fp.hunks[-1]
    assert (h.old_noeol, h.new_noeol) == (old_noeol, new_noeol)


def test_noeol_marker_after_a_context_line_sets_both_sides() -> None:
    (fp,) = parse("--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n+new\n a\n b\n\\ No newline at end of file\n")
    h = fp.hunks[0]
    assert h.old_noeol and h.new_noeol


def test_crlf_lines_keep_their_cr_in_the_hunk() -> None:
    (fp,) = read_diff(SAMPLES / "crlf_lines.diff").files
    assert fp.hunks[0].lines[0] == (" ", "a\r")


def test_timestamps_are_dropped_and_quoted_names_unquoted() -> None:
    (fp,) = parse(
        '--- "a/sp ace\\tx"\t2024-01-01 00:00:00\n+++ "b/sp ace\\tx"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    assert fp.old_name == "a/sp ace\tx"
    assert fp.new_name == "b/sp ace\tx"


def test_hunk_header_without_counts_means_one_line() -> None:
    (fp,) = parse("--- a/x\n+++ b/x\n@@ -3 +3 @@\n-a\n+b\n")
    h = fp.hunks[0]
    assert (h.old_start, h.old_len, h.new_start, h.new_len) == (3, 1, 3, 1)


def test_empty_line_in_a_hunk_is_empty_context() -> None:
    (fp,) = parse("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n")
    assert fp.hunks[0].lines == [(" ", "a"), (" ", ""), ("-", "b"), ("+", "B")]


def test_render_round_trips_a_hunk() -> None:
    text = (SAMPLES / "noeol_both.diff").read_text()
    (fp,) = parse(text)
    body = text.split("\n", 2)[2]
    assert fp.hunks[0].render() == body


@pytest.mark.parametrize("sample", sorted(BAD))
def test_bad_samples_name_file_and_line(sample: str) -> None:
    line, words = BAD[sample]
    with pytest.raises(DiffError) as info:
        read_diff(SAMPLES / sample)
    err = info.value
    assert (err.line or None) == line
    assert words in err.problem
    msg = str(err)
    assert "\n" not in msg
    assert msg.startswith(f"{SAMPLES / sample}:{line}: " if line else f"{SAMPLES / sample}: ")


@pytest.mark.parametrize("sample", sorted(UNSAFE))
def test_unsafe_paths_are_refused_when_resolved(sample: str) -> None:
    diff = read_diff(SAMPLES / sample)
    with pytest.raises(UnsafePathError, match=UNSAFE[sample]) as info:
        diff.resolve_paths(1, "")
    assert info.value.line == 1


def test_resolve_paths_strips_and_adds_root() -> None:
    diff = read_diff(SAMPLES / "git_files.diff")
    diff.resolve_paths(1, "vllm")
    assert [fp.path for fp in diff.files] == [
        "vllm/pkg/app.py",
        "vllm/pkg/old.py",
        "vllm/tools/new.sh",
        "vllm/tools/run.sh",
    ]


def test_a_plain_diff_with_two_names_patches_the_one_that_exists() -> None:
    diff = read_diff(Path("r.diff"), b"--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n")
    for there, chosen in (({"y"}, "y"), ({"x"}, "x"), ({"x", "y"}, "x"), (set(), "x")):
        diff.resolve_paths(1, "", there.__contains__)
        (fp,) = diff.files
        assert (fp.path, fp.other_path) == (chosen, ({"x", "y"} - {chosen}).pop())


def test_a_git_diff_whose_names_differ_without_rename_lines_is_refused() -> None:
    diff = read_diff(Path("r.diff"), b"diff --git a/x b/y\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(DiffError, match="without 'rename from' or 'copy from' lines"):
        diff.resolve_paths(1, "")


def test_one_file_patched_twice_in_one_diff_is_two_file_patches_in_order() -> None:
    twice = read_diff(
        Path("t.diff"),
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -5 +5 @@\n-c\n+d\n",
    )
    twice.resolve_paths(1, "")
    assert [(fp.path, fp.diff_line) for fp in twice.files] == [("x", 1), ("x", 6)]


def test_too_few_path_parts_for_the_strip_count() -> None:
    diff = read_diff(Path("s.diff"), b"--- x\n+++ x\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(DiffError, match="fewer than 2 parts"):
        diff.resolve_paths(1, "")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("--- a/x\n+++ b/x\n", 1, "file header without hunks"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", 1, "both sides are /dev/null"),
        ("--- /dev/null\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", 3, "new file must have one hunk"),
        ("--- a/x\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n", 3, "deleted file must have one hunk"),
        ("--- a/x\n+++ b/x\n@@ -0,1 +0,1 @@\n-a\n+b\n", 3, "starts at line 0"),
        ("--- a/x\n+++ b/x\n@@ -1234567890,1 +1,1 @@\n-a\n+b\n", 3, "too large"),
        (
            "diff --git a/x b/x\nnew file mode 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
            3,
            "'new file mode' and the --- header disagree",
        ),
        ("diff --git a/x b/x\nindex 1..2\n", 1, "nothing to apply"),
        ("diff --git a/x b/x\ngarbage\n", 2, "unexpected line in git header"),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n"
            "\\ No newline at end of file\n",
            7,
            "beyond the counts",
        ),
    ],
)
def test_malformed_inline(text: str, line: int, words: str) -> None:
    with pytest.raises(DiffError) as info:
        parse(text)
    assert info.value.line == line
    assert words in info.value.problem


@pytest.mark.parametrize(
    "number", ["100000001", "1234567890", "0000000001", "9" * 4301, "1" * 100_000]
)
@pytest.mark.parametrize("where", range(4))
def test_a_hunk_header_number_past_nine_digits_or_the_limit_is_refused_naming_its_line(
    number: str, where: int
) -> None:
    nums = ["1", "1", "1", "1"]
    nums[where] = number
    text = f"--- a/x\n+++ b/x\n@@ -{nums[0]},{nums[1]} +{nums[2]},{nums[3]} @@\n-a\n+b\n"
    with pytest.raises(DiffError) as info:
        parse(text)
    assert (info.value.line, info.value.problem) == (3, "line number in hunk header too large")
    ok = text.replace(number, "99999999" if where % 2 == 0 else "1")
    assert parse(ok)[0].hunks  # the largest line number taken; the count as stated


@pytest.mark.parametrize("name", ["d/voilà", "d/Å", "d/ä", "d/x y"])
@pytest.mark.parametrize("stamp", ["", "\t2024-01-01 00:00:00.000000000 +0000"])
def test_a_utf8_name_keeps_its_last_byte_whatever_latin_1_calls_it(name: str, stamp: str) -> None:
    # (and loses the spaces after it, as before a timestamp)
    # "à" is C3 A0 and "Å" C3 85 in UTF-8: read a byte a char, their last bytes are
    # latin-1's no-break space and next line, which str.strip() would take for blanks
    text = f"--- a/{name}  {stamp}\n+++ b/{name} {stamp}\n@@ -1 +1 @@\n-a\n+b\n"
    diff = read_diff(Path("t.diff"), text.encode())
    diff.resolve_paths(1, "")
    assert [fp.path for fp in diff.files] == [name]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ('--- ""\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n', 1, "empty file name in header"),
        ('--- a/x\n+++ ""\t2024-01-01\n@@ -1 +1 @@\n-a\n+b\n', 2, "empty file name in header"),
        ('--- "a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n', 1, "unterminated quoted name '\"a/x'"),
        (
            "diff --git a/f b/f\n--- a/f\n",
            2,
            "git diff header lacks filename information: '--- a/f' without its +++ line",
        ),
        (
            "diff --git a/f b/f\n+++ b/f\n",
            2,
            "git diff header lacks filename information: '+++ b/f' without its --- line",
        ),
        ("*** a/x\n**** b/x\n", 1, "context-format diff refused; regenerate it with `diff -u`"),
        (
            "prose\n*** 1,2 ****\n--- 1,2 ----\n",
            2,
            "context-format diff refused; regenerate it with `diff -u`",
        ),
        (
            "diff --git a/x\nnew file mode 100644\n",
            1,
            "malformed 'diff --git' header: expected two names",
        ),
        (
            'diff --git "a/x b/x\nnew file mode 100644\n',
            1,
            "bad quoted name in 'diff --git' header",
        ),
        (
            "diff --git a/x b/y\nrename from x\nrename from x\nrename to y\n",
            3,
            "git header 'rename from x' repeats or contradicts an earlier line",
        ),
        (
            "diff --git a/x b/y\nrename from x\ncopy to y\n",
            3,
            "git header 'copy to y' repeats or contradicts an earlier line",
        ),
        (
            "diff --git a/x b/x\nold mode 100644\nold mode 100755\n",
            3,
            "git header 'old mode 100755' repeats or contradicts an earlier line",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n",
            5,
            "'\\ No newline at end of file' is not after a last line",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n x\n",
            7,
            "line beyond the counts in the hunk header",
        ),
    ],
)
def test_refusals_say_exactly_what_and_where(text: str, line: int, problem: str) -> None:
    with pytest.raises(DiffError) as info:
        parse(text)
    assert (info.value.line, info.value.problem) == (line, problem)


LONG = "x" * 70 + "y" * 30


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"diff --git a/f b/f\n--- a/{LONG}\n", 2),  # git diff header lacks filename information
        (f"diff --git a/f b/f\n+++ b/{LONG}\n", 2),
        (f"diff --git a/f b/f\nold mode 100644\n{LONG}\n", 3),  # unexpected line in git header
        (f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n?{LONG}\n", 5),  # bad line in hunk 1
        (f"diff --git a/f b/g\nrename from f\nrename from {LONG}\n", 3),
    ],
)
def test_a_refusal_quotes_the_first_60_characters_of_a_long_line(text: str, line: int) -> None:
    with pytest.raises(DiffError) as info:
        parse(text)
    said = text.split("\n")[line - 1]
    assert info.value.line == line
    assert repr(said[:60]) in info.value.problem, info.value.problem
    assert repr(said[:61]) not in info.value.problem


@pytest.mark.parametrize(("marker_after", "old_noeol"), [("+b", False), ("-a", True)])
def test_the_other_sides_lines_may_follow_a_sides_last_line_and_its_marker(
    marker_after: str, old_noeol: bool
) -> None:
    # as GNU patch reads them: "+b", its marker, then "-a" (checked: patch writes "b")
    other = "-a" if marker_after == "+b" else "+b"
    text = f"--- a/x\n+++ b/x\n@@ -1 +1 @@\n{marker_after}\n\\ No newline at end of file\n{other}\n"
    (fp,) = parse(text)
    (h,) = fp.hunks
    assert (sorted(h.lines), h.old_noeol, h.new_noeol) == (
        [("+", "b"), ("-", "a")],
        old_noeol,
        not old_noeol,
    )
    # a line of the same side, or context, may not
    for after in (marker_after[0] + "c", " c"):
        bad = text.replace(f"{other}\n", f"{after}\n")
        with pytest.raises(DiffError) as info:
            parse(bad)
        assert info.value.line == 6


@pytest.mark.parametrize(
    ("lines", "old_noeol", "new_noeol"),
    [("-a\n+b\n", False, True), ("+b\n-a\n", True, False), (" a\n", True, True)],
)
def test_a_marker_right_after_a_hunks_last_line_ends_that_lines_sides(
    lines: str, old_noeol: bool, new_noeol: bool
) -> None:
    text = f"--- a/x\n+++ b/x\n@@ -1 +1 @@\n{lines}\\ No newline at end of file\n"
    (fp,) = parse(text)
    assert (fp.hunks[0].old_noeol, fp.hunks[0].new_noeol) == (old_noeol, new_noeol)


@pytest.mark.parametrize("before", ["", "--- a/k\n+++ b/k\n@@ -1 +1 @@\n-a\n+b\n"])
@pytest.mark.parametrize(
    "header",
    [
        "diff --git a/../x b/../x\nnew file mode 100644\n",
        "diff --git a/.git/x b/.git/x\nold mode 100644\nnew mode 100755\n",
        "diff --git a/x b/y\nrename from x\nrename to x\n",
    ],
)
def test_a_refused_file_patch_without_hunks_names_its_diff_git_line(
    before: str, header: str
) -> None:
    diff = read_diff(Path("t.diff"), (before + header).encode())
    with pytest.raises(DiffError) as info:
        diff.resolve_paths(1, "")
    assert info.value.line == before.count("\n") + 1


def test_unreadable_file_is_a_diff_error(tmp_path: Path) -> None:
    with pytest.raises(DiffError, match="cannot read"):
        read_diff(tmp_path / "missing.diff")


def test_two_markers_in_a_row_inside_a_hunk_are_refused_at_the_second() -> None:
    text = (
        "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n"
        "\\ No newline at end of file\n+b\n"
    )
    with pytest.raises(DiffError) as info:
        parse(text)
    assert (info.value.line, info.value.problem) == (
        6,
        "'\\ No newline at end of file' is not after a last line",
    )
