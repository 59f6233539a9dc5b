"""The complexity ratchet: pyproject.toml lists, per file, the functions that were over
ruff's mccabe limit (C901) when it was set, each with its score. ``ruff check`` already
fails on a new offender in any other file; this test holds the listed files to their
list, function by function: no listed function may grow, one that shrank takes its new
score, no other function there may go over, and an entry whose function came under the
limit must be deleted (the list only shrinks)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENTRY = re.compile(r'^"(?P<path>[^"]+)" = \["C901"\]\s*#\s*(?P<names>.+)$', re.MULTILINE)
NAMED = re.compile(r"(?P<name>\w+) \((?P<score>\d+)\)")
FLAGGED = re.compile(r"`(?P<name>\w+)` is too complex \((?P<score>\d+) > \d+\)")


def listed() -> dict[tuple[str, str], int]:
    """The ratchet's entries: (file, function) -> the score it may not exceed."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    out: dict[tuple[str, str], int] = {}
    for entry in ENTRY.finditer(text):
        for named in NAMED.finditer(entry["names"]):
            out[(entry["path"], named["name"])] = int(named["score"])
    return out


@functools.cache
def _ruff_c901() -> str:
    """ruff's C901 findings as JSON, per-file-ignores switched off (run once)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--output-format", "json"]
        + ["--config", "lint.per-file-ignores = {}", "--exit-zero"]
        + ["src", "tests", "launcher", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def measured() -> dict[tuple[str, str], int]:
    """Every function over the limit today."""
    pytest.importorskip("ruff", reason="ruff is in the dev extra (make setup installs it)")
    out: dict[tuple[str, str], int] = {}
    for d in json.loads(_ruff_c901()):
        m = FLAGGED.search(d["message"])
        assert m, d["message"]
        path = Path(d["filename"]).resolve().relative_to(ROOT).as_posix()
        out[(path, m["name"])] = int(m["score"])
    return out


def test_the_ratchet_list_parses() -> None:
    entries = listed()
    assert entries, "pyproject.toml lists no C901 exception: was the format changed?"
    assert all(score > 10 for score in entries.values()), entries


def test_no_function_is_more_complex_than_the_ratchet_allows() -> None:
    allowed, found = listed(), measured()
    new = {k: v for k, v in found.items() if k not in allowed}
    grown = {k: (allowed[k], v) for k, v in found.items() if k in allowed and v > allowed[k]}
    assert not new, f"over max-complexity 10, split them: {new}"
    assert not grown, f"listed functions that grew (listed, now): {grown}"


def test_the_ratchet_list_is_exact() -> None:
    """A listed function that shrank takes its new score: the ratchet holds it there."""
    allowed, found = listed(), measured()
    shrunk = {k: (allowed[k], v) for k, v in found.items() if k in allowed and v < allowed[k]}
    assert not shrunk, f"listed functions that shrank: update pyproject.toml: {shrunk}"


def test_the_ratchet_list_only_shrinks() -> None:
    found = measured()
    gone = sorted(k for k in listed() if k not in found)
    assert not gone, f"no longer over the limit: delete them from pyproject.toml: {gone}"
