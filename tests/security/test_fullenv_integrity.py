"""A cached full test environment is never executed as found (issue 46, "A cached full
environment is executed as found"): before its interpreter runs, its folder is walked
against the inventory in its MACed marker. A planted ``.pth``, an environment or a
``bin/python`` that is a link elsewhere, a file changed in place, a marker forged or
made a FIFO: each is one warning, the environment is built again, and nothing planted
runs. A cache copied back as it was (a restored CI cache: new inodes and ctimes, the same
bytes) is used as it is.

The first two cases run end to end (``bakery verify --env full`` on a tiny release whose
requirements are bakery's own torch: a real venv, no index); the others call
``fullenv.ensure`` and look at what it did.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.sources.cache import Cache
from bakery.verifying import fullenv
from tests.support.series import make_series, udiff
from tests.support.trees import cache_release, snapshot, write_files

Cli = Callable[..., Result]

MOD = "VALUE = 1\n"
TEST = """
import runpy


def test_the_bake_changed_the_value(baked_tree):
    assert runpy.run_path(str(baked_tree / "vllm" / "mod.py"))["VALUE"] == 2
"""
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def _series(home: Path) -> None:
    cache_release(
        "1.0.0",
        {"vllm/__init__.py": "", "vllm/mod.py": MOD, "requirements/common.txt": "torch\n"},
    )
    series = make_series(
        home,
        "s",
        {"01-value.diff": udiff("mod.py", MOD, "VALUE = 2\n")},
        'root = "vllm"\nstrip = 1\nenv = "full"\n',
    )
    write_files(series / "tests", {"test_tree.py": TEST})


def _verify(cli: Cli) -> Result:
    return cli("verify", "s", "--env", "full", "--interpret", "--no-reuse", "--jobs", "1")


def _env(tmp_path: Path) -> Path:
    (found,) = [p for p in (tmp_path / "cache" / "envs").iterdir() if p.suffix != ".json"]
    return found


def _warnings(r: Result) -> list[str]:
    return [ln for ln in r.output.splitlines() if "is not used" in ln]


@pytest.fixture
def verified(cli: Cli, home: Path, tmp_path: Path) -> Path:
    """Series s applied and verified once in the full environment; the environment."""
    _series(home)
    assert cli("apply", "s", "--vllm", "1.0.0").exit_code == 0
    r = _verify(cli)
    assert r.exit_code == 0, r.output
    assert not _warnings(r)
    return _env(tmp_path)


def test_a_planted_pth_does_not_run_on_the_next_verify(
    cli: Cli, tmp_path: Path, verified: Path
) -> None:
    ran = tmp_path / "pth-ran"
    planted = verified / SITE / "zz_planted.pth"
    planted.write_text(f"import pathlib; pathlib.Path({str(ran)!r}).write_text('ran')\n")
    r = _verify(cli)
    assert r.exit_code == 0, r.output
    assert not ran.exists()
    (said,) = _warnings(r)
    assert "a .pth file its installer did not write" in said and "zz_planted.pth" in said
    assert not planted.exists()
    again = _verify(cli)  # the rebuilt environment is trusted: not rebuilt again
    assert again.exit_code == 0 and not _warnings(again) and not ran.exists()


def test_an_environment_linked_elsewhere_does_not_run_that_folders_python(
    cli: Cli, tmp_path: Path, verified: Path
) -> None:
    ran = tmp_path / "python-ran"
    other = tmp_path / "other-env"
    shutil.copytree(verified, other, symlinks=True)
    fake = other / "bin" / "python"
    fake.unlink()
    fake.write_text(f'#!/bin/sh\necho ran > {ran}\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    before = snapshot(other)
    shutil.rmtree(verified)
    verified.symlink_to(other, target_is_directory=True)
    r = _verify(cli)
    assert r.exit_code == 0, r.output
    assert not ran.exists()
    (said,) = _warnings(r)
    assert "its folder is a link" in said
    assert not verified.is_symlink() and verified.is_dir()
    assert snapshot(other) == before  # the link was removed, never what it named


# --- fullenv.ensure on its own -------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_files(tmp_path / "tree", {"requirements/common.txt": "torch\n"})


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def _again(
    tree: Path, cache: Cache, caplog: pytest.LogCaptureFixture
) -> tuple[fullenv.FullEnv, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bakery"):
        found = fullenv.ensure(tree, cpu=False, cache=cache)
    return found, [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_python_link_pointing_elsewhere_is_rebuilt(
    tree: Path, cache: Cache, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    links = [p for p in (first.path / "bin").iterdir() if p.is_symlink()]
    target = next(p for p in links if os.path.isabs(os.readlink(p)))
    wanted = os.readlink(target)
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere-python")
    again, said = _again(tree, cache, caplog)
    assert again.built and len(said) == 1 and "is not the link its installer made" in said[0]
    assert os.readlink(target) == wanted


@pytest.mark.parametrize("rel", [f"{SITE}/_bakery_layer.pth", "bakery-constraints.txt"])
def test_a_file_changed_in_place_is_rebuilt(
    tree: Path, cache: Cache, caplog: pytest.LogCaptureFixture, rel: str
) -> None:
    """Same size, other bytes: a .pth is hashed every time, any other file once its
    ctime says it was written."""
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    changed = first.path / rel
    data = changed.read_bytes()
    changed.write_bytes(b"#" * (len(data) - 1) + b"\n")
    again, said = _again(tree, cache, caplog)
    assert again.built and len(said) == 1 and f"{rel} was changed" in said[0]
    assert changed.read_bytes() == data


def test_a_pyc_planted_in_pycache_is_rebuilt(
    tree: Path, cache: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    planted = first.path / SITE / "__pycache__" / "sitecustomize.cpython-311.pyc"
    planted.parent.mkdir()
    planted.write_bytes(b"\0" * 16)
    again, said = _again(tree, cache, caplog)
    assert again.built and "a file its installer did not write" in said[0]
    assert not planted.parent.exists()


def test_a_forged_marker_is_rebuilt(
    tree: Path, cache: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    """Planted .pth and an inventory that lists it: without the key, the MAC is wrong."""
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    planted = first.path / SITE / "zz.pth"
    planted.write_text("import os\n")
    marker = cache.root / "envs" / f"{first.key}.json"
    meta = json.loads(marker.read_text())
    st = planted.stat()
    meta["inventory"][f"{SITE}/zz.pth"] = [
        "f", st.st_size, fullenv._hash(planted), st.st_ino, st.st_ctime_ns,
    ]  # fmt: skip
    marker.write_text(json.dumps(meta))
    again, said = _again(tree, cache, caplog)
    assert again.built and "MAC does not match" in said[0]
    assert not planted.exists()


def test_a_fifo_marker_does_not_block(
    tree: Path, cache: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    marker = cache.root / "envs" / f"{first.key}.json"
    marker.unlink()
    os.mkfifo(marker)
    again, said = _again(tree, cache, caplog)
    assert again.built and "marker cannot be read" in said[0]
    assert marker.is_file()


def test_a_restored_copy_is_used_as_it_is(
    tree: Path, cache: Cache, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CI cache restored on the same machine's key: new inodes and ctimes, the same
    bytes. Each file is hashed again, matches, and the new stat is recorded."""
    first = fullenv.ensure(tree, cpu=False, cache=cache)
    shutil.copytree(first.path, tmp_path / "copy", symlinks=True)
    shutil.rmtree(first.path)
    shutil.move(tmp_path / "copy", first.path)
    again, said = _again(tree, cache, caplog)
    assert not again.built and said == []
    marker = json.loads((cache.root / "envs" / f"{first.key}.json").read_text())
    assert marker["inventory"]["pyvenv.cfg"][3] == (first.path / "pyvenv.cfg").stat().st_ino
    third, said = _again(tree, cache, caplog)
    assert not third.built and said == []


def test_a_key_others_can_read_is_one_line(tree: Path, cache: Cache) -> None:
    """Without a key of the user's alone, no marker is believed or written: one line."""
    from bakery.safety import seal

    fullenv.ensure(tree, cpu=False, cache=cache)
    seal.key_path().chmod(0o644)
    seal._keys.clear()
    with pytest.raises(seal.SealUnavailable, match="can be read or written by others"):
        fullenv.ensure(tree, cpu=False, cache=cache)
