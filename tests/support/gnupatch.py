"""GNU patch, the oracle of the diff engine: run it on a tree, read what it says per hunk,
and hold the engine's result against it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bakery.patch.diffs import FilePatch
from bakery.patch.engine import FileResult
from bakery.patch.parse import read_diff

PATCH = shutil.which("patch")


#: The oracle tests need GNU patch: skipped on a machine without it, but never in CI
#: (``CI`` set), where a missing patch must fail them rather than pass them unseen.
needs_patch = pytest.mark.skipif(
    PATCH is None and not os.environ.get("CI"), reason="GNU patch is not on PATH"
)


def gnu_patch(tree: Path, diff: Path | bytes, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``patch -p1`` in tree (no backups, no .rej files in the tree)."""
    assert PATCH is not None
    data = diff.read_bytes() if isinstance(diff, Path) else diff
    proc = subprocess.run(
        [PATCH, "-p1", "--no-backup-if-mismatch", "-r", "-", "-f", *extra],
        cwd=tree,
        input=data,
        capture_output=True,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )


def fpatch(text: str | bytes, strip: int = 1) -> FilePatch:
    data = text.encode("latin-1") if isinstance(text, str) else text
    diff = read_diff(Path("t.diff"), data)
    diff.resolve_paths(strip, "")
    (fp,) = diff.files
    return fp


def outcomes(res: FileResult) -> list[tuple[str, int, int, int]]:
    return [(h.status.value, h.line, h.offset, h.fuzz) for h in res.hunks]


_HUNK_RE = re.compile(
    r"Hunk #(\d+) (succeeded|FAILED) at (\d+)(?: with fuzz (\d+))?"
    r"(?: \(offset (-?\d+) lines?\))?"
)


def gnu(
    tmp_path: Path, content: bytes | None, diff: str | bytes, *extra: str
) -> tuple[int, bytes | None, dict[int, tuple[str, int, int, int]]]:
    """GNU patch's result on the diff's one file: exit code, new content, and per hunk
    (status, line, fuzz, offset) for the hunks it reports."""
    tree = tmp_path / "gnu"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir()
    data = diff.encode("latin-1") if isinstance(diff, str) else diff
    name = tree / fpatch(data).path
    if content is not None:
        name.write_bytes(content)
    proc = gnu_patch(tree, data, *extra)
    report = {
        int(m[1]): (m[2], int(m[3]), int(m[4] or 0), int(m[5] or 0))
        for m in _HUNK_RE.finditer(proc.stdout)
    }
    out = name.read_bytes() if name.exists() else None
    return proc.returncode, out, report


def assert_same_as_gnu(
    tmp_path: Path, content: bytes, diff: str | bytes, res: FileResult, fuzz: int = 0, *extra: str
) -> None:
    """bakery applied every hunk: GNU patch applies them too, at the same lines with the same
    offsets and fuzz, and writes the same bytes."""
    assert res.ok, outcomes(res)
    rc, out, report = gnu(tmp_path, content, diff, "-F", str(fuzz), *extra)
    assert rc == 0, report
    assert out == res.content
    for h in res.hunks:
        status, line, hfuzz, offset = report.get(h.index, ("succeeded", h.line, 0, 0))
        assert (status, line, hfuzz, offset) == ("succeeded", h.line, h.fuzz, h.offset)
