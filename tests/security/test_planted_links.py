"""Class 5: writes through planted links.

Every file bakery makes (a wheel, a sdist, a tree's manifest, a port's diffs, a cache
marker) goes through one temp-file writer (``bakery.outputs.replacing``): a new file in
the target's folder, ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name, renamed over
the target. A link planted at the old predictable temp name (``.NAME.PID.tmp``), or at
the target, never makes bakery write into the file it names.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bakery import outputs
from bakery.errors import BakeryError
from bakery.model.report import write_json
from bakery.package import sdist, wheel
from tests.support.trees import snapshot


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "decoy" / "id_rsa"
    v.parent.mkdir()
    v.write_text("the user's key\n")
    return v


def _plant(folder: Path, name: str, victim: Path) -> None:
    """Links at the predictable temp names the old writers used."""
    folder.mkdir(parents=True, exist_ok=True)
    for tmp in (f".{name}.{os.getpid()}.tmp", f"{name}.tmp", f".{name}.tmp"):
        os.symlink(victim, folder / tmp)


def test_sdist_writer_never_writes_through_a_planted_link(tmp_path: Path, victim: Path) -> None:
    before = snapshot(victim.parent)
    dist = tmp_path / "dist"
    _plant(dist, "vllm-1.0.0+s.tar.gz", victim)
    with sdist._atomic(dist / "vllm-1.0.0+s.tar.gz") as fh:
        fh.write(b"archive")
    assert (dist / "vllm-1.0.0+s.tar.gz").read_bytes() == b"archive"
    assert snapshot(victim.parent) == before


def test_wheel_writer_never_writes_through_a_planted_link(tmp_path: Path, victim: Path) -> None:
    before = snapshot(victim.parent)
    dist = tmp_path / "dist"
    _plant(dist, "w.whl", victim)
    with wheel._atomic(dist / "w.whl") as fd:
        os.write(fd, b"zip")
    assert (dist / "w.whl").read_bytes() == b"zip"
    assert snapshot(victim.parent) == before


def test_manifest_and_report_writer(tmp_path: Path, victim: Path) -> None:
    before = snapshot(victim.parent)
    tree = tmp_path / "out" / ".bakery"
    _plant(tree, "manifest.json", victim)
    write_json(tree / "manifest.json", {"status": "baked"})
    assert (tree / "manifest.json").read_text().strip().startswith("{")
    assert snapshot(victim.parent) == before


def test_link_at_the_target_is_replaced_not_followed(tmp_path: Path, victim: Path) -> None:
    before = snapshot(victim.parent)
    target = tmp_path / "dist" / "x.whl"
    target.parent.mkdir()
    os.symlink(victim, target)
    outputs.replace_bytes(target, b"new")
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert snapshot(victim.parent) == before


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "dist" / "x.whl"
    with pytest.raises(RuntimeError), outputs.replacing(target) as fh:
        fh.write(b"half")
        raise RuntimeError("interrupted")
    assert list((tmp_path / "dist").iterdir()) == []


def test_folder_at_the_target_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.whl").mkdir()
    with pytest.raises(BakeryError, match="is a folder"):
        outputs.replace_bytes(tmp_path / "x.whl", b"")
