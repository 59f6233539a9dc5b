"""Verify results reused from bakery's cache: only while nothing the run depends on changed.

A tiny synthetic series (not dcp2): one tree module, one test that loads it, one data
file; every input changed by one byte must run the suite again.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import reuse
from bakery.verifying.runner import VerifyResult
from tests.support.trees import write_files
from tests.support.verify import run_tests

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
    args: dict[str, Any] = {"interpret": True, "pytest_args": ["-q"], "series_dir": series}
    args.update(kw)
    env = args.pop("env", {})
    return reuse.static_key(reuse.inputs(reuse.Run(tests, tree, **args), env=env))


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


# --- issue 50: each promise of reuse, with the input that decides it varied ---------------------


@pytest.mark.parametrize("package", ["torch", "triton", "pytest", "numpy"])
def test_a_result_is_not_reused_after_a_package_of_the_run_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str
) -> None:
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    real = reuse._version
    monkeypatch.setattr(reuse, "_version", lambda name: "0.0.1" if name == package else real(name))
    assert _key(series, tests, tree) != base


def test_a_result_is_not_reused_after_python_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    monkeypatch.setattr(sys, "version", "3.99.0 (another build)")
    assert _key(series, tests, tree) != base


@pytest.mark.slow
def test_a_recorded_result_is_not_reused_after_torch_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: the record of the same tree and tests, under another torch, runs."""
    series, _, tree = make(tmp_path)
    cache = tmp_path / "cache"
    verify(series, tree, cache)
    assert verify(series, tree, cache).reused is not None
    real = reuse._version
    monkeypatch.setattr(reuse, "_version", lambda name: "0.0.1" if name == "torch" else real(name))
    assert verify(series, tree, cache).reused is None


@pytest.mark.parametrize(
    "package, rel",
    [
        ("bakery.testing", "plugin.py"),
        ("bakery.testing", "loader.py"),
        ("bakery.verifying", "runner.py"),
    ],
)
def test_a_result_is_not_reused_after_the_plugins_source_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, rel: str
) -> None:
    """The machinery's own files, read where the package is: a copy with the same bytes
    keys alike, one byte more in one file does not."""
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    real = Path(importlib.import_module(package).__file__ or "").parent
    copy = tmp_path / "machinery" / package
    shutil.copytree(real, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sys.modules[package], "__file__", str(copy / "__init__.py"))
    assert _key(series, tests, tree) == base
    (copy / rel).write_bytes((copy / rel).read_bytes() + b"\n# an edit\n")
    assert _key(series, tests, tree) != base


def _venv(root: Path, torch: str = "2.9.0") -> Path:
    write_files(
        root,
        {
            "bin/python": "",
            "pyvenv.cfg": "version = 3.11.7\n",
            f"lib/python3.11/site-packages/torch-{torch}.dist-info/METADATA": "",
        },
    )
    return root / "bin" / "python"


