"""What a person reads after ``bakery verify`` (issue 48): the tree's modules on one line,
each on its own only when asked (``bakery -v verify``; pytest's own ``-v`` for its summary);
no Python warning. A real verify (pytest in a child) of a series whose test loads five of
the tree's modules."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.series import make_series, udiff
from tests.support.trees import cache_release

pytestmark = [pytest.mark.slow]

NAMES = [f"m{i}" for i in range(5)]
LOADS = """\
from bakery.testing import load_tree_module


def test_loads_five() -> None:
    for name in {names!r}:
        assert load_tree_module(f"vllm.{{name}}").VALUE == 1
"""


def _verify(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bakery", *args],
        capture_output=True,
        text=True,
        cwd=home,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,  # a guard against a hang, not a measure of speed
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def baked(cli: Callable[..., Result], home: Path) -> Path:
    files = {f"vllm/{n}.py": "VALUE = 1\n" for n in NAMES}
    cache_release("1.0.0", {"vllm/__init__.py": "", **files, "vllm/x.py": "A = 1\n"})
    series = make_series(
        home,
        "s",
        {"01-x.diff": udiff("x.py", "A = 1\n", "A = 2\n")},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\nenv = "light"\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_loads.py").write_text(LOADS.format(names=NAMES))
    assert cli("apply", "s").exit_code == 0
    return home


def test_the_modules_are_one_line_unless_asked(baked: Path) -> None:
    out = _verify(baked, "verify", "s", "--interpret", "--no-reuse")
    assert "Warning" not in out, out
    assert "from the tree  vllm.m0, vllm.m1, vllm.m2 and 2 more (-v lists them)" in out
    assert "real, from the tree: vllm.m0, vllm.m1, vllm.m2 and 2 more" in out
    assert sum("vllm.m4" in line for line in out.splitlines()) == 0, out

    out = _verify(baked, "-v", "verify", "s", "--interpret", "--no-reuse")
    tree = baked / "build" / "s-1.0.0" / "vllm"
    for name in NAMES:  # bakery's summary, one module a line
        assert f"  vllm.{name}  ({tree / name}.py)" in out, out

    out = _verify(baked, "verify", "s", "--interpret", "--no-reuse", "--", "-v")
    for name in NAMES:  # pytest's summary, with pytest's -v
        assert f"from the tree  vllm.{name}  ({tree / name}.py)" in out, out
