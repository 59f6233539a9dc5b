"""What a tree is (issue 26): a local tree or git commit is compared with the pristine
release it claims, and one that differs is named by its own identity; it never takes the
release's port silently, and the three-way merge runs whenever its files differ from the
base, whatever it declares. On a local upstream history of real shapes (the DSA kernel
file of five releases, tests/fixtures/dsa/, with made-up commits between them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from bakery.errors import BakeryError
from bakery.sources import identity
from bakery.sources.cache import Cache
from bakery.sources.pristine import Pristine
from tests.support.dsa import DSA, cache_dsa_releases, dsa_file, dsa_history, dsa_series, dsa_tree
from tests.support.repos import git
from tests.support.trees import cache_release, write_files


@pytest.fixture
def upstream(tmp_path: Path, home: Path) -> dict[str, str]:
    """subject -> commit of the history; the releases cached; launcher/dsa with ports."""
    hist = dsa_history(tmp_path / "up")
    cache_dsa_releases()
    dsa_series(home)
    return {subject: commit for commit, subject in hist}


def _json(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    assert isinstance(data, dict)
    return data


def _statuses(rep: dict[str, Any]) -> list[str]:
    return [h["status"] for d in rep["diffs"] for f in d["files"] for h in f["hunks"]]


def test_a_release_tag_is_the_release_and_takes_its_port(cli, tmp_path, upstream) -> None:
    spec = f"git+file://{tmp_path}/up@{upstream['vLLM 0.31.0']}"
    r = cli("check", "dsa", "--vllm", spec, "--strict", "--json", "r.json")
    assert r.exit_code == 0, r.output
    rep = _json("r.json")
    ident = rep["vllm"]["identity"]
    assert ident["version"] == "0.31.0" and ident["pristine"] is True
    assert ident["describe"].startswith("v0.31.0-0-g")
    assert rep["port"] == "home/patches/dsa/0.31.0"
    assert "not the pristine" not in r.output


def test_a_tree_that_claims_a_release_but_differs_is_named_and_strict_fails(
    cli, tmp_path, upstream
) -> None:
    # Tree A of the issue: 0.31.0 without its `tile = max(_TILE, k_pad)` fix.
    before = dsa_file("0.31.0").replace("tile = max(_TILE, k_pad)", "tile = _TILE")
    tree = write_files(tmp_path / "a", dsa_tree(before, "0.31.0"))
    r = cli("check", "dsa", "--vllm", tree, "--json", "r.json")
    assert r.exit_code == 0, r.output
    rep = _json("r.json")
    ident = rep["vllm"]["identity"]
    assert ident["pristine"] is False and ident["claims"] == "0.31.0"
    assert ident["paths"] == [DSA] and ident["differs"] == 1
    assert ident["compared_with"] == "0.31.0"
    assert re.fullmatch(r"0\.31\.0\+local\.[0-9a-f]{12}", ident["version"])
    assert rep["vllm"]["sha256"] == ident["tree_sha256"]
    # the port is taken, but said: it was proven on the pristine 0.31.0
    assert rep["port"] == "home/patches/dsa/0.31.0"
    assert "not the pristine 0.31.0" in r.output and "--strict fails" in r.output
    strict = cli("check", "dsa", "--vllm", tree, "--strict")
    assert strict.exit_code == 1
    line = "strict: home/patches/dsa/0.31.0: a port of the pristine 0.31.0 taken for"
    assert line in strict.output
    # the manifest of a bake carries the identity too
    baked = cli("apply", "dsa", "--vllm", tree, "--out", "out")
    assert baked.exit_code == 0, baked.output
    manifest = _json("out/.bakery/manifest.json")
    assert manifest["vllm"]["identity"]["version"] == ident["version"]
    assert manifest["vllm"]["sha256"] == ident["tree_sha256"]


def test_the_same_tree_unchanged_is_the_release(cli, tmp_path, upstream) -> None:
    tree = write_files(tmp_path / "a", dsa_tree(dsa_file("0.31.0"), "0.31.0"))
    os.mkfifo(tree / "vllm" / "fifo")  # never opened, never part of the identity
    (tree / "vllm" / "__pycache__").mkdir()
    (tree / "vllm" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    r = cli("check", "dsa", "--vllm", tree, "--strict", "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["pristine"] is True and ident["compared_with"] == "0.31.0", ident
    assert ident["version"] == "0.31.0"


def test_a_commit_after_a_release_is_described_with_its_commit(cli, tmp_path, upstream) -> None:
    commit = upstream["dsa: a note on padding"]
    r = cli("check", "dsa", "--vllm", f"git+file://{tmp_path}/up@{commit}", "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["version"] == f"0.30.0+g{commit[:12]}" and ident["claims"] == "0.30.0"
    assert ident["describe"] == f"v0.30.0-1-g{commit[:7]}" or ident["describe"].startswith(
        "v0.30.0-1-g"
    )
    assert ident["paths"] == [DSA]


def test_the_merge_runs_on_a_tree_that_declares_the_base_but_differs(
    cli, tmp_path, upstream
) -> None:
    # Tree B's shape: it says 0.30.0 (the series' base) and is not 0.30.0.
    git(tmp_path / "up", "checkout", "-q", upstream["dsa: rename _max_with_nan's arguments"])
    content = (tmp_path / "up" / DSA).read_text()
    tree = write_files(tmp_path / "b", dsa_tree(content, "0.30.0"))
    merged = cli("check", "dsa", "--vllm", tree, "--json", "m.json")
    assert merged.exit_code == 0, merged.output
    rep = _json("m.json")
    assert "merged" in _statuses(rep)
    warnings = [w for d in rep["diffs"] for w in d.get("warnings", [])]
    assert any("_max_with_nan" in w for w in warnings), warnings
    # the same tree without the merge: the hunk that the rename touched does not apply
    plain = cli("check", "dsa", "--vllm", tree, "--no-merge", "--json", "p.json")
    assert plain.exit_code == 1
    assert "failed" in _statuses(_json("p.json"))


def test_a_release_that_cannot_be_compared_is_not_called_pristine(
    cli, tmp_path, home: Path
) -> None:
    # 0.31.0 is not cached and the index cannot be reached (conftest): no comparison
    dsa_series(home, ports=False)
    tree = write_files(tmp_path / "a", dsa_tree(dsa_file("0.31.0"), "0.31.0"))
    r = cli("check", "dsa", "--vllm", tree, "--json", "r.json")
    assert "identity 0.31.0+local." in r.output and "could not compare" in r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["pristine"] is False and ident["compared_with"] is None
    assert ident["note"].startswith("could not compare with the release 0.31.0")


def test_a_listing_never_follows_a_link(tmp_path: Path) -> None:
    root = write_files(tmp_path / "t", {"vllm/a.py": "A = 1\n"})
    (tmp_path / "secret").write_text("x")
    (root / "vllm" / "link").symlink_to(tmp_path / "secret")
    listing = identity.worktree_listing(root)
    assert listing["vllm/link"][0] == "120000"
    # the blob ids are git's own
    assert listing["vllm/a.py"][1] == git(root, "hash-object", "vllm/a.py").strip()


def test_a_local_checkout_claims_the_release_it_describes_from(cli, tmp_path, upstream) -> None:
    up = tmp_path / "up"
    git(up, "checkout", "-q", upstream["dsa: a note on padding"])
    r = cli("check", "dsa", "--vllm", up, "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["claims"] == "0.30.0" and ident["describe"].startswith("v0.30.0-1-g")
    assert re.fullmatch(r"0\.30\.0\+local\.[0-9a-f]{12}", ident["version"])
    # the tag itself, checked out: the pristine release
    git(up, "checkout", "-q", "v0.31.0")
    r = cli("check", "dsa", "--vllm", up, "--json", "t.json", "--strict")
    assert r.exit_code == 0, r.output
    assert _json("t.json")["vllm"]["identity"]["version"] == "0.31.0"


# --- what the pristine release is, varied (issue 50) --------------------------------------------


@pytest.mark.parametrize(
    ("added", "pristine"),
    [
        ("vllm/extra.py", False),  # a module the package would import
        ("vllm/model_executor/new/kernel.py", False),  # deeper in the package
        ("tests/test_extra.py", True),  # a checkout's tests never run in the package
        ("docs/extra.md", True),
        ("vllm_extra/x.py", True),  # beside the package, not in it
    ],
)
def test_a_tree_that_adds_a_module_under_vllm_is_not_the_release_and_strict_fails(
    cli, tmp_path, upstream, added: str, pristine: bool
) -> None:
    files = dsa_tree(dsa_file("0.31.0"), "0.31.0")
    tree = write_files(tmp_path / "a", {**files, added: "X = 1\n"})
    r = cli("check", "dsa", "--vllm", tree, "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["pristine"] is pristine, ident
    if not pristine:
        assert ident["paths"] == [added] and ident["differs"] == 1
    strict = cli("check", "dsa", "--vllm", tree, "--strict")
    assert strict.exit_code == (0 if pristine else 1), strict.output


def _listing(files: dict[str, str]) -> identity.Listing:
    return {p: ("100644", identity._blob_id(c.encode())) for p, c in files.items()}


RELEASE = {"vllm/__init__.py": "", "vllm/a.py": "A = 1\n", "setup.py": ""}


@pytest.mark.parametrize(
    ("tree", "differs"),
    [
        (RELEASE, []),
        ({**RELEASE, "vllm/b.py": "B = 1\n"}, ["vllm/b.py"]),
        ({**RELEASE, "vllm/a.py": "A = 2\n"}, ["vllm/a.py"]),
        ({k: v for k, v in RELEASE.items() if k != "vllm/a.py"}, ["vllm/a.py"]),
        ({k: v for k, v in RELEASE.items() if k != "setup.py"}, ["setup.py"]),
        ({**RELEASE, "benchmarks/b.py": "B = 1\n"}, []),
        # written by the sdist build: never asked of a checkout, either way
        ({**RELEASE, "vllm/_version.py": "__version__ = '0.31.0'\n"}, []),
        ({**RELEASE, "PKG-INFO": "Version: 0.31.0\n"}, []),
        ({**RELEASE, "vllm.egg-info/PKG-INFO": "x"}, []),
    ],
)
def test_a_tree_differs_from_the_release_by_its_package_files(
    tree: dict[str, str], differs: list[str]
) -> None:
    release = _listing({**RELEASE, "vllm/_version.py": "__version__ = '0.31.0'\n"})
    assert identity.differences(_listing(tree), release) == differs
    # a test release without _version.py: the same answers
    plain = _listing(RELEASE)
    assert identity.differences(_listing(tree), plain) == differs


def test_a_link_in_place_of_a_release_file_differs() -> None:
    release = _listing(RELEASE)
    tree = dict(release)
    tree["vllm/a.py"] = ("120000", release["vllm/a.py"][1])  # same id, a link
    assert identity.differences(tree, release) == ["vllm/a.py"]


VERSION_PY = "__version__ = version = '0.31.0'\n"


@pytest.mark.parametrize("written", [None, VERSION_PY, "__version__ = '0.31.0.dev0+gabc'\n"])
def test_a_checkout_of_a_release_tag_with_its_version_file_is_the_release(
    cli, tmp_path: Path, home: Path, written: str | None
) -> None:
    """Real sdists carry vllm/_version.py (written by the build); a checkout of the tag has
    none, or the one a local build wrote: either way it is the release, as the sdist is."""
    dsa_history(tmp_path / "up")
    files = dsa_tree(dsa_file("0.31.0"), "0.31.0")
    files.pop("setup.py")
    cache_release("0.31.0", {**files, "vllm/_version.py": VERSION_PY})
    dsa_series(home)
    up = tmp_path / "up"
    git(up, "checkout", "-q", "v0.31.0")
    # upstream's .gitignore names it: git never sees it
    (up / ".git" / "info" / "exclude").write_text("vllm/_version.py\n")
    if written is not None:
        (up / "vllm" / "_version.py").write_text(written)
    for spec in (str(up), f"git+file://{up}@v0.31.0"):
        r = cli("check", "dsa", "--vllm", spec, "--strict", "--json", "r.json")
        assert r.exit_code == 0, r.output
        ident = _json("r.json")["vllm"]["identity"]
        assert ident["pristine"] is True and ident["version"] == "0.31.0", ident
    # the same checkout with a module the release lacks: not the release
    (up / "vllm" / "extra.py").write_text("X = 1\n")
    r = cli("check", "dsa", "--vllm", up, "--strict", "--allow-dirty")
    assert r.exit_code == 1, r.output
    assert "vllm/extra.py" in r.output


def test_a_local_tree_is_listed_as_git_lists_its_commit(tmp_path: Path) -> None:
    """The two listings name files, modes and blobs alike (a tab and a byte that is no
    UTF-8 in a name, an executable, a link): a checkout and its commit have one digest."""
    root = write_files(tmp_path / "t", {"vllm/a.py": "A = 1\n", "vllm/tab\tname.py": "T = 1\n"})
    (root / "vllm" / os.fsdecode(b"caf\xe9.py")).write_text("C = 1\n")
    run = root / "vllm" / "run.py"
    run.write_text("R = 1\n")
    run.chmod(0o755)
    (root / "vllm" / "link").symlink_to("a.py")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    local = identity.worktree_listing(root)
    assert local == identity.committed_listing(root)
    assert local["vllm/run.py"][0] == "100755" and local["vllm/a.py"][0] == "100644"
    assert identity.digest(local) == identity.digest(identity.committed_listing(root))


def test_a_stray_pyc_is_no_module_of_the_tree(cli, tmp_path, upstream) -> None:
    tree = write_files(tmp_path / "a", dsa_tree(dsa_file("0.31.0"), "0.31.0"))
    (tree / "vllm" / "stray.pyc").write_bytes(b"\0")
    (tree / "vllm" / "old.pyo").write_bytes(b"\0")
    r = cli("check", "dsa", "--vllm", tree, "--strict", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert _json("r.json")["vllm"]["identity"]["pristine"] is True


def test_a_release_and_a_tree_without_a_claim_are_named(cli, tmp_path, upstream) -> None:
    r = cli("check", "dsa", "--vllm", "0.31.0", "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert (ident["version"], ident["claims"], ident["pristine"]) == ("0.31.0", "0.31.0", True)
    assert ident["compared_with"] == "0.31.0"
    # no PKG-INFO, no tag: it claims nothing, and is named 0+local.<its digest>
    tree = write_files(tmp_path / "b", dsa_tree(dsa_file("0.31.0")))
    r = cli("check", "dsa", "--vllm", tree, "--json", "n.json")
    ident = _json("n.json")["vllm"]["identity"]
    assert re.fullmatch(r"0\+local\.[0-9a-f]{12}", ident["version"]), ident
    assert ident["pristine"] is False and ident["claims"] is None
    assert ident["note"] == "the tree declares no version (no PKG-INFO, no release tag)"
    # a claim that is no release: said so, nothing compared
    dev = write_files(tmp_path / "c", dsa_tree(dsa_file("0.31.0"), "0.31.0.dev3"))
    r = cli("check", "dsa", "--vllm", dev, "--json", "d.json")
    ident = _json("d.json")["vllm"]["identity"]
    assert ident["note"] == "0.31.0.dev3 is not a release: nothing to compare with", ident


SCM_VERSION_PY = """\
# file generated by setuptools-scm
# don't change, don't track in version control
__all__ = ["__version__", "__version_tuple__", "version", "version_tuple"]
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Tuple, Union

    VERSION_TUPLE = Tuple[Union[int, str], ...]
