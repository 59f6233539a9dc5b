"""Property tests of the parser and the hunk engine (hypothesis).

- A diff that difflib makes from a source and a target (any context, LF or CRLF, with or
  without a final newline on either side) applied to the source gives the target, byte for
  byte; and its hunks rendered again parse to the same hunks.
- Damage to such a diff (flipped bytes, truncation, lines dropped, doubled or inserted) never
  makes ``read_diff`` or ``apply_file`` raise anything but bakery's own errors, a refusal
  names a line that exists, and every result keeps its promises (``assert_consistent``),
  also on a source shifted by a few lines (offsets) and with fuzz.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bakery.errors import BakeryError, DiffError
from bakery.patch.diffs import FilePatch
from bakery.patch.engine import FileResult, Outcome, apply_file
from bakery.patch.parse import read_diff

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Line texts chosen to look like diff syntax once prefixed, plus non-UTF-8 and empty ones.
TOKENS = [
    "a",
    "b",
    "c",
    "",
    " ",
    "-",
    "+",
    "--- a/x",
    "+++ b/x",
    "@@ -1 +1 @@",
    "\\ No newline at end of file",
    "\t",
    "caf\xe9",
    "\xff\xfe",
    "x" * 30,
    "1a",
    ".",
]

lines_st = st.lists(st.sampled_from(TOKENS), max_size=12)


def render(lines: list[str], eol: str, final_newline: bool) -> str:
    if not lines:
        return ""
    text = eol.join(lines)
    return text + eol if final_newline else text


def make_diff(src: str, dst: str, context: int) -> str | None:
    """``diff -u``'s output for src -> dst, with its '\\ No newline' markers."""
    out = []
    for line in difflib.unified_diff(
        src.splitlines(keepends=True),
        dst.splitlines(keepends=True),
        "a/vllm/x.py",
        "b/vllm/x.py",
        n=context,
        lineterm="\n",
    ):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out) or None


@st.composite
def diff_cases(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    """(source, target, diff) as bytes, source != target."""
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    src_lines, dst_lines = draw(lines_st), draw(lines_st)
    src = render(src_lines, eol, draw(st.booleans()))
    dst = render(dst_lines, eol, draw(st.booleans()))
    diff = make_diff(src, dst, draw(st.integers(0, 3)))
    if diff is None:
        dst = src + "extra" + eol
        diff = make_diff(src, dst, 3)
    assert diff is not None
    return src.encode("latin-1"), dst.encode("latin-1"), diff.encode("latin-1")


def _apply(diff: bytes, source: bytes | None) -> list[bytes | None]:
    parsed = read_diff(Path("01-prop.diff"), diff)
    parsed.resolve_paths(1, "")
    out = []
    for fp in parsed.files:
        res = apply_file(fp, source, 0, 0o644)
        assert res.ok, [(h.status, h.reason) for h in res.hunks]
        out.append(res.content)
    return out


@PROPS
@given(diff_cases())
@example(
    (
        b"a\nb\n",
        b"a\nb",
        b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n"
        b"\\ No newline at end of file\n",
    )
)
@example((b"", b"a\r\n", b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -0,0 +1 @@\n+a\r\n"))
def test_generated_diff_applies_to_its_source(case: tuple[bytes, bytes, bytes]) -> None:
    source, target, diff = case
    assert _apply(diff, source) == [target]


@settings(PROPS, max_examples=100)
@given(diff_cases())
def test_rendered_hunks_parse_the_same(case: tuple[bytes, bytes, bytes]) -> None:
    _, _, diff = case
    first = read_diff(Path("01-prop.diff"), diff)
    again = "--- a/vllm/x.py\n+++ b/vllm/x.py\n" + "".join(h.render() for h in first.files[0].hunks)
    second = read_diff(Path("02-prop.diff"), again.encode("latin-1"))
    strip = [
        (h.old_start, h.old_len, h.new_start, h.new_len, h.lines, h.old_noeol, h.new_noeol)
        for h in first.files[0].hunks
    ]
    assert strip == [
        (h.old_start, h.old_len, h.new_start, h.new_len, h.lines, h.old_noeol, h.new_noeol)
        for h in second.files[0].hunks
    ]


# --- damage --------------------------------------------------------------------------------------

GARBAGE = [
    b"@@ -1 +1 @@",
    b"@@ -99999999999 +1 @@",
    b"--- /dev/null",
    b"+++ /dev/null",
    b"diff --git a/x b/x",
    b"rename from x",
    b"new file mode 120000",
    b"old mode 100644",
    b"new mode 100755",
    b"GIT binary patch",
    b"Binary files a and b differ",
    b"*** 1,3 ****",
    b"***************",
    b"2c",
    b".",
    b"\\ No newline at end of file",
    b"\\",
    b"+",
    b"-",
    b" ",
    b"",
    b"\x00",
    b'--- "a/\\056\\056/x"',
    b"+++ b/.git/x",
    b"--- a/vllm/x.py",
    b"+++ b/vllm/x.py",
    b"index 0000000..1111111 100644",
    b"deleted file mode 100644",
    b"\xff\xfe\xfd",
    b"@@ -0,0 +0,0 @@",
    b"@@ -1,0 +1 @@",
]


@st.composite
def damaged(draw: st.DrawFn) -> tuple[bytes, bytes]:
    source, _, diff = draw(diff_cases())
    data = bytearray(diff)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "truncate", "drop", "double", "insert", "swap"]))
        lines = bytes(data).split(b"\n")
        if how == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(
                st.sampled_from(
                    [
                        data[i] ^ 0xFF,
                        ord("\n"),
                        ord("-"),
                        ord("+"),
                        ord(" "),
                        ord("@"),
                        ord("\\"),
                        0,
                        ord("\r"),
                        ord("1"),
                        ord("9"),
                    ]
                )
            )
            continue
        if how == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
            continue
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if how == "drop" and lines:
            del lines[i]
        elif how == "double" and lines:
            lines.insert(i, lines[i])
        elif how == "insert":
            lines.insert(i, draw(st.sampled_from(GARBAGE)))
        elif how == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        data = bytearray(b"\n".join(lines))
    return source, bytes(data)


