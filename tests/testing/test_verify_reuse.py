"""Verify results reused from bakery's cache: only while nothing the run depends on changed.

A tiny synthetic series (not dcp2): one tree module, one test that loads it, one data
file; every input changed by one byte must run the suite again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bakery.testing import reuse
from bakery.verifying.runner import VerifyResult
from tests.support.verify import run_tests
from tests.support.trees import write_files

MODULE_FILE = "vllm/tiny/kernel.py"
TEST = """\
from bakery.testing import load_tree_module


def test_kernel():
    assert load_tree_module("vllm.tiny.kernel").VALUE == 41 + 1
"""


def make(root: Path) -> tuple[Path, Path, Path]:
    """(series folder, its tests, a baked tree) of a series the test builds from nothing."""
    series = write_files(
        root / "series",
        {
            "diffs/0001-tiny.diff": "",
            "known-defects.toml": "",
            "tests/test_tiny.py": TEST,
            "tests/pytest.ini": "[pytest]\n",
        },
    )
    manifest = {"vllm": {"version": "9.9.9"}, "diffs": [{"name": "0001-tiny.diff"}]}
    tree = write_files(
        root / "tree",
        {
            "vllm/tiny/__init__.py": "raise RuntimeError('never executed')\n",
            MODULE_FILE: "VALUE = 42\n",
            ".bakery/manifest.json": json.dumps(manifest),
        },
    )
    return series, series / "tests", tree


def verify(series: Path, tree: Path, cache: Path, *args: str, **kw: object) -> VerifyResult:
    return run_tests(
        series / "tests",
        tree,
        interpret=True,
        pytest_args=["-q", *args],
        series_dir=series,
        cache_root=cache,
        jobs=1,
        log=cache.parent / "log.txt",
        **kw,  # type: ignore[arg-type]
    )


def flip(path: Path, old: bytes = b"42", new: bytes = b"43") -> None:
    path.write_bytes(path.read_bytes().replace(old, new, 1))


@pytest.mark.slow
def test_a_change_of_any_run_input_runs_the_suite_again(tmp_path: Path) -> None:
    series, _, tree = make(tmp_path)
    cache = tmp_path / "cache"

    first = verify(series, tree, cache)
    assert (first.reused, first.passed, first.exit_code) == (None, 1, 0)
    assert first.key is not None

    again = verify(series, tree, cache)
    assert again.reused is not None and again.key == first.key
    assert (again.passed, again.exit_code) == (1, 0)
    assert [m.name for m in again.from_tree] == ["vllm.tiny.kernel"]
    assert again.from_tree[0].detail == str(tree / MODULE_FILE)

    # a one-byte change of the kernel: the suite runs, and now fails
    flip(tree / MODULE_FILE)
    changed = verify(series, tree, cache)
    assert (changed.reused, changed.failed, changed.exit_code) == (None, 1, 1)
    flip(tree / MODULE_FILE, b"43", b"42")
    assert verify(series, tree, cache).reused is not None  # the old bytes: the old record

    # a one-byte change of a test file
    flip(series / "tests" / "test_tiny.py", b"41 + 1", b"40 + 2")
    assert verify(series, tree, cache).reused is None
    assert verify(series, tree, cache).reused is not None

    # other pytest arguments
    assert verify(series, tree, cache, "-v").reused is None

    # --no-reuse runs it
    assert verify(series, tree, cache, reuse=False).reused is None


@pytest.mark.slow
def test_a_damaged_record_is_ignored(tmp_path: Path) -> None:
    series, _, tree = make(tmp_path)
    cache = tmp_path / "cache"
    verify(series, tree, cache)
    (record,) = (cache / reuse.FOLDER).glob("*.json")
    data = json.loads(record.read_text())
    data["files"] = {"../../outside.py": None}
    record.write_text(json.dumps(data))
    assert verify(series, tree, cache).reused is None
    for text in ("{", '{"format": 1}', json.dumps({**data, "result": {"counts": 3}})):
        for p in (cache / reuse.FOLDER).glob("*.json"):
            p.write_text(text)
        again = verify(series, tree, cache)
        assert (again.reused, again.passed) == (None, 1)


@pytest.mark.slow
def test_a_run_on_another_device_than_its_key_names_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key's device comes from the driver (gpus.py), the run's from torch in the
    pytest process: where they differ, no later run may take the result for its own."""
    series, _, tree = make(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setattr(reuse, "device", lambda interpret: "Some GPU x1")
    first = verify(series, tree, cache)
    assert (first.passed, first.key, first.device_seen) == (1, None, "cpu (Triton interpreter)")
    assert verify(series, tree, cache).reused is None
    assert not list((cache / reuse.FOLDER).glob("*.json"))


def _key(series: Path, tests: Path, tree: Path, **kw: object) -> str:
    args = {"interpret": True, "pytest_args": ["-q"], "series_dir": series, "env": {}}
    args.update(kw)
    return reuse.static_key(reuse.inputs(tests, tree, **args))  # type: ignore[arg-type]


def test_every_input_is_in_the_key(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    assert _key(series, tests, tree) == base
    others = [
        _key(series, tests, tree, pytest_args=["-q", "-x"]),
        _key(series, tests, tree, interpret=False, device_name="GPU x1"),
        _key(series, tests, tree, device_name="another device"),
        _key(series, tests, tree, env={"TRITON_INTERPRET": "0"}),
    ]
    assert len({base, *others}) == 1 + len(others)

    for path in (
        tests / "test_tiny.py",  # a test
        series / "known-defects.toml",  # the series' data
        tree / ".bakery" / "manifest.json",  # the bake's release
    ):
        before = path.read_bytes()
        path.write_bytes(before + b" ")
        assert _key(series, tests, tree) != base, path
        path.write_bytes(before)
    (tests / "conftest.py").write_text("")  # a file added to the tests
    assert _key(series, tests, tree) != base


def test_the_tree_files_a_run_loaded_are_in_the_key(tmp_path: Path) -> None:
    _, _, tree = make(tmp_path)
    files = reuse.module_files(tree, ["vllm.tiny", "vllm.tiny.kernel"])
    assert files["vllm/tiny/kernel.py"] is not None and files["vllm/tiny.py"] is None
    flip(tree / MODULE_FILE)
    assert reuse.module_files(tree, ["vllm.tiny.kernel"]) != {
        k: v for k, v in files.items() if "kernel" in k
    }
    # a file that appears where a module was stood in (or was a light package)
    (tree / "vllm" / "tiny.py").write_text("")
    assert reuse.module_files(tree, ["vllm.tiny"])["vllm/tiny.py"] is not None


def test_a_tree_file_no_module_loaded_is_in_the_key_too(tmp_path: Path) -> None:
    """Tests may read the tree without the loader (runpy, a subprocess)."""
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    (tree / "vllm" / "data.bin").write_bytes(b"\0")
    assert _key(series, tests, tree) != base
    # the same bytes in another folder: the same key (a port candidate, a matrix row)
    copy = make(tmp_path / "again")[2]
    (copy / "vllm" / "data.bin").write_bytes(b"\0")
    assert _key(series, tests, copy) == _key(series, tests, tree)