else:
    VERSION_TUPLE = object
version: str
__version_tuple__: VERSION_TUPLE
__version__ = version = '0.31.0'
__version_tuple__ = version_tuple = (0, 31, 0)
"""


@pytest.mark.parametrize(
    ("text", "pristine"),
    [
        (SCM_VERSION_PY, True),
        ("__version__ = '0.31.0'\n", True),
        ("import os\n__version__ = '0.31.0'\n", False),
        ("__version__ = '0.31.0'\nprint('ran')\n", False),
        ("def f():\n    pass\n__version__ = '0.31.0'\n", False),
        ("__version__ = [x for x in '0.31.0']\n", False),
        ("not python (\n", False),
    ],
)
def test_a_version_file_is_no_release_once_it_runs_code(
    cli, tmp_path, upstream, text: str, pristine: bool
) -> None:
    """vllm/_version.py counts on neither side (the sdist build writes it), so it is taken
    only as data: one that would run code when vLLM imports it makes the tree no release
    (a payload there would otherwise pass as the pristine 0.31.0)."""
    tree = write_files(tmp_path / "a", dsa_tree(dsa_file("0.31.0"), "0.31.0"))
    (tree / "vllm" / "_version.py").write_text(text)
    r = cli("check", "dsa", "--vllm", tree, "--json", "r.json")
    assert r.exit_code == 0, r.output
    ident = _json("r.json")["vllm"]["identity"]
    assert ident["pristine"] is pristine
    if not pristine:
        assert "vllm/_version.py" in ident["paths"]


@pytest.mark.parametrize("size", [9, 10, 11, 64])
def test_a_file_past_the_size_limit_is_listed_as_a_regular_file_named_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """Every entry carries one of git's modes: a file past MAX_TREE_FILE (lowered here) is
    never read, and is listed as a regular file whose id says its size, so that it differs
    from any release's blob; one within the limit is hashed as git hashes it."""
    from bakery.safety import limits

    monkeypatch.setattr(limits, "MAX_TREE_FILE", 10)
    data = b"x" * size
    root = write_files(tmp_path / "t", {"vllm/big.bin": data.decode()})
    got = identity.worktree_listing(root)["vllm/big.bin"]
    if size > 10:
        assert got == ("100644", f"too-large-{size}")
    else:
        assert got == ("100644", git(root, "hash-object", "vllm/big.bin").strip())


