"""verify --pristine's split: which tests pass only on the baked tree, on both, or only on
the pristine one, read from the JUnit files of two real pytest runs (run_verify)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from bakery.verifying.pristine import outcomes, split
from tests.support.trees import write_files
from tests.support.verify import run_tests

TESTS = textwrap.dedent("""\
    def value(tree):
        return (tree / "vllm" / "value.txt").read_text().strip()


    def test_series_feature(baked_tree):
        assert value(baked_tree) in ("baked", "broken")


    def test_upstream_behaviour(baked_tree):
        assert value(baked_tree) != ""


    def test_kept_from_upstream(baked_tree):
        assert value(baked_tree) != "broken"
    """)


def tree(root: Path, value: str, release: str | None = "0.30.0") -> Path:
    files = {"vllm/__init__.py": "", "vllm/value.txt": value}
    if release:
        files[".bakery/manifest.json"] = json.dumps({"vllm": {"version": release}})
    return write_files(root, files)


def junit_of(tests: Path, tree_dir: Path, junit: Path) -> dict[str, str]:
    run_tests(tests, tree_dir, interpret=True, jobs=1, pytest_args=["-q"], junit=junit)
    return outcomes(junit)


def test_the_split_of_two_real_runs(tmp_path: Path) -> None:
    tests = write_files(tmp_path / "tests", {"test_demo.py": TESTS})
    pristine = junit_of(tests, tree(tmp_path / "p", "upstream", None), tmp_path / "p.xml")
    baked = junit_of(tests, tree(tmp_path / "b", "broken"), tmp_path / "b.xml")
    result = split(baked, pristine, "0.30.0")
    assert [n.split("::")[-1] for n in result.series] == ["test_series_feature"]
    assert [n.split("::")[-1] for n in result.upstream] == ["test_upstream_behaviour"]
    assert [n.split("::")[-1] for n in result.regression] == ["test_kept_from_upstream"]
    assert result.tests_the_series and "1 pass only on the baked tree" in result.lines()[0]


def test_tests_that_all_pass_upstream_do_not_test_the_series() -> None:
    result = split({"a": "passed", "b": "failed"}, {"a": "passed", "b": "skipped"}, "0.34.0")
    assert not result.tests_the_series and result.neither == 1
    assert result.lines()[-1].endswith("the series' tests do not test the series")
