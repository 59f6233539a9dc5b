"""Names, renames, modes and refusals as GNU patch and ``git apply`` have them (issue 47):
each case README "What diffs bakery takes" lists, through the parser, or through a bake of a
small local tree (``bakery apply --vllm PATH``) where the tree decides."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import DiffError
from bakery.patch.parse import read_diff
from tests.support.repos import GIT_ENV, git, git_repo
from tests.support.series import make_series
from tests.support.trees import write_files

Cli = Callable[..., Result]


def parsed(text: str, strip: int = 1) -> list[tuple[str | None, str]]:
    diff = read_diff(Path("t.diff"), text.encode())
    diff.resolve_paths(strip, "")
    return [(fp.move and fp.source, fp.path) for fp in diff.files]


def refused(text: str, strip: int = 1) -> DiffError:
    with pytest.raises(DiffError) as info:
        parsed(text, strip)
    return info.value


HUNK = "@@ -1 +1 @@\n-a\n+b\n"
HUNK_DIFF = "--- a/k\n+++ b/k\n" + HUNK


@pytest.mark.parametrize(
    ("name", "strip", "path"),
    [("./d/x", 1, "d/x"), ("d//x", 1, "x"), ("a/./d/x", 1, "d/x"), ('"a/"sub/x', 2, "x")],
)
def test_the_strip_counts_as_gnu_patch_counts(name: str, strip: int, path: str) -> None:
    assert parsed(f"--- {name}\n+++ {name}\n{HUNK}", strip) == [(None, path)]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("--- /p/to/x\n+++ /p/to/x\n" + HUNK, 1, "absolute path '/p/to/x' refused (strip 3)"),
        ("--- a/\n+++ a/\n" + HUNK, 1, "strip 2 leaves no name"),
        ("--- a/p\\q\n+++ b/p\\q\n" + HUNK, 1, "has a backslash"),
        ("--- a/p\tq\n+++ b/p\tq\n" + HUNK, 1, None),  # a tab ends the name: p, not refused
    ],
)
def test_names_refused_say_why(text: str, line: int, words: str | None) -> None:
    strip = 3 if "/p/to" in text else 2 if "a/\n" in text else 1
    if words is None:
        assert parsed(text, strip) == [(None, "p")]
        return
    err = refused(text, strip)
    assert err.line == line and words in err.message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            "diff --git a/f b/f\nnew file mode 100644\n--- /dev/null\n+++ b/f-blah\n"
            "@@ -0,0 +1 @@\n+1\n",
            4,
            "the +++ name 'b/f-blah' disagrees with the 'diff --git' line's 'b/f'",
        ),
        ("diff --git a/f b/f\n--- a/f\n@@ -1 +1 @@\n-a\n+b\n", 2, "lacks filename information"),
        ("diff --git a/f b/g\n--- a/f\n+++ b/g\n" + HUNK, 2, "without 'rename from'"),
        (
            "diff --git a/sub b/sub\nindex 1a2b..3c4d 160000\n--- a/sub\n+++ b/sub\n"
            "@@ -1 +1 @@\n-Subproject commit 1a2b\n+Subproject commit 3c4d\n",
            2,
            "a submodule (git mode 160000) refused",
        ),
        (
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+x\n",
            2,
            "a symlink (git mode 120000) refused",
        ),
        ("diff --git a/f b/f\nold mode 100644\nnew mode garbage\n", 3, "invalid file mode"),
        (
            "--- a/x\n+++ b/x\n" + HUNK + "diff --git a/p.png b/p.png\nBinary files a/p.png and "
            "b/p.png differ\n",
            7,
            "'b/p.png' is binary",
        ),
        ("Binary files a/q.bin and b/q.bin differ\n", 1, "'b/q.bin' is binary"),
        # a line of many " b/" cuts, none of them two names of a tree's length
        ("diff --git a/" + "x b/" * 5000 + "y\nnew file mode 100644\n", 1, "file name too long"),
    ],
)
def test_git_diffs_refused_say_why(text: str, line: int, words: str) -> None:
    err = refused(text)
    assert err.line == line and words in err.message, err.message


def test_git_modes_are_normalised_as_git_does() -> None:
    text = "diff --git a/f b/f\nold mode 100660\nnew mode 100775\n"
    (fp,) = read_diff(Path("m.diff"), text.encode()).files
    assert (fp.old_mode, fp.new_mode) == (0o644, 0o755)


def test_renames_and_copies_take_the_diff_git_names() -> None:
    text = (
        "diff --git a/d/old.py b/d/new.py\nsimilarity index 90%\nrename from d/old.py\n"
        "rename to d/new.py\n--- a/d/old.py\n+++ b/d/new.py\n" + HUNK + "diff --git a/d/new.py "
        "b/e/copy.py\nsimilarity index 100%\ncopy from d/new.py\ncopy to e/copy.py\n"
    )
    assert parsed(text) == [("d/old.py", "d/new.py"), ("d/new.py", "e/copy.py")]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("src/m.py", "lib/m.py"),
        ("p q.py", "r s.py"),
        ("d.py", "a b/c.py"),
        ("a b/c.py", "d.py"),  # 'diff --git a/a b/c.py b/d.py' splits as "a" and "c.py b/d.py" too
        ("x b/y.py", "x b/z.py"),
    ],
)
@pytest.mark.parametrize("how", ["rename", "rename with an edit", "copy"])
def test_a_git_rename_or_copy_moves_the_files_its_from_to_lines_name(
    tmp_path: Path, old: str, new: str, how: str
) -> None:
    # git's own diff (as git apply reads it: the 'rename from/to' lines name the files where
    # the 'diff --git' line's two names, spaces and all, could be split more than one way)
    body = "".join(f"line {i}\n" for i in range(20))
    repo = git_repo(tmp_path / "r", {old: body})
    (repo / new).parent.mkdir(parents=True, exist_ok=True)
    if how == "copy":
        (repo / new).write_text(body)
    else:
        git(repo, "mv", old, new)
    if how == "rename with an edit":
        (repo / new).write_text(body.replace("line 5\n", "line five\n"))
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached", "-M", "-C", "--find-copies-harder")
    assert f"{how.split()[0]} from {old}\n" in diff
    assert parsed(diff) == [(old, new)]
    # the names it keeps (a listing's, a port's) are those files' too
    (fp,) = read_diff(Path("t.diff"), diff.encode()).files
    assert (fp.old_name.endswith(old), fp.new_name.endswith(new)) == (True, True)


@pytest.mark.parametrize("name", ["f.sh", "café.sh", "d/x y.sh", "d b/x.sh"])
@pytest.mark.parametrize("prefix", [[], ["--no-prefix"]])
@pytest.mark.parametrize("change", ["new empty file", "deleted empty file", "mode change"])
def test_a_git_diff_without_hunks_names_its_file_quoted_or_not_with_or_without_prefixes(
    tmp_path: Path, name: str, prefix: list[str], change: str
) -> None:
    # git's own diff: only its 'diff --git' line names the file (quoted where git quotes it,
    # "a/caf\303\251.sh"; no a/ b/ with --no-prefix, so strip 0)
    repo = git_repo(
        tmp_path / "r", {"keep": "k\n", **({} if change.startswith("new") else {name: ""})}
    )
    if change.startswith("new"):
        write_files(repo, {name: ""})
    elif change.startswith("deleted"):
        (repo / name).unlink()
    else:
        (repo / name).chmod(0o755)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached", *prefix)
    assert diff.startswith('diff --git "' if "é" in name else "diff --git ")
    assert "---" not in diff
    assert parsed(diff, 0 if prefix else 1) == [(None, name)]


@pytest.mark.parametrize(
    ("left", "right"), [("x", "y"), ("x", "y b"), ("x b", "y"), ("x b", "y b"), ("one b", "three")]
)
def test_git_diff_no_index_of_two_folders_names_the_files_under_them(
    tmp_path: Path, left: str, right: str
) -> None:
    # 'diff --git a/x b/m b/y/m': the names differ by their folder, and a folder named
    # "x b" puts a second " b/" in the line; git compares the names once stripped (-p2)
    write_files(tmp_path / left, {"m": "m\n", "t": "1\n2\n"})
    write_files(tmp_path / right, {"m": ("m\n", 0o755), "new": "", "t": "1\n3\n"})
    proc = subprocess.run(
        ["git", "diff", "--no-index", left, right],
        cwd=tmp_path,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # 1: the folders differ
    assert proc.stdout.startswith(f"diff --git a/{left}/m b/{right}/m\nold mode 100644\n")
    assert parsed(proc.stdout, 2) == [(None, "m"), (None, "new"), (None, "t")]


@pytest.mark.parametrize("move", ["rename", "copy"])
@pytest.mark.parametrize("side", ["from", "to"])
@pytest.mark.parametrize("hunk", ["", "--- a/x\n+++ b/y\n" + HUNK])
def test_a_git_rename_or_copy_from_or_to_dev_null_is_refused(
    move: str, side: str, hunk: str
) -> None:
    # a creation or deletion in disguise: read as one, it created or deleted a file
    names = {"from": "x", "to": "y", side: "/dev/null"}
    text = (
        f"{HUNK_DIFF}diff --git a/x b/y\nsimilarity index 90%\n"
        f"{move} from {names['from']}\n{move} to {names['to']}\n{hunk}"
    )
    err = refused(text)
    assert (err.line, err.problem) == (6, f"a git {move} may not also create or delete a file")


@pytest.mark.parametrize("move", ["rename", "copy"])
@pytest.mark.parametrize("mode", ["new file mode 100644", "deleted file mode 100644"])
@pytest.mark.parametrize("at", ["header", "after"])
def test_a_git_rename_or_copy_that_also_creates_or_deletes_is_refused(
    move: str, mode: str, at: str
) -> None:
    lines = [f"{move} from x", f"{move} to y"]
    lines.insert(0 if at == "header" else 2, mode)
    text = HUNK_DIFF + "diff --git a/x b/y\n" + "".join(f"{x}\n" for x in lines)
    err = refused(text)
    assert (err.line, err.problem) == (6, f"a git {move} may not also create or delete a file")


@pytest.mark.parametrize("move", ["rename", "copy"])
@pytest.mark.parametrize("only", ["from x", "to y"])
@pytest.mark.parametrize("header", ["diff --git a/x b/y", "diff --git a/x b/y b/z"])
@pytest.mark.parametrize("hunk", ["", "--- a/x\n+++ b/y\n" + HUNK])
def test_a_git_rename_or_copy_without_its_from_or_to_line_is_refused(
    move: str, only: str, header: str, hunk: str
) -> None:
    text = f"{HUNK_DIFF}{header}\nsimilarity index 90%\n{move} {only}\n{hunk}"
    if hunk and " b/z" in header:
        text = text.replace("+++ b/y", "+++ b/y b/z")
    err = refused(text)
    assert (err.line, err.problem) == (6, f"git {move} without its '{move} from/to' lines")


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("name", ["p.bin", "d/p q.bin"])
def test_a_binary_diff_from_git_is_refused_naming_its_file(
    tmp_path: Path, binary: bool, name: str
) -> None:
    repo = git_repo(tmp_path / "r", {name: b"\x00\x01"})
    write_files(repo, {name: b"\x00\x02"})
    diff = git(repo, "diff", *(["--binary"] if binary else []))
    assert ("GIT binary patch" in diff) == binary
    err = refused(diff)
    assert err.problem.startswith(f"binary patch refused: {'b/' + name!r} is binary;"), err.problem


# --- through a bake ------------------------------------------------------------------------


def bake(cli: Cli, home: Path, tmp_path: Path, tree: dict[str, str], diff: str) -> Result:
    src = write_files(tmp_path / "tree", tree)
    make_series(home, "s", {"01-x.diff": diff}, toml='strip = 1\nroot = ""\n')
    return cli(
        "apply", "s", "--vllm", src, "--out", tmp_path / "out", "--json", tmp_path / "r.json"
    )


def files(out: Path) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): p.read_text()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not {".git", ".bakery"} & set(p.relative_to(out).parts)
    }


def test_a_criss_cross_rename_swaps_two_files(cli: Cli, home: Path, tmp_path: Path) -> None:
    diff = (
        "diff --git a/one b/two\nsimilarity index 100%\nrename from one\nrename to two\n"
        "diff --git a/two b/one\nsimilarity index 100%\nrename from two\nrename to one\n"
    )
    r = bake(cli, home, tmp_path, {"one": "1\n", "two": "2\n"}, diff)
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "out") == {"one": "2\n", "two": "1\n"}
    notes = json.loads((tmp_path / "r.json").read_text())["diffs"][0]["notes"]
    assert "renames one to two (git's 'rename from/to')" in notes


def test_a_rename_onto_a_file_that_stays_is_refused(cli: Cli, home: Path, tmp_path: Path) -> None:
    diff = "diff --git a/one b/two\nsimilarity index 100%\nrename from one\nrename to two\n"
    r = bake(cli, home, tmp_path, {"one": "1\n", "two": "2\n"}, diff)
    assert r.exit_code == 2 and "two already exists (git refuses it)" in r.output


@pytest.mark.parametrize(
    ("tree", "patched"), [({"x": "a\n"}, "x"), ({"x.orig": "a\n", "y": "q\n"}, "x.orig")]
)
def test_x_orig_and_x_patch_the_file_that_exists(
    cli: Cli, home: Path, tmp_path: Path, tree: dict[str, str], patched: str
) -> None:
    r = bake(cli, home, tmp_path, tree, "--- x.orig\t2024-01-01 00:00:00\n+++ x\n" + HUNK)
    # strip 1 of a name without a folder leaves nothing: strip 0 is what diff -u x.orig x needs
    assert r.exit_code == 2 and "strip 1 leaves no name" in r.output
    make_series(
        home, "t", {"01-x.diff": "--- x.orig\n+++ x\n" + HUNK}, toml='strip = 0\nroot = ""\n'
    )
    r = cli("apply", "t", "--vllm", tmp_path / "tree", "--out", tmp_path / "o2")
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "o2")[patched] == "b\n"


def test_a_file_patched_after_it_was_renamed_away_is_refused(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    diff = (
        "diff --git a/one b/two\nsimilarity index 100%\nrename from one\nrename to two\n"
        "diff --git a/one b/one\n--- a/one\n+++ b/one\n" + HUNK
    )
    r = bake(cli, home, tmp_path, {"one": "a\n"}, diff)
    assert r.exit_code == 2 and "01-x.diff:6" in r.output
    assert "one was renamed away earlier in this diff" in r.output


def test_a_rename_merges_on_a_release_that_changed_its_source(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    from tests.support.trees import cache_release

    helpers = "".join(f"H{i} = {i}\n" for i in range(1, 12))
    cache_release("0.32.0", {"vllm/__init__.py": "", "vllm/helpers.py": helpers})
    newer = helpers.replace("H4 = 4\n", "H4 = 4  # four\n")
    cache_release("0.33.0", {"vllm/__init__.py": "", "vllm/helpers.py": newer})
    diff = (
        "diff --git a/vllm/helpers.py b/vllm/util.py\nsimilarity index 90%\n"
        "rename from vllm/helpers.py\nrename to vllm/util.py\n--- a/vllm/helpers.py\n"
        "+++ b/vllm/util.py\n@@ -3,7 +3,7 @@\n H3 = 3\n H4 = 4\n H5 = 5\n-H6 = 6\n+H6 = 60\n"
        " H7 = 7\n H8 = 8\n H9 = 9\n"
    )
    make_series(home, "m", {"01-mv.diff": diff}, toml='base = "0.32.0"\n')
    r = cli(
        "apply", "m", "--vllm", "0.33.0", "--out", tmp_path / "o", "--json", tmp_path / "r.json"
    )
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "o") == {
        "setup.py": "",
        "vllm/__init__.py": "",
        "vllm/util.py": newer.replace("H6 = 6\n", "H6 = 60\n"),
    }
    (f,) = json.loads((tmp_path / "r.json").read_text())["diffs"][0]["files"]
    assert (f["path"], f["hunks"][0]["status"]) == ("vllm/util.py", "merged")
    # its port (refresh of the tree baked on 0.33.0) keeps the rename, and bakes the same tree
    r = cli("refresh", "m", "--tree", tmp_path / "o")
    assert r.exit_code == 0, r.output
    port = (home / "patches/m/0.33.0/01-mv.diff").read_text()
    assert port.startswith(
        "diff --git a/vllm/helpers.py b/vllm/util.py\nrename from vllm/helpers.py\n"
    )
    r = cli(
        "apply", "m", "--vllm", "0.33.0", "--out", tmp_path / "p", "--json", tmp_path / "p.json"
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p.json").read_text())["port"].endswith("patches/m/0.33.0")
    assert files(tmp_path / "p") == files(tmp_path / "o")


def test_a_git_copy_keeps_its_source_and_says_so(cli: Cli, home: Path, tmp_path: Path) -> None:
    diff = (
        "diff --git a/one b/two\nsimilarity index 90%\ncopy from one\ncopy to two\n"
        "--- a/one\n+++ b/two\n" + HUNK
    )
    r = bake(cli, home, tmp_path, {"one": "a\n"}, diff)
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "out") == {"one": "a\n", "two": "b\n"}
    notes = json.loads((tmp_path / "r.json").read_text())["diffs"][0]["notes"]
    assert notes == ["copies one to two (git's 'copy from/to')"]


def test_a_file_turned_into_a_folder_in_one_diff(cli: Cli, home: Path, tmp_path: Path) -> None:
    diff = (
        "diff --git a/foo b/foo\ndeleted file mode 100644\n--- a/foo\n+++ /dev/null\n"
        "@@ -1 +0,0 @@\n-hello\n"
        "diff --git a/foo/baz b/foo/baz\nnew file mode 100644\n--- /dev/null\n+++ b/foo/baz\n"
        "@@ -0,0 +1 @@\n+inside\n"
    )
    r = bake(cli, home, tmp_path, {"foo": "hello\n"}, diff)
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "out") == {"foo/baz": "inside\n"}
    # without the deletion, the file is in the way: refused, naming it
    make_series(home, "t", {"01-x.diff": diff[diff.index("diff --git a/foo/baz") :]})
    r = cli("apply", "t", "--vllm", tmp_path / "tree", "--out", tmp_path / "o2")
    assert r.exit_code == 2 and "foo/baz: foo is a file, not a folder" in r.output


def test_a_diff_u_of_x_orig_among_git_diffs_gets_its_own_strip(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = write_files(tmp_path / "tree", {"vllm/x.py": "a\n", "vllm/k.py": "a\n"})
    make_series(
        home,
        "s",
        {
            "01-git.diff": "--- a/vllm/x.py\n+++ b/vllm/x.py\n" + HUNK,
            "02-orig.diff": "--- vllm/k.py.orig\t2024-01-01 00:00:00\n+++ vllm/k.py\n" + HUNK,
        },
    )  # no series.toml: the layout is detected, and the second diff's strip is its own
    r = cli("apply", "s", "--vllm", src, "--out", tmp_path / "out", "--json", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "out") == {"vllm/x.py": "b\n", "vllm/k.py": "b\n"}
    notes = json.loads((tmp_path / "r.json").read_text())["diffs"][1]["notes"]
    assert "names vllm/k.py.orig and vllm/k.py: patches vllm/k.py" in " ".join(notes)


def _many_cuts(inner: int) -> str:
    """A new empty file whose ``diff --git`` line's old name holds ``inner`` folders named
    ``d b`` (each a " b/" where the line could be cut); only the last " b/" cuts it where
    the two names share a tail (``m.py``), and the file made is the new name."""
    old = "d b/" * inner + "m.py"
    return f"diff --git a/{old} b/y/m.py\nnew file mode 100644\n"


def test_a_diff_git_line_is_cut_at_most_64_ways() -> None:
    # 64 places to cut: the last, where the names share m.py, is found
    assert parsed(_many_cuts(63)) == [(None, "y/m.py")]
    # 65: only the first 64 are weighed (bounded work on a hostile line); none shares a
    # tail, so the first is taken
    assert parsed(_many_cuts(64)) == [(None, "d b/" * 63 + "m.py b/y/m.py")]


def test_a_hunkless_rename_keeps_its_mode_change() -> None:
    text = (
        "diff --git a/run.sh b/bin/run.sh\nold mode 100644\nnew mode 100755\n"
        "similarity index 100%\nrename from run.sh\nrename to bin/run.sh\n"
    )
    (fp,) = read_diff(Path("t.diff"), text.encode()).files
    assert (fp.move, fp.old_mode, fp.new_mode) == ("rename", 0o644, 0o755)