def test_a_listing_skips_bytecode_and_lists_every_other_file(tmp_path: Path) -> None:
    names = ["a.py", "b.pyc", "c.py", "d.pyo", "e.py", "f.txt"]
    root = write_files(tmp_path / "t", {f"vllm/{n}": "x = 1\n" for n in names})
    listed = sorted(identity.worktree_listing(root))
    assert listed == ["vllm/a.py", "vllm/c.py", "vllm/e.py", "vllm/f.txt"]


SDIST_ONLY = {
    "PKG-INFO": "Version: 0.31.0\n",
    "vllm.egg-info/PKG-INFO": "x",
    "vllm.egg-info/SOURCES.txt": "vllm/a.py\n",
    "vllm/_version.py": "__version__ = '0.31.0'\n",
}


@pytest.mark.parametrize(
    ("tree", "differs"),
    [
        (RELEASE, []),  # the sdist's own files are never asked of a checkout
        ({**RELEASE, "vllm/x.egg-info/payload.py": "P = 1\n"}, ["vllm/x.egg-info/payload.py"]),
        ({**RELEASE, "vllm/sub/_version.py": "V = 1\n"}, ["vllm/sub/_version.py"]),
        ({**RELEASE, "vllm/PKG-INFO": "x"}, ["vllm/PKG-INFO"]),
    ],
    ids=["checkout", "egg-info-in-the-package", "a-version-file-deeper", "pkg-info-in-the-package"],
)
def test_only_the_sdists_own_files_are_not_asked_of_a_checkout(
    tree: dict[str, str], differs: list[str]
) -> None:
    """PKG-INFO, the top ``*.egg-info`` folder and ``vllm/_version.py``, which the sdist
    build writes; a file of the package that only looks like one of them counts."""
    release = _listing({**RELEASE, **SDIST_ONLY})
    assert identity.differences(_listing(tree), release) == differs


