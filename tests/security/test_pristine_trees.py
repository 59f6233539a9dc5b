"""Round 4, High 3: a cached pristine tree is used only as this machine extracted it.

``CACHE/trees/vllm-X/`` is data. Its ``.git`` and its marker are in the attacker's reach
too: a payload committed in the entry's own repository, with the marker's commit updated,
passes ``git status`` and the HEAD check. The marker therefore holds a file list made at
extraction from the sdist whose sha256 the index stated (every file's sha256, the
objects, the index's entries), sealed under the user's key outside the cache; the tree is
hashed against it before use. Each case plants a payload that would leave a marker file
if it ran: the entry is extracted again, the payload is never baked, nothing ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery.safety import seal
from bakery.sources import cache as caches
from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import Index
from tests.support.releases import BASE, series
from tests.support.repos import git
from tests.support.trees import write_files

Cli = Callable[..., Result]
K = "VALUE = 1\n"
TEST = """\
from bakery.testing import load_tree_module


def test_k():
    assert load_tree_module("vllm.k").VALUE == 1
"""


@pytest.fixture
def project(index: Index, home: Path, tmp_path: Path) -> Iterator[Path]:
    """Series s over release 1.0.0 of the test index, baked once (the cache holds its
    pristine tree); yields the marker a payload would leave."""
    index.add(
        "vllm-1.0.0.tar.gz", sdist("1.0.0", files=2, modules={"vllm/k.py": K, "vllm/mod.py": BASE})
    )
    folder = series(home, BASE, BASE.replace("line3\n", "line three\n"))
    write_files(folder, {"tests/test_k.py": TEST})
    yield tmp_path / "PWNED"


def _entry() -> Path:
    return caches.Cache().root / "trees" / "vllm-1.0.0"


def _apply(cli: Cli, out: Path) -> Result:
    r = cli("apply", "s", "--out", out)
    assert r.exit_code == 0, r.output
    return r


def _forge(entry: Path, payload: str, *, keep_seal: bool = True) -> None:
    """What an attacker with write access to the cache does: the payload committed in
    the entry's own .git, and the marker rewritten to match (its commit, and a file list
    made with bakery's own function); the seal cannot be made without the key."""
    (entry / "vllm" / "k.py").write_text(payload)
    git(entry, "add", "-A")
    git(entry, "commit", "-q", "-m", "pristine vLLM 1.0.0")
    marker = entry.with_name(entry.name + ".json")
    data = json.loads(marker.read_text())
    data["commit"] = git(entry, "rev-parse", "HEAD").strip()
    data["files"] = caches.file_list(entry)
    if not keep_seal:
        data.pop("seal")
    marker.write_text(json.dumps(data))


def _payload(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()\nVALUE = 1\n"


def test_a_payload_committed_in_the_entry_with_its_marker_updated_is_not_baked(
    cli: Cli, project: Path, tmp_path: Path
) -> None:
    """The end-to-end scenario of the finding, through apply."""
    _apply(cli, tmp_path / "one")
    _forge(_entry(), _payload(project))
    r = _apply(cli, tmp_path / "two")
    assert "built again" in r.stderr, r.output
    assert (tmp_path / "two" / "vllm" / "k.py").read_text() == K
    assert (_entry() / "vllm" / "k.py").read_text() == K  # extracted again
    assert not project.exists()


def test_verify_pristine_never_runs_a_forged_pristine_tree(
    cli: Cli, project: Path, tmp_path: Path
) -> None:
    """The end-to-end scenario of the finding, through verify --pristine."""
    out = tmp_path / "out"
    _apply(cli, out)
    _forge(_entry(), _payload(project), keep_seal=False)
    r = cli("verify", "s", "--tree", out, "--interpret", "--pristine", "--jobs", "1")
    # the forged entry is removed, so there is no pristine tree to run: one line
    refused(r, "no pristine tree of vLLM 1.0.0")
    assert not project.exists()
    assert not _entry().exists()
    _apply(cli, tmp_path / "again")  # extracted again from the index's sdist
    r = cli("verify", "s", "--tree", out, "--interpret", "--pristine", "--jobs", "1")
    assert "1 pass on both" in r.output, r.output  # the pristine tree ran, as extracted
    assert not project.exists()


def test_an_untouched_entry_is_used_as_it_is(cli: Cli, project: Path, tmp_path: Path) -> None:
    """The promise kept: this machine's own extraction is taken, with no note."""
    _apply(cli, tmp_path / "one")
    marker = _entry().with_name("vllm-1.0.0.json")
    before = json.loads(marker.read_text())
    r = _apply(cli, tmp_path / "two")
    assert "built again" not in r.stderr, r.output
    assert json.loads(marker.read_text()) == before


def test_a_file_changed_without_a_commit_is_caught_by_the_list(
    cli: Cli, project: Path, tmp_path: Path
) -> None:
    """Same size and mtime: git's stat data would not notice; the sha256 does."""
    _apply(cli, tmp_path / "one")
    k = _entry() / "vllm" / "k.py"
    st = k.stat()
    k.write_text("VALUE = 2\n")
    import os

    os.utime(k, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = _apply(cli, tmp_path / "two")
    assert "built again" in r.stderr
    assert (tmp_path / "two" / "vllm" / "k.py").read_text() == K


@pytest.mark.parametrize(
    "plant",
    [
        "vllm/__pycache__/k.cpython-311.pyc",  # a byte-code file the loader would take
        "vllm/extra.py",  # a module the release does not have
        ".git/objects/ab/cdef0123456789abcdef0123456789abcdef01",  # a foreign object
    ],
)
def test_a_planted_file_anywhere_is_caught_by_the_list(
    cli: Cli, project: Path, tmp_path: Path, plant: str
) -> None:
    _apply(cli, tmp_path / "one")
    write_files(_entry(), {plant: "payload\n"})
    r = _apply(cli, tmp_path / "two")
    assert "built again" in r.stderr, r.output
    assert not (_entry() / plant).exists()


def test_an_entry_sealed_on_another_machine_is_extracted_again(
    cli: Cli, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI cache restored from another job: the tree may be perfect, its seal is not
    this machine's; it is extracted again and said once."""
    here = seal.config_dir()
    monkeypatch.setenv(seal.ENV, str(tmp_path / "other-machine"))
    _apply(cli, tmp_path / "one")
    monkeypatch.setenv(seal.ENV, str(here))
    r = _apply(cli, tmp_path / "two")
    notes = [ln for ln in r.stderr.splitlines() if "seal" in ln]
    assert len(notes) == 1, r.stderr
    again = _apply(cli, tmp_path / "three")
    assert "built again" not in again.stderr


def test_objects_linked_to_another_store_are_caught_by_the_list(
    cli: Cli, project: Path, tmp_path: Path
) -> None:
    """Issue 50: a cached repository whose ``objects/`` is a link to another store (here a
    copy holding the same objects, and one more) does not pass as intact."""
    import shutil

    _apply(cli, tmp_path / "one")
    objects = _entry() / ".git" / "objects"
    store = tmp_path / "store"
    shutil.copytree(objects, store)
    write_files(store, {"ab/cdef0123456789abcdef0123456789abcdef01": "payload\n"})
    shutil.rmtree(objects)
    objects.symlink_to(store, target_is_directory=True)
    before = sorted(p.name for p in store.rglob("*"))
    r = _apply(cli, tmp_path / "two")
    assert "built again" in r.stderr, r.output
    assert not objects.is_symlink()
    assert sorted(p.name for p in store.rglob("*")) == before  # the store left alone
