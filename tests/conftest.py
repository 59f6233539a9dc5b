"""Shared fixtures: every test runs in its own tmp folder with its own cache and home.

No test may touch the user's cache or home: ``BAKERY_CACHE_DIR``, ``BAKERY_HOME``,
``BAKERY_CONFIG_DIR`` (the seal key), ``HOME`` and ``XDG_CACHE_HOME`` all point into
``tmp_path``, and the working directory is ``tmp_path``. Tests marked ``network`` use one
persistent cache (``BAKERY_TEST_CACHE``, default ``~/.cache/bakery-tests``) so that
releases are downloaded once, not per run. What tests share besides fixtures (trees,
repos, series, the fake index, sdists, GNU patch) is in the ``tests/support`` package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.support.index import Index, serve_index
from tests.support.paths import TEST_CACHE
from tests.support.trees import Tiny, make_tiny

# rich sizes consoles made at import from COLUMNS: fix it before bakery.cli.app is imported.
os.environ["COLUMNS"] = "200"


@pytest.fixture(autouse=True)
def _isolate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[None]:
    home = tmp_path / "home"
    (home / "launcher").mkdir(parents=True)
    monkeypatch.setenv("BAKERY_HOME", str(home))
    # the seal key (bakery.safety.seal) beside the cache it seals: the network tests'
    # persistent cache keeps its key, every other test has its own
    if request.node.get_closest_marker("network"):
        monkeypatch.setenv("BAKERY_CACHE_DIR", str(TEST_CACHE))
        monkeypatch.setenv("BAKERY_CONFIG_DIR", str(TEST_CACHE.with_name("bakery-tests-config")))
    else:
        monkeypatch.setenv("BAKERY_CONFIG_DIR", str(tmp_path / "userhome" / ".config" / "bakery"))
        monkeypatch.setenv("BAKERY_CACHE_DIR", str(tmp_path / "cache"))
        # A unit test that reaches for the package index fails at once instead of waiting.
        monkeypatch.setenv("BAKERY_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "userhome" / ".cache"))
    monkeypatch.setenv("COLUMNS", "200")
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The project root bakery sees (BAKERY_HOME): holds launcher/ and patches/."""
    return tmp_path / "home"


@pytest.fixture
def tiny(tmp_path: Path, home: Path) -> Tiny:
    return make_tiny(tmp_path / "src", home)


# --- a package index -------------------------------------------------------------------------


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        yield idx


# --- rank processes ---------------------------------------------------------------------------


@pytest.fixture
def cpu_ranks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rank pools on the CPU (gloo, Triton's interpreter), forked from the fork server;
    the server is stopped after the test, so the next one starts its own."""
    from bakery.testing.dist import stop_rank_server

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("BAKERY_RANK_START", raising=False)
    yield
    stop_rank_server()


# --- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Run bakery's CLI in-process with a fixed terminal width."""
    from bakery.cli.app import app

    runner = CliRunner()

    def invoke(*args: str | Path) -> Result:
        return runner.invoke(
            app, [str(a) for a in args], env={"COLUMNS": "200"}, catch_exceptions=False
        )

    return invoke