def test_a_result_is_not_reused_after_the_test_environment_changed(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    light = _key(series, tests, tree)
    python = str(_venv(tmp_path / "env"))
    full = _key(series, tests, tree, env_mode="full", python=python)
    assert full != light
    assert _key(series, tests, tree, env_mode="full", python=python) == full
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    # another torch installed in the same environment
    (site / "torch-2.9.0.dist-info").rename(site / "torch-2.9.1.dist-info")
    assert _key(series, tests, tree, env_mode="full", python=python) != full
    (site / "torch-2.9.1.dist-info").rename(site / "torch-2.9.0.dist-info")
    # a .pth added (it runs at every start)
    (site / "extra.pth").write_text("import os\n")
    assert _key(series, tests, tree, env_mode="full", python=python) != full
    (site / "extra.pth").unlink()
    # the Python the environment was made from
    (tmp_path / "env" / "pyvenv.cfg").write_text("version = 3.12.0\n")
    assert _key(series, tests, tree, env_mode="full", python=python) != full


TWO = TEST + "\n\ndef test_other():\n    pass\n"


@pytest.mark.slow
def test_a_run_under_pytest_addopts_k_is_not_reused_for_a_full_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series, tests, tree = make(tmp_path)
    (tests / "test_tiny.py").write_text(TWO)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k test_other")
    subset = verify(series, tree, cache)
    assert subset.passed == 1
    monkeypatch.delenv("PYTEST_ADDOPTS")
    full = verify(series, tree, cache)
    assert (full.reused, full.passed) == (None, 2)


def test_pytest_addopts_is_in_the_key(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    base = _key(series, tests, tree)
    assert _key(series, tests, tree, env={"PYTEST_ADDOPTS": "-k subset"}) != base
    assert _key(series, tests, tree, env={"HOME": "/elsewhere"}) == base  # not an input


@pytest.mark.slow
def test_an_edit_in_a_subfolder_of_the_tests_runs_again(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    write_files(tests, {"helpers/values.py": "WANT = 42\n", "helpers/__init__.py": ""})
    (tests / "test_tiny.py").write_text(
        TEST.replace("41 + 1", "__import__('helpers.values').values.WANT")
    )
    (tests / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\n"
    )
    cache = tmp_path / "cache"
    assert verify(series, tree, cache).passed == 1
    assert verify(series, tree, cache).reused is not None
    (tests / "helpers" / "values.py").write_text("WANT = 43\n")
    again = verify(series, tree, cache)
    assert (again.reused, again.failed) == (None, 1)


def test_an_edit_in_a_nested_tests_folder_changes_the_key(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    write_files(tests, {"a/b/c/data.txt": "1\n"})
    base = _key(series, tests, tree)
    (tests / "a" / "b" / "c" / "data.txt").write_text("2\n")
    assert _key(series, tests, tree) != base


@pytest.mark.slow
def test_junit_on_a_reusable_result_runs_and_writes_the_file(tmp_path: Path) -> None:
    """CI uploads the JUnit file: it is never missing, nor left from an earlier run."""
    series, _, tree = make(tmp_path)
    cache = tmp_path / "cache"
    verify(series, tree, cache)
    assert verify(series, tree, cache).reused is not None
    junit = tmp_path / "junit.xml"
    junit.write_text("stale: an earlier run's file\n")
    r = verify(series, tree, cache, junit=junit)
    assert r.reused is None and r.passed == 1
    text = junit.read_text()
    assert "stale" not in text and "<testcase" in text and "test_kernel" in text


def test_pytest_args_are_ordered_not_a_set(tmp_path: Path) -> None:
    series, tests, tree = make(tmp_path)
    one = _key(series, tests, tree, pytest_args=["-k", "a", "-m", "b"])
    other = _key(series, tests, tree, pytest_args=["-m", "a", "-k", "b"])
    assert one != other
    assert _key(series, tests, tree, pytest_args=["-x", "-v"]) != _key(
        series, tests, tree, pytest_args=["-v", "-x"]
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["tree", "tests"])
@pytest.mark.parametrize("reuse_it", [True, False], ids=["reuse", "no-reuse"])
def test_verify_does_not_hang_on_a_fifo_anywhere_in_the_tree(
    tmp_path: Path, where: str, reuse_it: bool
) -> None:
    series, tests, tree = make(tmp_path)
    folder = (tree / "vllm" / "deep") if where == "tree" else (tests / "data")
    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe")
    cache = tmp_path / "cache"
    r = verify(series, tree, cache, reuse=reuse_it)
    assert (r.reused, r.passed) == (None, 1)
    # the FIFO is in the key as what it is: one in its place of a file is another run
    key = _key(series, tests, tree)
    (folder / "pipe").unlink()
    (folder / "pipe").write_bytes(b"")
    assert _key(series, tests, tree) != key


@pytest.mark.parametrize("where", ["tree", "tests"])
def test_a_symlinked_folder_is_seen_by_the_reuse_key(tmp_path: Path, where: str) -> None:
    series, tests, tree = make(tmp_path)
    a = write_files(tmp_path / "a", {"m.py": "A = 1\n"})
    b = write_files(tmp_path / "b", {"m.py": "A = 1\n"})
    link = (tree / "vllm" / "linked") if where == "tree" else (tests / "linked")
    link.symlink_to(a, target_is_directory=True)
    first = _key(series, tests, tree)
    link.unlink()
    link.symlink_to(b, target_is_directory=True)
    assert _key(series, tests, tree) != first
    link.unlink()
    assert _key(series, tests, tree) != first


def test_a_file_behind_a_linked_tests_folder_is_in_the_key(tmp_path: Path) -> None:
    """pytest collects through a linked folder: an edit behind it makes the result stale."""
    series, tests, tree = make(tmp_path)
    shared = write_files(tmp_path / "shared", {"test_shared.py": "def test_s():\n    pass\n"})
    (tests / "shared").symlink_to(shared, target_is_directory=True)
    (tests / "loop").symlink_to(tests, target_is_directory=True)  # walked once, no loop
    base = _key(series, tests, tree)
    (shared / "test_shared.py").write_text("def test_s():\n    assert 0\n")
    assert _key(series, tests, tree) != base
