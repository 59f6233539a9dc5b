"""bakery parses diffs itself (strict, line-numbered, byte-exact); unidiff is the reference
it must agree with on every diff both accept."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import unidiff
from hypothesis import given, settings
from hypothesis import strategies as st

from bakery.patch.parse import read_diff
from tests.support.paths import PROJECT

ROOT = PROJECT
SERIES_DIFFS = sorted((ROOT / "launcher").glob("*/diffs/*.diff")) + sorted(
    (ROOT / "patches").glob("*/*/*.diff")
)


def _shape_bakery(data: bytes) -> list[tuple[str, str, list[tuple[int, int, int, int, str]]]]:
    d = read_diff(Path("x.diff"), data)
    return [
        (
            fp.old_name,
            fp.new_name,
            [
                (h.old_start, h.old_len, h.new_start, h.new_len, "".join(k for k, _ in h.lines))
                for h in fp.hunks
            ],
        )
        for fp in d.files
    ]


def _shape_unidiff(data: bytes) -> list[tuple[str, str, list[tuple[int, int, int, int, str]]]]:
    ps = unidiff.PatchSet(data.decode("latin-1").splitlines(keepends=True))
    return [
        (
            pf.source_file,
            pf.target_file,
            [
                (
                    h.source_start,
                    h.source_length,
                    h.target_start,
                    h.target_length,
                    "".join(ln.line_type for ln in h if ln.line_type in " -+"),
                )
                for h in pf
            ],
        )
        for pf in ps
    ]


@pytest.mark.parametrize("path", SERIES_DIFFS, ids=lambda p: str(p.relative_to(ROOT)))
def test_series_diffs_parse_like_unidiff(path: Path) -> None:
    data = path.read_bytes()
    assert _shape_bakery(data) == _shape_unidiff(data)


lines = st.lists(
    st.sampled_from(["a", "b", "c", "def f():", "    return 1", "", "x = 2"]), max_size=30
)


@settings(max_examples=150, deadline=None)
@given(lines, lines, st.integers(min_value=0, max_value=4))
def test_generated_diffs_parse_like_unidiff(a: list[str], b: list[str], n: int) -> None:
    text = "".join(
        difflib.unified_diff([x + "\n" for x in a], [x + "\n" for x in b], "a/f.py", "b/f.py", n=n)
    )
    if not text:
        return
    data = text.encode()
    assert _shape_bakery(data) == _shape_unidiff(data)
