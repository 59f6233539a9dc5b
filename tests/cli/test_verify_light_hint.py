"""A light verify whose test imports a tree module that needs a module the light
environment lacks ends with the way out, ``--env full``, as its last line: pytest shows
the loader's message only inside a collection traceback, after its own hint about test
module names (the trial, finding 8). A real verify: pytest in a child process."""

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

#: The trial's test: the tree module imported at the test module's top (a collection
#: error); in a test (a failed test); a test that fails on its own (no hint).
TESTS = {
    "top": "from vllm.needs import VALUE\n\n\ndef test_needs() -> None:\n    assert VALUE == 1\n",
    "in-test": "from bakery.testing import load_tree_module\n\n\n"
    'def test_needs() -> None:\n    assert load_tree_module("vllm.needs").VALUE == 1\n',
    "own": "def test_needs() -> None:\n    assert 1 == 2\n",
}


@pytest.mark.parametrize("how", list(TESTS))
def test_a_light_run_missing_a_module_ends_naming_env_full(
    cli: Callable[..., Result], home: Path, how: str
) -> None:
    cache_release(
        "1.0.0",
        {
            "vllm/__init__.py": "",
            "vllm/needs.py": "import bakery_absent_module_x\n\nVALUE = 1\n",
            "vllm/x.py": "A = 1\n",
        },
    )
    series = make_series(
        home,
        "s",
        {"01-x.diff": udiff("x.py", "A = 1\n", "A = 2\n")},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\nenv = "light"\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_needs.py").write_text(TESTS[how])
    assert cli("apply", "s").exit_code == 0
    done = subprocess.run(
        [sys.executable, "-m", "bakery", "verify", "s", "--interpret", "--no-reuse"],
        capture_output=True,
        text=True,
        cwd=home,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,  # a guard against a hang, not a measure of speed
    )
    out = done.stdout + done.stderr
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    assert done.returncode == 1, out
    hint = (
        "hint: the light test environment lacks bakery_absent_module_x (imported by "
        'vllm.needs): `bakery verify --env full` (or env = "full" in series.toml) '
        "installs vLLM's requirements"
    )
    # no kernel in this series: no Triton interpreter fix is named, by pytest or bakery
    assert "tool fix" not in out and "test tools" not in out, out
    if how == "own":  # a test that fails on its own: no such hint
        assert "1 failed" in out and "hint:" not in out, out
        return
    assert lines[-1] == hint, out
    said = "1 error in" if how == "top" else "1 failed in"
    assert f"tests failed: {said}" in out, out