def assert_consistent(fp: FilePatch, res: FileResult, fuzz: int) -> None:
    """What every result promises, whatever the input: each hunk of the diff has one
    outcome, in order; "applied" is at the stated line with all context; "fuzz" only
    when asked, and within it; no merge without a base; a result that is ok has content
    unless it deletes the file."""
    assert res.hunks, "no outcome at all"
    if fp.hunks and not fp.is_new:
        assert [h.index for h in res.hunks] == [h.index for h in fp.hunks]
    for h in res.hunks:
        assert h.status is not Outcome.MERGED
        assert 0 <= h.fuzz <= fuzz, (h.status, h.fuzz)
        assert (h.status is Outcome.FUZZ) == (h.fuzz > 0), (h.status, h.fuzz)
        if h.status is Outcome.APPLIED:
            assert h.offset == 0, h
        if h.status is Outcome.OFFSET:
            assert h.offset != 0, h
    assert res.ok == all(h.status.ok for h in res.hunks)
    if res.ok:
        assert (res.content is None) == res.deleted, (res.content, res.deleted)
    assert res.content is None or isinstance(res.content, bytes)


@PROPS
@given(damaged())
def test_damaged_diffs_raise_only_bakery_errors(case: tuple[bytes, bytes]) -> None:
    source, data = case
    try:
        parsed = read_diff(Path("01-damaged.diff"), data)
        parsed.resolve_paths(1, "")
        for fp in parsed.files:
            shifted = b"pad\n" * 3 + source  # offsets, and with fuzz, fuzz
            for old in (source, None, b"", shifted):
                assert_consistent(fp, apply_file(fp, old, 0, 0o644), fuzz=0)
            for old in (source, shifted):
                assert_consistent(fp, apply_file(fp, old, 2, 0o644), fuzz=2)
    except DiffError as e:
        assert not e.line or 1 <= e.line <= data.count(b"\n") + 1, (e.line, str(e))
        assert "\n" not in str(e)
    except BakeryError:
        pass


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"---",
        b"--- a\n+++ b\n@@",
        b"@@ -1 +1 @@\n",
        b"diff --git a/x b/x\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\",
    ],
)
def test_tiny_inputs(data: bytes) -> None:
    with pytest.raises(BakeryError):
        parsed = read_diff(Path("01-tiny.diff"), data)
        parsed.resolve_paths(1, "")
