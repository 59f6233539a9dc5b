"""``matrix --verify`` says when it builds a full test environment (minutes each), one line
at the start and one at the end of each build, with one job or several: it used to print
nothing between "verifying each baked tree" and the grid (the trial, finding 6). The
environments are real (a venv layered on bakery's own torch, nothing to install)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.series import make_series, udiff
from tests.support.trees import cache_release

pytestmark = [pytest.mark.slow]

TEST = """
import runpy


def test_the_bake(baked_tree):
    assert runpy.run_path(str(baked_tree / "vllm" / "mod.py"))["VALUE"] == 2
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_matrix_verify_says_each_full_environment_it_builds(
    cli: Callable[..., Result], home: Path, jobs: str
) -> None:
    for version, reqs in (("1.0.0", "torch\n"), ("1.1.0", "torch  # 1.1\n")):
        cache_release(
            version,
            {"vllm/__init__.py": "", "vllm/mod.py": "VALUE = 1\n", "requirements/common.txt": reqs},
        )
    series = make_series(
        home,
        "s",
        {"01-v.diff": udiff("mod.py", "VALUE = 1\n", "VALUE = 2\n")},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\nenv = "full"\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_s.py").write_text(TEST)
    args = ("matrix", "s", "--vllm", "1.0.0", "1.1.0", "--verify", "--interpret")
    r = cli(*args, "--jobs", jobs)
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    building = [ln for ln in lines if ln.startswith("building the full test environment")]
    built = [ln for ln in lines if ln.startswith("full test environment ") and "built in" in ln]
    assert len(building) == len(built) >= 1, r.stderr
    assert lines.index(building[0]) < lines.index(built[0])
    # built once, then cached: the next matrix says nothing of it
    again = cli(*args, "--jobs", jobs)
    assert again.exit_code == 0 and "full test environment" not in again.stderr, again.stderr
