"""bakery.testing is the series authors' one API: a series' tests import bakery only
through ``from bakery.testing import NAME`` with NAME in its ``__all__``, and every such
name is there (loaded on first use where its module is heavy)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import bakery.testing

ROOT = Path(__file__).resolve().parents[2]


def _bakery_imports(path: Path) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bakery":
            out.append((node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == "bakery"]
    return out


def _series_test_files() -> list[Path]:
    return sorted((ROOT / "launcher").glob("*/tests/**/*.py"))


def test_the_project_has_series_tests_to_hold() -> None:
    assert _series_test_files(), "no launcher/*/tests to check"


@pytest.mark.parametrize("path", _series_test_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_series_tests_import_only_the_public_api(path: Path) -> None:
    for module, names in _bakery_imports(path):
        assert module == "bakery.testing", f"{module}: import it from bakery.testing"
        assert set(names) <= set(bakery.testing.__all__), names


def test_the_init_template_uses_the_public_api(tmp_path: Path) -> None:
    from bakery.commands.init import EXAMPLE_MODULE, EXAMPLE_TEST

    path = tmp_path / "test_example.py"
    path.write_text(EXAMPLE_TEST.format(name="s", module=EXAMPLE_MODULE))
    for module, names in _bakery_imports(path):
        assert module == "bakery.testing" and set(names) <= set(bakery.testing.__all__)


def test_every_public_name_resolves() -> None:
    for name in bakery.testing.__all__:
        assert getattr(bakery.testing, name) is not None, name
    with pytest.raises(AttributeError):
        bakery.testing.no_such_name  # noqa: B018


def test_importing_the_api_stays_light() -> None:
    """The plugin (pytest) and the expectations load when a test asks for them."""
    code = "import sys, bakery.testing; print('pytest' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
