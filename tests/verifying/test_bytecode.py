"""verify names the packages its test processes compile again at every import (no byte
code beside them, ``PYTHONDONTWRITEBYTECODE`` set), and the command that saves it; it
says nothing where byte code exists or will be written."""

from __future__ import annotations

import importlib.util
import logging
import py_compile
from pathlib import Path

import pytest

from bakery.verifying import bytecode
from tests.support.trees import write_files
from tests.support.verify import run_tests

NO_WRITE = {"PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture
def heavy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package without byte code (as torch ships in the device's image)."""
    root = tmp_path / "site"
    write_files(root, {"bakeryheavy/__init__.py": "X = 1\n", "bakerylight/__init__.py": "Y = 1\n"})
    compile_beside(root / "bakerylight")  # a package with byte code
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    return root / "bakeryheavy"


def compile_beside(package: Path) -> None:
    source = package / "__init__.py"
    py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))


def test_a_package_without_byte_code_is_named(heavy: Path) -> None:
    assert bytecode.recompiled(NO_WRITE, ["bakeryheavy"]) == ["bakeryheavy"]
    line = bytecode.hint(["bakeryheavy"])
    assert "bakeryheavy has no byte code" in line
    assert f"python -m compileall -q {heavy}" in line


def test_nothing_is_said_where_byte_code_is_read_or_written(heavy: Path) -> None:
    assert bytecode.recompiled({}, ["bakeryheavy"]) == []  # the first import writes it
    assert bytecode.recompiled({"PYTHONDONTWRITEBYTECODE": ""}, ["bakeryheavy"]) == []
    prefixed = {**NO_WRITE, "PYTHONPYCACHEPREFIX": "/elsewhere"}
    assert bytecode.recompiled(prefixed, ["bakeryheavy"]) == []
    assert bytecode.recompiled(NO_WRITE, ["bakery_no_such_package", "bakerylight"]) == []
    compile_beside(heavy)
    assert bytecode.recompiled(NO_WRITE, ["bakeryheavy"]) == []


def test_verify_says_it_once_before_the_tests_run(
    heavy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(bytecode, "PACKAGES", ("bakeryheavy", "bakerylight"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    tree = write_files(tmp_path / "tree", {"vllm/__init__.py": ""})
    tests = write_files(tmp_path / "t", {"test_quick.py": "def test_quick():\n    assert True\n"})
    with caplog.at_level(logging.INFO, logger="bakery"):
        result = run_tests(tests, tree, interpret=True, pytest_args=["-q"])
    assert result.exit_code == 0
    said = [r.getMessage() for r in caplog.records if "no byte code" in r.getMessage()]
    assert said == [bytecode.hint(["bakeryheavy"])]

    caplog.clear()
    compile_beside(heavy)
    with caplog.at_level(logging.INFO, logger="bakery"):
        run_tests(tests, tree, interpret=True, pytest_args=["-q"])
    assert not [r for r in caplog.records if "no byte code" in r.getMessage()]
