"""Issue 45: a merged hunk whose code breaks a contract on the release (it calls a vLLM name
with a keyword or an arity the new signature does not take, or a name that is gone) is a
conflict, not a bake: it goes to ``.failed/`` as conflicts do, and the report says why.
A merge whose code fits the release still bakes, and says it is unverified."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import Result

from bakery.git import cmd as gitutil
from tests.support.releases import release, series

#: The base: g takes ``flag``; h calls g, three lines below a line the release changes.
BASE = (
    "def g(x, flag=False):\n    return x\n\n\n"
    "def h(x):\n    a = 1\n    b = 2\n    c = 3\n    return g(x)\n"
)
#: The series passes ``flag`` in h's call.
OURS = BASE.replace("return g(x)\n", "return g(x, flag=True)\n")


def _release(g: str) -> str:
    """A release whose h changed above the series' hunk (so that it merges) and whose g
    is ``g``."""
    return BASE.replace("def g(x, flag=False):\n", g).replace("a = 1", "a = 10")


@pytest.fixture
def project(home: Path) -> Path:
    release("1.0.0", {"vllm/mod.py": BASE})
    series(home, BASE, OURS)
    return home


def _apply(cli: Callable[..., Result], version: str) -> tuple[Result, dict[str, Any]]:
    r = cli("apply", "s", "--vllm", version, "--json", "r.json", "--keep-failed", "--out", "b")
    return r, json.loads(Path("r.json").read_text())


def _hunk(report: dict[str, Any]) -> dict[str, Any]:
    (d,) = report["diffs"]
    (f,) = d["files"]
    (h,) = f["hunks"]
    return cast("dict[str, Any]", h)


@pytest.mark.parametrize(
    ("g", "why"),
    [
        ("def g(x):\n", "passes flag= by keyword, which is no longer a parameter"),
        ("def g(x, y, flag=False):\n", "does not pass y, now required"),
    ],
)
def test_a_merge_that_calls_g_as_the_release_no_longer_takes_it_is_a_conflict(
    project: Path, cli: Callable[..., Result], g: str, why: str
) -> None:
    release("1.1.0", {"vllm/mod.py": _release(g)})
    r, report = _apply(cli, "1.1.0")
    assert r.exit_code == 1, r.output
    assert report["status"] == "conflict" and report["proof"] is None
    hunk = _hunk(report)
    assert hunk["status"] == "failed"
    assert str(hunk["reason"]).startswith("contract: the three-way merge's code does not fit")
    assert why in str(hunk["reason"]) and why in r.output
    assert not Path("b").exists()
    # the attempt holds the merge, its three sides unmerged in git's index
    failed = Path("b.failed")
    assert "return g(x, flag=True)" in (failed / "vllm" / "mod.py").read_text()
    assert gitutil.git(failed, "status", "--porcelain").startswith("UU vllm/mod.py")


def test_a_merge_whose_code_fits_the_release_bakes_unverified(
    project: Path, cli: Callable[..., Result]
) -> None:
    release("1.1.0", {"vllm/mod.py": _release("def g(x, z=0, flag=False):\n")})
    r, report = _apply(cli, "1.1.0")
    assert r.exit_code == 0, r.output
    assert _hunk(report)["status"] == "merged"
    assert report["proof"] == {"state": "unverified", "reason": "1 hunks merged; not yet tested"}
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith("unverified: 1 hunks merged; run `bakery verify s`"), r.stdout
    manifest = json.loads((Path("b") / ".bakery" / "manifest.json").read_text())
    assert manifest["proof"]["state"] == "unverified"
