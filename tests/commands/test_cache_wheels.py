"""bakery cache list|clean and the upstream wheels: a downloaded wheel (hundreds of MB for
vLLM) is an entry like a release, listed under a header and removed by clean."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.index import Index, serve_index

WHEEL = "vllm-9.9.0-cp38-abi3-manylinux_2_28_x86_64.whl"


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The wheel fetched into the cache by bakery's own code (wheels.fetch)."""
    from bakery.sources import wheels
    from bakery.sources.cache import Cache

    idx: Index
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add(WHEEL, b"PK" + os.urandom(5000))
        cache = Cache()
        (found,) = wheels.release_wheels("9.9.0", cache)
        wheels.fetch(found, cache)
        yield cache.root


def test_list_shows_the_wheel_under_a_header(fetched: Path, cli: Callable[..., Result]) -> None:
    r = cli("cache", "list", "--json")
    assert r.exit_code == 0, r.output
    entries = {e["key"]: e for e in json.loads(r.output)["entries"]}
    wheel = entries[f"wheel-{WHEEL}"]
    assert (wheel["kind"], wheel["version"], wheel["complete"]) == ("wheel", "9.9.0", True)
    assert wheel["size"] >= 5002
    assert str(fetched / "wheels" / WHEEL) in wheel["paths"]
    assert entries["wheel-list-9.9.0"]["kind"] == "wheel"
    lines = cli("cache", "list").output.splitlines()
    assert lines[0].split() == ["KEY", "(used", "last", "first)", "KIND", "SIZE", "USED", "WHAT"]
    assert any(ln.startswith(f"wheel-{WHEEL} ") and ln.endswith(WHEEL) for ln in lines)
    assert lines[-1].startswith("2 entries")


def test_clean_removes_the_wheel(fetched: Path, cli: Callable[..., Result]) -> None:
    r = cli("cache", "clean")
    assert r.exit_code == 0, r.output
    assert f"removed wheel-{WHEEL}" in r.output
    assert not any((fetched / "wheels").iterdir())
    assert json.loads(cli("cache", "list", "--json").output)["entries"] == []
