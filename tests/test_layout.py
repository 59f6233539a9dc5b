"""The tests' layout is a promise too: a newcomer finds the tests of ``src/bakery/X/`` in
``tests/X/``, and what tests share in ``tests/support`` (never in another test module).

Each test folder is a src package or one of the few folders named here with their reason;
no test module imports another (a test module's helpers move to tests/support, where
every test can find them); tests/support holds no tests; and every folder of test modules
is a package, so that two folders may each hold a ``test_wheel.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src" / "bakery"

#: Test folders that mirror no src package, and why.
OTHER_FOLDERS = {
    "support": "what tests share: trees, repos, series, the fake index, sdists",
    "security": "the threat catalogue, one module per class of attack, across packages",
    "hostile": "hostile inputs (diffs), data read by test_hostile.py",
    "fixtures": "files copied from real releases, data",
    "samples": "sample diffs, data",
}
#: Folders of data, not code: their .py files are never imported as tests.
DATA = {"hostile", "fixtures", "samples"}


def _test_code() -> list[Path]:
    return sorted(
        p
        for p in TESTS.rglob("*.py")
        if "__pycache__" not in p.parts and p.relative_to(TESTS).parts[0] not in DATA
    )


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in path: level > 0 for a relative import."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
    return out


def test_no_test_module_imports_another() -> None:
    bad = []
    for path in _test_code():
        for level, module in _imports(path):
            shared = module == "tests.support" or module.startswith("tests.support.")
            if level > 0 or (module.split(".")[0] == "tests" and not shared):
                bad.append(f"{path.relative_to(TESTS)}: {'.' * level}{module}")
    assert not bad, "import from tests.support instead: " + "; ".join(bad)


def test_each_test_folder_is_a_src_package_or_named_here() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    unknown = folders - packages - set(OTHER_FOLDERS)
    assert not unknown, f"test folders that mirror no src package: {sorted(unknown)}"
    assert not set(OTHER_FOLDERS) & packages, "a src package's tests belong in its own folder"
    stale = set(OTHER_FOLDERS) - folders
    assert not stale, f"OTHER_FOLDERS names folders that do not exist: {sorted(stale)}"


def test_test_modules_sit_one_folder_deep_in_packages() -> None:
    for path in _test_code():
        rel = path.relative_to(TESTS)
        if path.name.startswith("test_"):
            assert len(rel.parts) <= 2, f"{rel}: tests sit in tests/ or one folder below"
        if len(rel.parts) == 2:
            assert (path.parent / "__init__.py").is_file(), f"{rel.parent} is not a package"


def test_support_holds_no_tests() -> None:
    support = TESTS / "support"
    assert (support / "__init__.py").is_file()
    tests = [p.name for p in support.rglob("*.py") if p.name.startswith("test_")]
    assert not tests, f"tests/support holds tests: {tests}"
    assert not (support / "conftest.py").exists(), "fixtures belong in tests/conftest.py"
    for path in support.glob("*.py"):
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"tests/support/{path.name} says what it holds"
