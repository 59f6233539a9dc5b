"""The diff formats people make, each held against GNU patch (the oracle): ``diff -uN``'s
creations and deletions by epoch timestamp and empty range (in any timezone), a CRLF copy
of a diff, and a diff made one folder higher than the others."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bakery.errors import DiffError
from bakery.patch.engine import apply_file
from bakery.patch.parse import read_diff
from bakery.patch.series import detect_layout, load_series
from tests.support.gnupatch import gnu_patch, needs_patch
from tests.support.paths import SAMPLES
from tests.support.series import make_series
from tests.support.trees import write_files

#: The tree the samples were made against (``diff -ruN a b``).
BEFORE = {
    "setup.py": "",
    "vllm/__init__.py": "",
    "vllm/m.py": "import os\n\n\ndef f():\n    return 1\n",
    "vllm/legacy.py": "OLD = 1\nGONE = 2\n",
}
AFTER = {
    "setup.py": b"",
    "vllm/__init__.py": b"",
    "vllm/m.py": b"import os\n\nfrom vllm.myteam_ext import EXT\n\n\ndef f():\n    return EXT\n",
    "vllm/myteam_ext.py": b'"""A new module."""\n\nEXT = 2\n',
}


def files(tree: Path) -> dict[str, bytes]:
    return {
        p.relative_to(tree).as_posix(): p.read_bytes()
        for p in sorted(tree.rglob("*"))
        if p.is_file()
    }


def bake(home: Path, tree: Path, sample: str, toml: str | None = None) -> dict[str, bytes]:
    """The sample applied to a copy of tree as a one-diff series, through the layout
    detection and the engine, as a bake does; the files that result."""
    folder = make_series(home, "s", {"01-x.diff": (SAMPLES / sample).read_bytes()}, toml=toml)
    series = load_series(str(folder))
    strip, root, _ = detect_layout(series, tree)
    out = tree.parent / f"bakery-{sample}"
    shutil.copytree(tree, out)
    for diff in series.load_diffs():
        diff.resolve_paths(strip, root)
        for fp in diff.files:
            target = out / fp.path
            res = apply_file(fp, target.read_bytes() if target.exists() else None)
            assert res.ok, [(h.status, h.reason) for h in res.hunks]
            if res.deleted or res.content is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(res.content)
    return files(out)


def gnu(tree: Path, sample: str, strip: int = 1) -> tuple[dict[str, bytes], str]:
    ref = tree.parent / "gnu"
    shutil.copytree(tree, ref)
    proc = gnu_patch(ref, SAMPLES / sample, f"-p{strip}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return files(ref), proc.stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_files(tmp_path / "tree", BEFORE)


@needs_patch
@pytest.mark.parametrize("sample", ["diff_uN.diff", "diff_uN_offset.diff"])
def test_diff_uN_creates_and_deletes_by_epoch_timestamp(
    home: Path, tree: Path, sample: str
) -> None:
    (legacy, _, ext) = read_diff(SAMPLES / sample).files
    assert (legacy.is_delete, legacy.is_new) == (True, False)
    assert (ext.is_new, ext.is_delete) == (True, False)
    ours = bake(home, tree, sample)
    theirs, _ = gnu(tree, sample)
    assert ours == theirs == AFTER


@needs_patch
@pytest.mark.parametrize(("sample", "strip"), [("git_diff_copy.diff", 1), ("git_no_index.diff", 2)])
def test_git_copies_of_the_series_bake_the_same_bytes(
    home: Path, tree: Path, sample: str, strip: int
) -> None:
    # `git diff` in a checkout (a/ b/), and `git diff --no-index a b` (a/a/ b/b/: strip 2,
    # detected): the same files as diff -ruN's, byte for byte, and as GNU patch's
    ours = bake(home, tree, sample)
    theirs, _ = gnu(tree, sample, strip)
    assert ours == theirs == AFTER == bake(home / "uN", tree, "diff_uN.diff")


@needs_patch
def test_an_empty_range_on_a_missing_file_creates_it(tmp_path: Path) -> None:
    # no epoch date: GNU patch still creates a missing file from a hunk that adds to nothing
    data = (
        b"--- a/vllm/new.py\t2026-12-01 10:00:00 +0000\n+++ b/vllm/new.py\n"
        b"@@ -0,0 +1,2 @@\n+a\n+b\n"
    )
    diff = read_diff(Path("t.diff"), data)
    diff.resolve_paths(1, "")
    (fp,) = diff.files
    assert not fp.is_new
    res = apply_file(fp, None)
    ref = write_files(tmp_path / "gnu", {"vllm/__init__.py": ""})
    assert gnu_patch(ref, data).returncode == 0
    assert res.ok and res.content == (ref / "vllm/new.py").read_bytes() == b"a\nb\n"


def test_an_epoch_timestamp_with_lines_is_an_ordinary_file() -> None:
    # GNU patch patches the file as usual: the epoch marks a missing side only where the
    # range is empty
    data = b"--- a/x\t1970-01-01 00:00:00.000000000 +0000\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    (fp,) = read_diff(Path("t.diff"), data).files
    assert not fp.is_new and not fp.is_delete


@pytest.mark.parametrize(
    ("stamp", "epoch"),
    [
        ("\t1970-01-01 00:00:00.000000000 +0000", True),
        ("\t1970-01-01 01:00:00 +0100", True),
        ("\t1969-12-31 16:00:00.000000000 -0800", True),
        (" 1970-01-01 00:00:00.000000000 +0000", True),  # a space before the time
        ("\t1970-01-01 00:00:00.000000001 +0000", False),
        ("\t1970-01-01 00:00:00 +0100", False),
        ("\t2026-12-01 10:00:00 +0000", False),
    ],
)
def test_the_epoch_in_any_timezone(stamp: str, epoch: bool) -> None:
    data = f"--- a/x{stamp}\n+++ b/x\n@@ -0,0 +1 @@\n+a\n".encode()
    (fp,) = read_diff(Path("t.diff"), data).files
    assert fp.old_name == "a/x"
    assert fp.is_new is epoch


@needs_patch
def test_a_crlf_copy_is_stripped_for_modified_and_new_files_alike(home: Path, tree: Path) -> None:
    # GNU patch: "(Stripping trailing CRs from patch; use --binary to disable.)", and every
    # file comes out as the LF copy makes it, the new one included
    fps = read_diff(SAMPLES / "crlf_copy.diff").files
    assert all(fp.crlf_stripped for fp in fps)
    ours = bake(home, tree, "crlf_copy.diff")
    theirs, said = gnu(tree, "crlf_copy.diff")
    assert "Stripping trailing CRs" in said
    assert ours == theirs == AFTER == bake(home / "lf", tree, "diff_uN.diff")


def test_a_diff_of_crlf_files_keeps_its_crs() -> None:
    # LF headers, CRLF lines: the CRs are the files' content, as for GNU patch
    (fp,) = read_diff(SAMPLES / "crlf_lines.diff").files
    assert not fp.crlf_stripped and fp.hunks[0].lines[0] == (" ", "a\r")


@needs_patch
def test_a_diff_made_one_folder_higher_gets_its_own_strip(home: Path, tree: Path) -> None:
    # top/vllm-0.32.0.orig/... vs top/vllm-0.32.0/...: strip 2, detected for this diff
    ours = bake(home, tree, "higher_folder.diff")
    theirs, _ = gnu(tree, "higher_folder.diff", strip=2)
    assert ours == theirs == AFTER
    assert load_series("s").load_diffs()[0].strip is None  # a fresh load detects again


def test_one_higher_diff_among_others_is_detected_alone(home: Path, tree: Path) -> None:
    make_series(
        home,
        "s",
        {
            "01-plain.diff": "--- a/vllm/__init__.py\n+++ b/vllm/__init__.py\n"
            "@@ -0,0 +1 @@\n+X = 1\n",
            "02-higher.diff": (SAMPLES / "higher_folder.diff").read_bytes(),
        },
    )
    series = load_series("s")
    strip, root, _ = detect_layout(series, tree)
    for diff in series.load_diffs():
        diff.resolve_paths(strip, root)
    plain, higher = series.load_diffs()
    assert [fp.path for fp in plain.files] == ["vllm/__init__.py"]
    assert [fp.path for fp in higher.files] == ["vllm/legacy.py", "vllm/m.py", "vllm/myteam_ext.py"]


def test_a_set_strip_that_does_not_fit_says_which_does(home: Path, tree: Path) -> None:
    make_series(
        home, "s", {"01-x.diff": (SAMPLES / "higher_folder.diff").read_bytes()}, "strip = 1\n"
    )
    series = load_series("s")
    strip, root, _ = detect_layout(series, tree)
    with pytest.raises(DiffError, match="this diff needs strip 2") as info:
        series.load_diffs()[0].resolve_paths(strip, root)
    assert "rename" not in str(info.value) and "\n" not in str(info.value)


def test_root_dot_bakes_at_the_top_of_the_tree(home: Path, tree: Path) -> None:
    assert bake(home, tree, "diff_uN.diff", 'root = "."\nstrip = 1\n') == AFTER
