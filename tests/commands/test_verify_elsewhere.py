"""Issue 45: a tree verified on a host that did not bake it. Its series' pristine-oracle
tests need the bake's pristine release: bakery's cache has it where the tree was baked;
on a fresh cache bakery fetches it from the package index, and where the index cannot be
reached the oracle's tests are left out, said in one line, and the verdict says
"verified, pristine oracle not run" (exit 0: every test that ran passed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.archives import sdist
from tests.support.index import Index
from tests.support.releases import BASE, release, series

CHANGED = BASE.replace("line10\n", "line10 changed\n")
TESTS = """\
def test_the_series_changes_line10(baked_tree):
    assert "line10 changed" in (baked_tree / "vllm/mod.py").read_text()


def test_upstream_had_it_plain(pristine_tree):
    assert "line10 changed" not in (pristine_tree / "vllm/mod.py").read_text()
"""


@pytest.fixture
def baked(home: Path, cli: Callable[..., Result], tmp_path: Path) -> Path:
    release("1.0.0", {"vllm/mod.py": BASE})
    folder = series(home, BASE, CHANGED)
    (folder / "tests").mkdir()
    (folder / "tests" / "test_s.py").write_text(TESTS)
    r = cli("apply", "s", "--out", "tree")
    assert r.exit_code == 0, r.output
    return tmp_path / "tree"


def _verify(cli: Callable[..., Result], tree: Path) -> Result:
    return cli(
        "verify", "s", "--tree", str(tree), "--interpret", "--no-reuse", "--", "-p", "no:randomly"
    )


def test_where_it_was_baked_the_oracle_runs(cli: Callable[..., Result], baked: Path) -> None:
    r = _verify(cli, baked)
    assert r.exit_code == 0, r.output
    assert "2 passed" in r.output and "pristine oracle not run" not in r.output


def test_on_a_fresh_cache_without_the_index_the_oracle_is_said_not_run(
    cli: Callable[..., Result], baked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKERY_CACHE_DIR", str(tmp_path / "fresh-cache"))  # another host
    r = _verify(cli, baked)
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.output.splitlines() if ln.startswith("pristine oracle not run:")]
    assert len(said) == 1, r.output
    assert "vLLM 1.0.0 is not in bakery's cache and cannot be fetched" in said[0]
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("verified, pristine oracle not run: 1 passed"), last
    assert "error" not in last and "failed" not in last


def test_on_a_fresh_cache_the_release_is_fetched_and_the_oracle_runs(
    cli: Callable[..., Result],
    baked: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    index: Index,
) -> None:
    index.add("vllm-1.0.0.tar.gz", sdist("1.0.0", files=0, modules={"vllm/mod.py": BASE}))
    monkeypatch.setenv("BAKERY_CACHE_DIR", str(tmp_path / "fresh-cache"))
    r = _verify(cli, baked)
    assert r.exit_code == 0, r.output
    assert "2 passed" in r.output and "pristine oracle not run" not in r.output
    assert index.downloads["vllm-1.0.0.tar.gz"] == 1
