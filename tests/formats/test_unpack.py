"""unpack.py and gitobjects.py: an archive becomes a tree and its repository in one pass.

git itself is the judge: the commit must be the one ``git add -A`` + ``git commit`` makes of
the same files, ``git fsck --strict`` must find nothing, and ``git diff-files`` (which
compares stat data only, never contents) must find the index true to the files.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bakery.errors import SourceError
from bakery.formats.unpack import unpack
from bakery.git import cmd as gitutil

MTIME = 1_700_000_000


def _tar(
    members: list[tuple[str, bytes | str | None, int]],
    *,
    gz: bool = True,
    top: str = "vllm-1.0.0",
    fmt: int = tarfile.PAX_FORMAT,
) -> bytes:
    """members: (path under top, content or None for a folder or "->target" / "=>target"
    for a symlink / hard link, mode)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, content, mode in members:
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.mtime, info.mode = MTIME, mode
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, str):
                info.type = tarfile.SYMTYPE if content.startswith("->") else tarfile.LNKTYPE
                target = content[2:]
                info.linkname = (
                    target if info.type == tarfile.SYMTYPE or not top else f"{top}/{target}"
                )
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    data = buf.getvalue()
    return gzip.compress(data, mtime=0) if gz else data


def _git(tree: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=tree,
        env=gitutil.clean_env(),
        check=check,
        capture_output=True,
        text=True,
    ).stdout


def _git_add_commit(archive: bytes, dest: Path) -> str:
    """The reference: tarfile extracts, git adds and commits with bakery's identity."""
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    (top,) = list(dest.iterdir())
    return gitutil.init_commit_all(top, "pristine vLLM 1.0.0")


