"""Class 3: verify's default tree is not whatever the cache says.

``bakery verify S`` without ``--tree`` runs tests against the tree of the series' last
apply, which bakery records in the cache: data anyone who can write the cache controls.
The recorded tree is used only when it is one bakery baked for this series, inside the
project's ``build/``, or elsewhere with every file as its manifest records; anything else
is refused with one line before a test runs. Without SERIES, the series never comes from
the cache. Each case plants a ``conftest.py`` that would leave a marker if pytest ran in
the planted folder, and snapshots that folder: nothing ran, nothing changed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery import project
from bakery.sources.cache import Cache
from tests.support.cli import refused
from tests.support.trees import Tiny, snapshot, write_files

Cli = Callable[..., Result]
TREE_TEST = "def test_x(baked_tree):\n    assert baked_tree.is_dir()\n"
ROOT = Path(__file__).resolve().parents[2]


def _record(home: Path, series: str, tree: Path) -> None:
    """The cache's last-bake record, rewritten as a poisoned cache would hold it."""
    record = Cache().path(".") / project.LAST_BAKES
    record.write_text(json.dumps({str(home.absolute()): {series: str(tree)}}))


def _decoy(tmp_path: Path, marker: Path) -> Path:
    d = tmp_path / "decoy"
    write_files(
        d,
        {
            "conftest.py": f"open({str(marker)!r}, 'w').close()\n",
            "vllm/__init__.py": f"open({str(marker)!r}, 'w').close()\n",
            "setup.py": "",
        },
    )
    return d


@pytest.fixture
def with_tests(tiny: Tiny) -> Tiny:
    write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
    return tiny


def test_recorded_foreign_folder_is_refused(
    cli: Cli, with_tests: Tiny, home: Path, tmp_path: Path
) -> None:
    """The end-to-end scenario: the record names a folder bakery never baked."""
    marker = tmp_path / "PWNED"
    decoy = _decoy(tmp_path, marker)
    before = snapshot(decoy)
    _record(home, "demo", decoy)
    refused(cli("verify", "demo", "--interpret"), "not a tree bakery baked for demo")
    assert not marker.exists()
    assert snapshot(decoy) == before


def test_recorded_tree_with_a_forged_manifest_outside_build_is_refused(
    cli: Cli, with_tests: Tiny, home: Path, tmp_path: Path
) -> None:
    """A baked tree's manifest copied into a foreign folder: its files do not match."""
    marker = tmp_path / "PWNED"
    assert cli("apply", "demo", "--vllm", with_tests.src, "--out", tmp_path / "out").exit_code == 0
    decoy = _decoy(tmp_path, marker)
    shutil.copytree(tmp_path / "out" / ".bakery", decoy / ".bakery")
    before = snapshot(decoy)
    _record(home, "demo", decoy)
    refused(cli("verify", "demo", "--interpret"), "not as baked")
    assert not marker.exists()
    assert snapshot(decoy) == before


def test_recorded_tree_of_another_series_is_refused(
    cli: Cli, with_tests: Tiny, home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", with_tests.src, "--out", out).exit_code == 0
    shutil.copytree(with_tests.series, home / "launcher" / "other")
    _record(home, "other", out)
    refused(cli("verify", "other", "--interpret"), "not a tree bakery baked for other")


def test_without_series_the_cache_does_not_choose_it(
    cli: Cli, with_tests: Tiny, home: Path, tmp_path: Path
) -> None:
    shutil.copytree(with_tests.series, home / "launcher" / "other")
    out = tmp_path / "out"
    assert cli("apply", "other", "--vllm", with_tests.src, "--out", out).exit_code == 0
    refused(cli("verify", "--interpret"), "name the series")


def test_tree_in_build_is_the_default_even_when_edited(
    cli: Cli, with_tests: Tiny, home: Path
) -> None:
    """The promise kept: apply's own tree in build/ is verified, edits and all."""
    assert cli("apply", "demo", "--vllm", with_tests.src).exit_code == 0
    (tree,) = (home / "build").iterdir()
    k = tree / "vllm/model_executor/k.py"
    k.write_text(k.read_text() + "\n# a fix being tried\n")
    r = cli("verify", "demo", "--interpret")
    assert r.exit_code == 0, r.output
    assert "verified: 1 passed" in r.stderr


def test_rebake_workflow_names_the_tree() -> None:
    # the commands that run a tree's tests (verify, and wheel's own verify before it
    # publishes) name the tree: never the one the cache's record of the last bake names
    text = (ROOT / ".github/workflows/rebake.yml").read_text()
    lines = text.splitlines()
    calls = [
        " ".join(lines[i : i + 2])
        for i, ln in enumerate(lines)
        if "bakery verify " in ln or "bakery wheel " in ln
    ]
    assert calls and all("--tree" in c for c in calls), calls
