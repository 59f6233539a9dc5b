"""Class 2: paths taken from data.

Manifest file lists and versions, series.toml's name and base, a tree's PKG-INFO
Version, the entries of a local checkout's git index, a .git that is a dangling link:
each is checked (relative, normalised, inside its folder) by bakery.safety.paths, or the
run is refused with one line and exit 2. Every case also checks that nothing was read
from or written to the place the data pointed at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.git.index import IndexEntry, write_index
from bakery.safety import paths
from tests.support.cli import refused
from tests.support.repos import git, git_repo
from tests.support.series import make_series, udiff
from tests.support.trees import Tiny

Cli = Callable[..., Result]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "../x",
        "a/../../x",
        "a//b",
        "./a",
        "a/.",
        "a\\b",
        ".git/config",
        "a/.GIT/hooks/x",
        "a\nb",
        "a\x1bb",
    ],
)
def test_validator_refuses(bad: str) -> None:
    with pytest.raises(paths.UnsafeDataError):
        paths.rel_path(bad, "test")


@pytest.mark.parametrize("good", ["a", "vllm/x.py", "a/b.c/d-e_f", "é/ü.py"])
def test_validator_accepts(good: str) -> None:
    assert paths.rel_path(good, "test") == good


def test_inside_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(paths.UnsafeDataError, match="symlink"):
        paths.inside(tmp_path, "link/passwd", "test")
    assert paths.inside(tmp_path, "real/x", "test") == tmp_path / "real/x"


def _baked(cli: Cli, tiny: Tiny, out: Path) -> dict:
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    return json.loads((out / ".bakery/manifest.json").read_text())


def _rewrite(out: Path, manifest: dict) -> None:
    (out / ".bakery/manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("secret_kind", ["absolute", "tilde", "dotdot"])
def test_manifest_file_list_cannot_pull_files_into_a_port(
    cli: Cli, tiny: Tiny, tmp_path: Path, home: Path, secret_kind: str
) -> None:
    out = tmp_path / "out"
    m = _baked(cli, tiny, out)
    secret = tmp_path / "userhome" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("PRIVATE KEY\n")
    path = {
        "absolute": str(secret),
        "tilde": "~/.ssh/id_rsa",
        "dotdot": os.path.relpath(secret, out),
    }[secret_kind]
    m["diffs"][0]["files"].append({"path": path, "status": "applied", "hunks": []})
    _rewrite(out, m)
    r = cli("refresh", "demo", "--tree", out, "--release", "1.0")
    refused(r, "manifest")
    assert not (home / "patches").exists() or "PRIVATE" not in "".join(
        p.read_text() for p in (home / "patches").rglob("*.diff")
    )


@pytest.mark.parametrize(
    "field,value",
    [
        ("version", "../../../escaped"),
        ("version", "/tmp/escaped"),
        ("pristine_commit", "--output=/tmp/bakery-escaped"),
        ("head", "HEAD; touch x"),
        ("port", "/etc"),
        ("port", "../../etc"),
    ],
)
def test_manifest_fields_are_checked(
    cli: Cli, tiny: Tiny, tmp_path: Path, home: Path, field: str, value: str
) -> None:
    out = tmp_path / "out"
    m = _baked(cli, tiny, out)
    if field == "version":
        m["vllm"]["version"] = value
    else:
        m[field] = value
    _rewrite(out, m)
    r = cli("refresh", "demo", "--tree", out)
    refused(r)
    assert not Path("/tmp/bakery-escaped").exists()
    assert not (tmp_path / "escaped").exists() and not (home.parent / "escaped").exists()


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "x\ny"])
def test_series_toml_name_is_a_plain_name(cli: Cli, home: Path, tmp_path: Path, name: str) -> None:
    make_series(
        home, "s", {"01-a.diff": udiff("x.py", "a\n", "b\n")}, toml=f"name = {json.dumps(name)}\n"
    )
    r = cli("check", "s", "--vllm", tmp_path)
    refused(r, "name")


@pytest.mark.parametrize("base", ["/etc", "git+ext::sh -c true", "../tree", "git+file:///x@main"])
def test_series_toml_base_is_a_release(cli: Cli, home: Path, base: str) -> None:
    make_series(
        home, "s", {"01-a.diff": udiff("x.py", "a\n", "b\n")}, toml=f"base = {json.dumps(base)}\n"
    )
    r = cli("check", "s")
    refused(r, "base")


def test_pkg_info_version_cannot_place_the_tree(
    cli: Cli, tiny: Tiny, tmp_path: Path, home: Path
) -> None:
    (tiny.src / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: ../../../pwned\n"
    )
    r = cli("apply", "demo", "--vllm", tiny.src)  # no --out: build/<series>-<version>
    refused(r, "Version")
    assert not (tmp_path / "pwned").exists() and not (home.parent.parent / "pwned").exists()


def test_checkout_index_entry_outside_the_tree(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    git_repo(tiny.src, {})
    secret = tiny.src.parent / "secret.txt"
    secret.write_text("secret\n")
    oid = bytes.fromhex(git(tiny.src, "hash-object", "-w", str(secret)).strip())
    listed = git(tiny.src, "ls-files", "-s").splitlines()
    entries = [
        IndexEntry(
            line.split("\t", 1)[1].encode(),
            int(line.split()[0], 8),
            bytes.fromhex(line.split()[1]),
            os.lstat(tiny.src / line.split("\t", 1)[1]),
        )
        for line in listed
    ]
    entries.append(IndexEntry(b"../secret.txt", 0o100644, oid, os.lstat(secret)))
    write_index(tiny.src / ".git" / "index", entries)
    out = tmp_path / "o" / "out"
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out, "--allow-dirty")
    refused(r, "git index entry")
    assert not (tmp_path / "o" / "secret.txt").exists()
    assert not out.exists()


def test_dangling_dot_git_link(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "repo"
    os.symlink(target, tiny.src / ".git")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    refused(r, "symlink to nothing")
    assert not target.exists() and not (tmp_path / "elsewhere").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value", [("version", "../../../escaped"), ("commit", "--all")])
def test_cache_marker_fields_are_checked(
    cli: Cli, tiny: Tiny, tmp_path: Path, field: str, value: str
) -> None:
    """A restored cache's marker is data: a version that would place the baked tree
    elsewhere, or a commit that is an option, makes the entry be built again."""
    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    assert cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one").exit_code == 0
    (marker,) = (tmp_path / "cache" / "trees").glob("*.json")
    meta = json.loads(marker.read_text())
    meta[field] = value
    marker.write_text(json.dumps(meta))
    r = cli("apply", "demo", "--vllm", spec)  # no --out: placed by the version
    assert r.exit_code == 0, r.output
    assert "built again" in r.stderr
    assert not list(tmp_path.rglob("escaped"))
    assert json.loads(marker.read_text())[field] != value
