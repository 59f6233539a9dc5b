"""Which tree ``verify`` takes, and where its tests run, said in the open: the series'
last ``bakery apply`` (never a tree a matrix worker wrote), the series a ``--tree`` was
baked from, and the CPU or GPU the same way for ``verify`` and ``matrix --verify``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.archives import sdist
from tests.support.index import LocalIndex, serve
from tests.support.trees import write_files

TEST = (
    "from bakery.testing import load_tree_module\n\n\n"
    "def test_tree(baked_tree):\n"
    "    assert load_tree_module('vllm.pkg.m000').__file__.startswith(str(baked_tree))\n"
)
DIFF = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+A\n"


@pytest.fixture(autouse=True)
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalIndex]:
    idx = LocalIndex({f"vllm-{v}.tar.gz": sdist(v, files=2) for v in ("1.0.0", "1.1.0")})
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        yield idx


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bakery.verifying.plan.cuda_available", lambda: False)


@pytest.fixture
def series(home: Path) -> Path:
    return write_files(
        home / "launcher" / "x",
        {
            "series.toml": 'strip = 1\nroot = ""\n',
            "diffs/01-x.diff": DIFF,
            "tests/test_tree.py": TEST,
        },
    )


def test_verify_takes_the_last_apply_not_a_matrix_workers_tree(
    series: Path, cli: Callable[..., Result]
) -> None:
    assert cli("apply", "x", "--vllm", "1.0.0", "--out", "mine").exit_code == 0
    m = cli("matrix", "x", "--vllm", "1.1.0", "--jobs", "1", "--verify", "--out", "mx")
    assert m.exit_code == 0, m.output
    assert "verifying each baked tree on the CPU with Triton's interpreter (no CUDA GPU" in m.output
    r = cli("verify", "x", "--", "-q")
    assert r.exit_code == 0, r.output
    assert (
        "verifying mine (the last `bakery apply x`) on the CPU with Triton's interpreter "
        in r.output
    )
    assert "(no CUDA GPU visible)" in r.output


def test_verify_without_a_series_takes_the_trees_own(
    series: Path, home: Path, cli: Callable[..., Result]
) -> None:
    write_files(home / "launcher" / "other", {"diffs/01-y.diff": DIFF})  # two series now
    assert cli("apply", "x", "--vllm", "1.0.0", "--out", "t").exit_code == 0
    r = cli("verify", "--tree", "t", "--interpret")
    assert r.exit_code == 0, r.output
    assert "verifying t (--tree) on the CPU with Triton's interpreter (--interpret)" in r.output


def test_verify_without_a_series_or_tree_never_takes_the_series_from_the_cache(
    series: Path, home: Path, cli: Callable[..., Result]
) -> None:
    """The last-bake record is the cache's, which chooses nothing that runs (SECURITY.md,
    issue 28): with two series and neither SERIES nor --tree, verify asks."""
    write_files(home / "launcher" / "other", {"diffs/01-y.diff": DIFF})
    assert cli("apply", "x", "--vllm", "1.0.0", "--out", "t").exit_code == 0
    r = cli("verify")
    assert r.exit_code == 2, r.output
    assert r.output.strip() == "error: verify: name the series (the project has 2) or pass --tree"


def test_verify_names_what_to_do_when_nothing_says_the_series(
    series: Path, home: Path, cli: Callable[..., Result]
) -> None:
    write_files(home / "launcher" / "other", {"diffs/01-y.diff": DIFF})
    r = cli("verify")
    assert r.exit_code == 2
    assert r.output.strip() == "error: verify: name the series (the project has 2) or pass --tree"


def test_gpu_asked_without_one_is_refused(series: Path, cli: Callable[..., Result]) -> None:
    assert cli("apply", "x", "--vllm", "1.0.0", "--out", "t").exit_code == 0
    r = cli("verify", "x", "--gpu")
    assert r.exit_code == 2 and "no CUDA GPU is visible to torch" in r.output