@pytest.mark.parametrize("kind", ["file", "link", "large", "folder"])
def test_a_version_file_is_data_only_as_a_plain_small_file(tmp_path: Path, kind: str) -> None:
    """A link (even to a data file), a folder, or a file past 64 KiB is never taken as the
    build's version file."""
    data = tmp_path / "data.py"
    data.write_text(VERSION_PY)
    path = tmp_path / "_version.py"
    if kind == "file":
        path.write_text(VERSION_PY)
    elif kind == "link":
        path.symlink_to(data)
    elif kind == "large":
        path.write_text(VERSION_PY + "# pad\n" * 11_000)
    else:
        path.mkdir()
    assert identity.version_data_only(path) is (kind == "file")


def test_a_version_file_of_exactly_64_kib_is_data_and_one_byte_more_is_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "_version.py"
    body = VERSION_PY + "#"
    path.write_text(body + "x" * (64 * 1024 - len(body.encode()) - 1) + "\n")
    assert path.stat().st_size == 64 * 1024
    assert identity.version_data_only(path)
    path.write_text(path.read_text() + "\n")
    assert not identity.version_data_only(path)


def test_a_tree_whose_files_cannot_be_read_is_refused_naming_its_source(tmp_path: Path) -> None:
    tree = write_files(tmp_path / "t", {"vllm/__init__.py": ""})
    git(tree, "init", "-q")  # a repository without a commit: HEAD names nothing
    pristine = Pristine(tree, "0.31.0", "git+file:///src/vllm@v0.31.0", None, repo=True)
    with pytest.raises(BakeryError) as e:
        identity.identify(pristine, Cache(tmp_path / "cache"))
    assert e.value.message.startswith(
        "git+file:///src/vllm@v0.31.0: cannot read the tree's files: "
    )