def _check_repo(tree: Path, commit: str) -> None:
    assert _git(tree, "rev-parse", "HEAD").strip() == commit
    fsck = subprocess.run(
        ["git", "fsck", "--strict", "--full", "--no-dangling"],
        cwd=tree,
        env=gitutil.clean_env(),
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0 and not fsck.stdout and not fsck.stderr, fsck
    # diff-files compares stat data only: a false entry would be listed as modified
    assert _git(tree, "diff-files", "--name-only") == ""
    assert _git(tree, "status", "--porcelain", "--untracked-files=all") == ""


BIG = bytes(range(256)) * 700  # 179,200 bytes: several stored deflate blocks
MEMBERS: list[tuple[str, bytes | str | None, int]] = [
    ("vllm", None, 0o755),
    ("vllm/__init__.py", b"", 0o644),
    (
        "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py",
        b"def f():\n    pass\n",
        0o644,
    ),
    ("setup.py", b"#!/usr/bin/env python\n", 0o755),
    ("big.bin", BIG, 0o644),
    ("a b/\u00e9t\u00e9 [1].txt", b"unicode and spaces\n", 0o644),
    ("docs/" + "x" * 150 + "/long.md", b"a long path (pax)\n", 0o664),
    ("vllm/link.py", "->__init__.py", 0o777),
    ("vllm/up", "->../docs", 0o777),
    ("hard.py", "=>setup.py", 0o755),
    ("empty-folder", None, 0o755),
    ("vllm-sorting", b"sorts after vllm/ in a tree, before it in the index\n", 0o644),
    ("vllm.py", b"a name that sorts between vllm and vllm/\n", 0o644),
]


@pytest.mark.parametrize("gz", [True, False], ids=["tar.gz", "tar"])
def test_same_commit_as_git_add(tmp_path: Path, gz: bool) -> None:
    archive = _tar(MEMBERS, gz=gz)
    dest = tmp_path / "tree"
    dest.mkdir()
    commit = unpack(archive, dest, name="vllm-1.0.0.tar.gz", message="pristine vLLM 1.0.0\n")
    assert commit == _git_add_commit(archive, tmp_path / "ref")
    _check_repo(dest, commit)
    assert (dest / "big.bin").read_bytes() == BIG
    assert os.readlink(dest / "vllm" / "link.py") == "__init__.py"
    assert (dest / "hard.py").read_bytes() == b"#!/usr/bin/env python\n"
    assert not (dest / "hard.py").samefile(dest / "setup.py")  # a copy, not a link
    assert stat.S_IMODE((dest / "setup.py").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "docs" / ("x" * 150) / "long.md").stat().st_mode) == 0o644
    assert (dest / "empty-folder").is_dir()
    assert (dest / "setup.py").stat().st_mtime == MTIME  # the archive's times
    packs = list((dest / ".git" / "objects" / "pack").glob("*.pack"))
    assert len(packs) == 1 and not list((dest / ".git" / "objects").glob("??/*"))
    verify = subprocess.run(
        ["git", "verify-pack", "-v", str(packs[0])],
        cwd=dest,
        env=gitutil.clean_env(),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    assert "chain length" not in verify.stdout  # no deltas: every object stands alone


def test_multi_member_gzip_and_padding(tmp_path: Path) -> None:
    plain = _tar(MEMBERS[:4], gz=False)
    half = len(plain) // 2
    archive = (
        gzip.compress(plain[:half], mtime=0) + gzip.compress(plain[half:], mtime=0) + bytes(1024)
    )
    dest = tmp_path / "tree"
    dest.mkdir()
    commit = unpack(archive, dest, name="x.tar.gz", message="pristine vLLM 1.0.0\n")
    assert commit == _git_add_commit(_tar(MEMBERS[:4]), tmp_path / "ref")


def test_git_archive_without_top_folder(tmp_path: Path) -> None:
    archive = _tar([("setup.py", b"x\n", 0o644), ("vllm/a.py", b"a\n", 0o644)], gz=False, top="")
    dest = tmp_path / "tree"
    dest.mkdir()
    commit = unpack(archive, dest, name="git archive", message="m\n", strip_top=False)
    _check_repo(dest, commit)
    assert sorted(_git(dest, "ls-files").split()) == ["setup.py", "vllm/a.py"]


REFUSED: dict[str, list[tuple[str, bytes | str | None, int]]] = {
    "link chain out": [
        ("vllm/b", "->../x/y", 0o777),
        ("x/y", "->../..", 0o777),
        ("vllm/a", "->b/..", 0o777),
    ],
    "link to link out": [("a", "->b", 0o777), ("b", "->../..", 0o777)],
    "link loop": [("a", "->b", 0o777), ("b", "->a", 0o777)],
    "absolute link": [("a", "->/etc/passwd", 0o777)],
    "file under a link": [
        ("d", "->vllm", 0o777),
        ("vllm/x.py", b"1", 0o644),
        ("d/y.py", b"2", 0o644),
    ],
    "hard link to a later file": [("h", "=>later.py", 0o644), ("later.py", b"1", 0o644)],
    "hard link to a link": [("l", "->setup.py", 0o777), ("h", "=>l", 0o644)],
    "file then folder": [("x", b"1", 0o644), ("x/y", b"2", 0o644)],
    "folder then file": [("x", None, 0o755), ("x", b"1", 0o644)],
    "dot git": [(".git/config", b"[core]\n", 0o644)],
    "dot git, other case": [("vllm/.GIT/hooks/post-checkout", b"#!/bin/sh\n", 0o755)],
    "dotdot": [("vllm/../../x", b"1", 0o644)],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_members(tmp_path: Path, name: str) -> None:
    archive = _tar([("setup.py", b"x\n", 0o644), *REFUSED[name]])
    dest = tmp_path / "tree"
    dest.mkdir()
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SourceError) as e:
        unpack(archive, dest, name="vllm-1.0.0.tar.gz", message="m\n")
    assert str(e.value).startswith("vllm-1.0.0.tar.gz: member ")
    assert "\n" not in str(e.value)
    after = [p for p in tmp_path.rglob("*") if dest not in p.parents]
    assert sorted(after) == before  # nothing written outside the tree


@pytest.mark.parametrize("damage", ["cut", "cut in a header", "not gzip", "not a tar"])
def test_damaged_archives(tmp_path: Path, damage: str) -> None:
    good = _tar(MEMBERS)
    plain = _tar(MEMBERS, gz=False)
    archive = {
        "cut": good[: len(good) // 2],
        "cut in a header": gzip.compress(plain[: 512 * 3 + 100]),
        "not gzip": b"\x1f\x8b" + b"nonsense" * 100,
        "not a tar": gzip.compress(b"certainly not a tar " * 100),
    }[damage]
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(SourceError, match=r"^x\.tar\.gz: "):
        unpack(archive, dest, name="x.tar.gz", message="m\n")


def test_later_member_of_the_same_name_wins(tmp_path: Path) -> None:
    archive = _tar([("a.py", b"first\n", 0o644), ("a.py", b"second\n", 0o755)])
    dest = tmp_path / "tree"
    dest.mkdir()
    commit = unpack(archive, dest, name="x", message="pristine vLLM 1.0.0\n")
    assert (dest / "a.py").read_bytes() == b"second\n"
    assert commit == _git_add_commit(archive, tmp_path / "ref")
    _check_repo(dest, commit)


_names = st.text(alphabet="abcXYZ_.-é ", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..") and s.lower() != ".git"
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(
        st.lists(_names, min_size=1, max_size=3).map("/".join),
        st.tuples(st.binary(max_size=300), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_any_tree_commits_as_git_add_does(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, tuple[bytes, bool]]
) -> None:
    # drop paths that are a folder of another path: a tar could not hold both
    names = sorted(files)
    keep = [n for n in names if not any(o.startswith(n + "/") for o in names)]
    members: list[tuple[str, bytes | str | None, int]] = [
        (n, files[n][0], 0o755 if files[n][1] else 0o644) for n in keep
    ]
    archive = _tar(members)
    base = tmp_path_factory.mktemp("prop")
    dest = base / "tree"
    dest.mkdir()
    commit = unpack(archive, dest, name="x", message="pristine vLLM 1.0.0\n")
    assert commit == _git_add_commit(archive, base / "ref")
    _check_repo(dest, commit)


# --- tarstream: the same members as tarfile reads ------------------------------------------------


def _tarfile_members(archive: bytes) -> list[tuple[str, str, int, int, str, bytes]]:
    kinds = {
        tarfile.REGTYPE: "file",
        tarfile.AREGTYPE: "file",
        tarfile.DIRTYPE: "dir",
        tarfile.SYMTYPE: "symlink",
        tarfile.LNKTYPE: "hardlink",
    }
    out = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isreg() else None
            out.append(
                (
                    m.name,
                    kinds.get(m.type, "other"),
                    m.mode,
                    int(m.mtime),
                    m.linkname,
                    f.read() if f else b"",
                )
            )
    return out


def _ours(archive: bytes) -> list[tuple[str, str, int, int, str, bytes]]:
    from bakery.formats import tarstream

    stream = io.BytesIO(archive)
    return [
        (m.name, m.kind, m.mode, m.mtime, m.linkname, m.data)
        for m in tarstream.members(stream.read)
    ]


@pytest.mark.parametrize(
    "fmt",
    [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT],
    ids=["pax", "gnu", "ustar"],
)
def test_tarstream_reads_what_tarfile_reads(fmt: int) -> None:
    members = [m for m in MEMBERS if len(m[0]) < 100 or fmt != tarfile.USTAR_FORMAT]
    members.append(("vllm/f\u00fcr.py", b"non-ascii\n", 0o600))
    members.append(("p/" + "q" * 60 + "/" + "r" * 60 + ".py", b"ustar's prefix\n", 0o644))
    if fmt != tarfile.USTAR_FORMAT:  # names ustar cannot hold
        members += [
            ("d/" + "y" * 120 + ".py", b"long name, no long folder\n", 0o644),
            ("vllm/long-link", "->" + "z" * 120, 0o777),
        ]
    archive = _tar(members, gz=False, fmt=fmt)
    assert _ours(archive) == _tarfile_members(archive)
    assert len(_ours(archive)) == len(members)


@settings(max_examples=40, deadline=None)
@given(
    files=st.lists(
        st.tuples(
            st.lists(_names, min_size=1, max_size=6).map("/".join),
            st.binary(max_size=1500),
            st.integers(0, 0o777),
            st.integers(0, 2**33),
        ),
        max_size=8,
    ),
    fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]),
)
def test_tarstream_agrees_with_tarfile(files: list[tuple[str, bytes, int, int]], fmt: int) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data, mode, mtime in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, mtime
            tar.addfile(info, io.BytesIO(data))
    assert _ours(buf.getvalue()) == _tarfile_members(buf.getvalue())


def test_tarstream_refuses_a_bad_checksum() -> None:
    from bakery.formats import tarstream

    archive = bytearray(_tar(MEMBERS[:3], gz=False))
    archive[0] ^= 1  # the first header's name, under its checksum
    with pytest.raises(tarstream.TarError, match="checksum"):
        list(tarstream.members(io.BytesIO(bytes(archive)).read))
