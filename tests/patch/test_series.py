"""Series: diffs in numeric order, series.toml, and the layout detected where it is silent."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from bakery.errors import SeriesError
from bakery.patch.series import detect_layout, load_series, ordered_diffs
from bakery.project import project_root
from tests.support.paths import PROJECT
from tests.support.series import make_series
from tests.support.trees import write_files

DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def names(paths: Sequence[Path]) -> list[str]:
    return [p.name for p in paths]


def test_numeric_order_with_gaps(tmp_path: Path) -> None:
    d = tmp_path / "diffs"
    write_files(
        d,
        {
            "10-late.diff": DIFF,
            "2-early.diff": DIFF,
            "003-mid.patch": DIFF,
            "README.md": "not a diff",
            ".hidden.diff": DIFF,
            "notes.txt": "x",
        },
    )
    assert names(ordered_diffs(d)) == ["2-early.diff", "003-mid.patch", "10-late.diff"]


def test_two_diffs_with_one_number(tmp_path: Path) -> None:
    d = tmp_path / "diffs"
    write_files(d, {"01-a.diff": DIFF, "1-b.diff": DIFF})
    with pytest.raises(SeriesError, match=r"number 1 is also used by 01-a\.diff"):
        ordered_diffs(d)


@pytest.mark.parametrize("bad", ["fix.diff", "a1-fix.diff", "1.diff", "-1-x.diff"])
def test_name_without_number(tmp_path: Path, bad: str) -> None:
    d = tmp_path / "diffs"
    write_files(d, {"01-a.diff": DIFF, bad: DIFF})
    with pytest.raises(SeriesError, match="lacks a numeric prefix") as info:
        ordered_diffs(d)
    assert bad in str(info.value)


def test_empty_or_missing_diffs_folder(tmp_path: Path) -> None:
    (tmp_path / "diffs").mkdir()
    with pytest.raises(SeriesError, match="no NN-"):
        ordered_diffs(tmp_path / "diffs")
    with pytest.raises(SeriesError, match="no such diffs folder"):
        ordered_diffs(tmp_path / "nothing")


def test_symlinked_diff_refused(tmp_path: Path) -> None:
    d = tmp_path / "diffs"
    write_files(d, {"01-a.diff": DIFF})
    os.symlink(d / "01-a.diff", d / "02-b.diff")
    with pytest.raises(SeriesError, match="not symlinks"):
        ordered_diffs(d)


def test_load_by_name_and_by_path(home: Path) -> None:
    folder = make_series(home, "demo", {"2-b.diff": DIFF, "10-c.diff": DIFF})
    (folder / "tests").mkdir()
    by_name = load_series("demo")
    assert by_name.name == "demo" and by_name.path == folder.resolve()
    assert names(by_name.diff_paths) == ["2-b.diff", "10-c.diff"]
    assert by_name.tests == folder.resolve() / "tests"
    assert (by_name.base, by_name.root, by_name.strip, by_name.description) == (
        None,
        None,
        None,
        "",
    )
    by_path = load_series(str(folder))
    assert by_path.path == by_name.path and by_path.tests is not None
    assert [d.name for d in by_path.load_diffs()] == ["2-b.diff", "10-c.diff"]


def test_series_folder_outside_launcher(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere" / "mine"
    write_files(folder / "diffs", {"01-a.diff": DIFF})
    s = load_series("elsewhere/mine")
    assert s.name == "mine" and s.tests is None


def test_unknown_series_names_the_known_ones(home: Path) -> None:
    make_series(home, "alpha", {"1-a.diff": DIFF})
    with pytest.raises(SeriesError, match=r"unknown series 'nope' \(known: alpha\)"):
        load_series("nope")
    (home / "launcher" / "empty").mkdir()
    with pytest.raises(SeriesError, match="no diffs/ folder"):
        load_series("empty")


def test_series_toml_keys(home: Path) -> None:
    make_series(
        home,
        "s",
        {"1-a.diff": DIFF},
        toml=(
            'name = "renamed"\nbase = "0.30.0"\nroot = "vllm"\nstrip = 2\n'
            'description = "what it does"\n'
        ),
    )
    s = load_series("s")
    assert (s.name, s.base, s.root, s.strip, s.description) == (
        "renamed",
        "0.30.0",
        "vllm",
        2,
        "what it does",
    )


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('bse = "0.30.0"\n', r"unknown key bse \(did you mean base\?\)"),
        ('bsae = "0.30.0"\nfoo = 1\n', r"unknown keys bsae \(did you mean base\?\), foo;"),
        ('strip = "1"\n', "strip must be an integer, not '1'"),
        ("strip = true\n", "strip must be an integer, not True"),
        ("base = 0.3\n", "base must be a string, not 0.3"),
        ("strip = 17\n", "strip must be between 0 and 16"),
        ("strip = -1\n", "strip must be between 0 and 16"),
        ('root = "/abs"\n', "root must be a relative folder"),
        ('root = "a/../.."\n', "root must be a relative folder"),
        ("base = \n", "series.toml"),
    ],
)
def test_bad_series_toml(home: Path, toml: str, words: str) -> None:
    make_series(home, "s", {"1-a.diff": DIFF}, toml=toml)
    with pytest.raises(SeriesError, match=words) as info:
        load_series("s")
    assert "\n" not in str(info.value)


def test_base_is_normalized_as_vllm_is(home: Path) -> None:
    # `--vllm 0.32` is the release 0.32.0; `base = "0.32"` is the same release, not a
    # version the package index is asked for as written
    make_series(home, "s", {"1-a.diff": DIFF}, toml='base = "v0.32"\n')
    assert load_series("s").base == "0.32.0"


@pytest.mark.parametrize(
    ("root", "expected"), [(".", ""), ("./", ""), ("./vllm/", "vllm"), ("", "")]
)
def test_root_dot_is_the_top_of_the_tree(home: Path, root: str, expected: str) -> None:
    make_series(home, "s", {"1-a.diff": DIFF}, toml=f'root = "{root}"\n')
    assert load_series("s").root == expected


def test_the_real_dcp2_series() -> None:
    s = load_series("dcp2", PROJECT)
    assert (s.base, s.root, s.strip) == ("0.30.0", "vllm", 1)
    assert names(s.diff_paths) == [
        "02-model_executor_kernels_attention_dsa_candidate_blocks.py.diff"
    ]


def test_project_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert project_root() == tmp_path / "home"  # BAKERY_HOME
    monkeypatch.delenv("BAKERY_HOME")
    (tmp_path / "proj" / "launcher").mkdir(parents=True)
    (tmp_path / "proj" / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "proj" / "deep" / "er")
    assert project_root() == tmp_path / "proj"


# --- layout detection --------------------------------------------------------------------------


def _series(home: Path, header: str, toml: str | None = None):
    text = f"--- {header}\n+++ {header}\n@@ -1 +1 @@\n-a\n+b\n"
    make_series(home, "s", {"1-a.diff": text}, toml=toml)
    return load_series("s")


@pytest.mark.parametrize(
    ("header", "tree_file", "expected"),
    [
        ("baked-ours/model_executor/k.py", "vllm/model_executor/k.py", (1, "vllm", True)),
        ("a/vllm/model_executor/k.py", "vllm/model_executor/k.py", (1, "", True)),
        # strip 0 and strip 1 + root vllm name the same file here: the first tried wins
        ("vllm/model_executor/k.py", "vllm/model_executor/k.py", (1, "vllm", True)),
        ("model_executor/k.py", "vllm/model_executor/k.py", (0, "vllm", True)),
        ("x/y/vllm/k.py", "vllm/k.py", (2, "", True)),
    ],
)
def test_layout_detected_when_series_toml_is_silent(
    home: Path, tmp_path: Path, header: str, tree_file: str, expected: tuple[int, str, bool]
) -> None:
    tree = write_files(tmp_path / "tree", {tree_file: "a\n"})
    assert detect_layout(_series(home, header), tree) == expected


def test_layout_from_series_toml_is_not_detected(home: Path, tmp_path: Path) -> None:
    tree = write_files(tmp_path / "tree", {"k.py": "a\n"})
    s = _series(home, "a/k.py", toml='root = "vllm"\nstrip = 1\n')
    assert detect_layout(s, tree) == (1, "vllm", False)


def test_root_detected_when_only_strip_is_set(home: Path, tmp_path: Path) -> None:
    tree = write_files(tmp_path / "tree", {"vllm/k.py": "a\n"})
    s = _series(home, "a/k.py", toml="strip = 1\n")
    assert detect_layout(s, tree) == (1, "vllm", True)


def test_layout_falls_back_when_nothing_matches(home: Path, tmp_path: Path) -> None:
    tree = write_files(tmp_path / "tree", {"other.py": "a\n"})
    assert detect_layout(_series(home, "a/k.py"), tree) == (1, "", True)


def test_layout_of_only_new_files_uses_their_names(home: Path, tmp_path: Path) -> None:
    text = "--- /dev/null\n+++ b/vllm/new.py\n@@ -0,0 +1 @@\n+a\n"
    make_series(home, "s", {"1-a.diff": text})
    tree = write_files(tmp_path / "tree", {"vllm/__init__.py": ""})
    assert detect_layout(load_series("s"), tree)[:2] == (1, "")


def test_the_readme_documents_every_series_toml_key() -> None:
    import re

    from bakery.patch.series import KEYS

    text = (PROJECT / "README.md").read_text()
    table = text[text.index("### series.toml") :].split("\n\n", 3)[2]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", table, re.MULTILINE)
    kinds = {str: "string", int: "integer"}
    assert rows == [(k, kinds[t]) for k, t in KEYS.items()]
