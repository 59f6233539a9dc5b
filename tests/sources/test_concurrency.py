"""Releases from a package index: several bakes at once sharing one cache, a damaged cache,
and malicious source distributions.

A tiny HTTP server on 127.0.0.1 plays the package index (tests/support/index.py) and serves
synthetic sdists, so nothing reaches the network. It counts downloads: the cache must fetch
each sdist once however many bakes want it at the same time (lock, then look again).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.sources.cache import FORMAT
from tests.support.archives import sdist
from tests.support.index import Index
from tests.support.repos import git as _git
from tests.support.series import X_PY, index_series


def assert_baked(out: Path, version: str) -> str:
    manifest = json.loads((out / ".bakery" / "manifest.json").read_text())
    assert manifest["head"] == _git(out, "rev-parse", "HEAD").strip()
    assert _git(out, "status", "--porcelain", "--untracked-files=all") == ""
    _git(out, "fsck", "--no-progress")
    assert (out / "vllm" / "x.py").read_text() == X_PY.replace("b\n", "B\n", 1)
    assert (out / "vllm" / "__init__.py").read_text() == f'__version__ = "{version}"\n'
    return str(manifest["head"])


def bake_cli(series: Path, version: str, out: Path) -> Result:
    from bakery.cli.app import app

    return CliRunner().invoke(
        app,
        ["apply", str(series), "--vllm", version, "--out", str(out)],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )


def cache_debris(cache: Path) -> list[str]:
    """Half-built entries and partial downloads left in the cache."""
    found = []
    for sub in ("trees", "sdists"):
        d = cache / sub
        if d.is_dir():
            found += [
                f"{sub}/{p.name}"
                for p in d.iterdir()
                if p.name.startswith(".") or p.name.endswith((".part", ".tmp"))
            ]
    return found


# --- several bakes at once -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_concurrent_bakes_share_the_cache(index: Index, tmp_path: Path) -> None:
    """Six processes at once, three per release, one cache: each sdist is downloaded and
    extracted once, every bake is complete, and bakes of one release are identical."""
    index.add("vllm-9.9.0.tar.gz", sdist("9.9.0", files=300))
    index.add("vllm-9.8.0.tar.gz", sdist("9.8.0", files=300))
    series = index_series(tmp_path)
    cache = Path(os.environ["BAKERY_CACHE_DIR"])
    versions = ["9.9.0", "9.8.0"] * 3

    def wave(tag: str) -> dict[str, set[str]]:
        procs = [
            (
                v,
                tmp_path / f"out-{tag}-{i}",
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bakery",
                        "apply",
                        str(series),
                        "--vllm",
                        v,
                        "--out",
                        str(tmp_path / f"out-{tag}-{i}"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
            for i, v in enumerate(versions)
        ]
        heads: dict[str, set[str]] = {}
        for v, out, proc in procs:
            _, err = proc.communicate(timeout=150)
            assert proc.returncode == 0, err
            assert "Traceback" not in err
            heads.setdefault(v, set()).add(assert_baked(out, v))
        return heads

    first = wave("a")
    assert {v: len(h) for v, h in first.items()} == {"9.9.0": 1, "9.8.0": 1}
    assert index.downloads == Counter({"vllm-9.9.0.tar.gz": 1, "vllm-9.8.0.tar.gz": 1})
    trees = sorted(p.name for p in (cache / "trees").iterdir())
    assert trees == ["vllm-9.8.0", "vllm-9.8.0.json", "vllm-9.9.0", "vllm-9.9.0.json"]
    second = wave("b")  # all from the cache now
    assert second == first
    assert sum(index.downloads.values()) == 2
    assert cache_debris(cache) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_concurrent_bakes_to_one_out(index: Index, tmp_path: Path) -> None:
    """Four bakes racing for the same --out: each exits 0 or refuses cleanly (2), and the
    folder holds one complete bake at the end, with nothing left beside it."""
    index.add("vllm-9.9.0.tar.gz", sdist("9.9.0", files=200))
    series = index_series(tmp_path)
    assert bake_cli(series, "9.9.0", tmp_path / "warm").exit_code == 0  # fill the cache
    out = tmp_path / "out"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bakery",
                "apply",
                str(series),
                "--vllm",
                "9.9.0",
                "--out",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    codes = []
    for proc in procs:
        _, err = proc.communicate(timeout=100)
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 2), err
        if proc.returncode == 2:
            assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1, err
        codes.append(proc.returncode)
    assert 0 in codes
    assert_baked(out, "9.9.0")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


# --- a damaged cache ---------------------------------------------------------------------------


@pytest.fixture
def baked_once(index: Index, tmp_path: Path) -> tuple[Path, Path, str]:
    """The cache after one bake of 9.9.0: (cache, series, the bake's HEAD)."""
    index.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
    series = index_series(tmp_path)
    out = tmp_path / "first"
    result = bake_cli(series, "9.9.0", out)
    assert result.exit_code == 0, result.stderr
    return Path(os.environ["BAKERY_CACHE_DIR"]), series, assert_baked(out, "9.9.0")


def _drop_tree(cache: Path) -> None:
    (cache / "trees" / "vllm-9.9.0.json").unlink()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "other-file"])
def test_damaged_cached_sdist_is_downloaded_again(
    baked_once: tuple[Path, Path, str], index: Index, tmp_path: Path, damage: str
) -> None:
    cache, series, head = baked_once
    _drop_tree(cache)  # so that the sdist is read again
    sd = cache / "sdists" / "vllm-9.9.0.tar.gz"
    data = sd.read_bytes()
    sd.write_bytes(
        {
            "truncated": data[: len(data) // 2],
            "flipped": data[:100] + bytes([data[100] ^ 0xFF]) + data[101:],
            "empty": b"",
            "other-file": sdist("6.6.6"),
        }[damage]
    )
    result = bake_cli(series, "9.9.0", tmp_path / "again")
    assert result.exit_code == 0, result.stderr
    assert index.downloads["vllm-9.9.0.tar.gz"] == 2
    assert sd.read_bytes() == data
    assert assert_baked(tmp_path / "again", "9.9.0") == head
    assert cache_debris(cache) == []


def _edit_file(tree: Path) -> None:
    (tree / "vllm" / "x.py").write_text("tampered\n")


def _same_size_same_mtime(tree: Path) -> None:
    # git compares whole seconds of ctime: a change in the second the entry was made is
    # invisible to `git status` (a limit of stat-based checks, as in git itself).
    time.sleep(1.1)
    p = tree / "vllm" / "x.py"
    st = p.stat()
    p.write_text(X_PY.replace("a", "z", 1))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def _new_file(tree: Path) -> None:
    (tree / "vllm" / "planted.py").write_text("import os\n")


def _deleted_file(tree: Path) -> None:
    (tree / "vllm" / "pkg" / "m000.py").unlink()


def _moved_head(tree: Path) -> None:
    (tree / "vllm" / "x.py").write_text("tampered\n")
    _git(tree, "commit", "-qam", "tamper")


def _broken_marker(tree: Path) -> None:
    tree.with_name(tree.name + ".json").write_text("{not json")


def _half_built(tree: Path) -> None:
    tree.with_name(tree.name + ".json").unlink()  # as if killed before the marker was written
    (tree / "vllm" / "x.py").unlink()


def _older_format(tree: Path) -> None:
    marker = tree.with_name(tree.name + ".json")
    meta = json.loads(marker.read_text())
    del meta["format"]  # as bakery before the one-pass unpack wrote it
    marker.write_text(json.dumps(meta))


def _no_git(tree: Path) -> None:
    import shutil

    shutil.rmtree(tree / ".git")


@pytest.mark.parametrize(
    "damage",
    [
        _edit_file,
        _same_size_same_mtime,
        _new_file,
        _deleted_file,
        _moved_head,
        _broken_marker,
        _half_built,
        _no_git,
        _older_format,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_damaged_cached_tree_is_rebuilt(
    baked_once: tuple[Path, Path, str], index: Index, tmp_path: Path, damage: object
) -> None:
    cache, series, head = baked_once
    damage(cache / "trees" / "vllm-9.9.0")  # type: ignore[operator]
    result = bake_cli(series, "9.9.0", tmp_path / "again")
    assert result.exit_code == 0, result.stderr
    assert assert_baked(tmp_path / "again", "9.9.0") == head  # the very same bake
    if damage in (_edit_file, _same_size_same_mtime, _new_file, _deleted_file):
        # found by the look for changed files that ran while the tree was copied: the
        # copy was thrown away and the bake done again from a new entry
        assert "had changed files; it is extracted again" in result.stderr
    assert index.downloads["vllm-9.9.0.tar.gz"] == 1  # the sdist was still good
    assert not (tmp_path / "again" / "vllm" / "planted.py").exists()
    assert cache_debris(cache) == []
    meta = json.loads((cache / "trees" / "vllm-9.9.0.json").read_text())
    assert meta["format"] == FORMAT  # rebuilt where it was damaged or of an older format


def test_a_restored_cache_is_made_fast_again(
    baked_once: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """A cache copied or restored (a CI cache) has new inodes and ctimes: the first bake
    from it has git read every file to find it unchanged, and writes the index back, so
    the next bake's look is quick again (the index's stat data are the files')."""
    import shutil

    cache, series, head = baked_once
    tree = cache / "trees" / "vllm-9.9.0"
    moved = tmp_path / "restored"
    shutil.copytree(cache, moved, symlinks=True)
    shutil.rmtree(cache)
    os.rename(moved, cache)

    def stale(root: Path) -> list[str]:
        listing = _git(root, "ls-files", "--debug")
        stale, name = [], ""
        for line in listing.splitlines():
            if not line.startswith(" "):
                name = line
            elif line.strip().startswith("dev:"):
                ino = int(line.split("ino:")[1].split()[0])
                if ino != (root / name).lstat().st_ino & 0xFFFFFFFF:
                    stale.append(name)
        return stale

    assert stale(tree)  # the copy's files are not the ones the index recorded
    result = bake_cli(series, "9.9.0", tmp_path / "again")
    assert result.exit_code == 0, result.stderr
    assert "extracted again" not in result.stderr  # unchanged, so not rebuilt
    assert assert_baked(tmp_path / "again", "9.9.0") == head
    assert stale(tree) == []


# --- what the index serves ------------------------------------------------------------------------


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", size: int = 0, mode: int = 0o644
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = kind, linkname, size, mode
    return info


MALICIOUS: dict[str, tuple[list[tarfile.TarInfo], dict[str, bytes]]] = {
    "dotdot-member": (
        [_info("vllm-6.6.6/../../escaped.py", size=3)],
        {"vllm-6.6.6/../../escaped.py": b"x=1"},
    ),
    "absolute-member": (
        [_info("/tmp/bakery-sdist-escaped.py", size=3)],
        {"/tmp/bakery-sdist-escaped.py": b"x=1"},
    ),
    "symlink-out-absolute": (
        [_info("vllm-6.6.6/vllm/passwd.py", tarfile.SYMTYPE, "/etc/passwd")],
        {},
    ),
    "symlink-out-relative": ([_info("vllm-6.6.6/vllm/up", tarfile.SYMTYPE, "../../..")], {}),
    "symlink-then-write-through": (
        [
            _info("vllm-6.6.6/vllm/out", tarfile.SYMTYPE, "../../.."),
            _info("vllm-6.6.6/vllm/out/escaped.py", size=3),
        ],
        {"vllm-6.6.6/vllm/out/escaped.py": b"x=1"},
    ),
    "hardlink-out": ([_info("vllm-6.6.6/vllm/shadow", tarfile.LNKTYPE, "/etc/passwd")], {}),
    "char-device": ([_info("vllm-6.6.6/vllm/null", tarfile.CHRTYPE)], {}),
    "block-device": ([_info("vllm-6.6.6/vllm/disk", tarfile.BLKTYPE)], {}),
    "fifo": ([_info("vllm-6.6.6/vllm/pipe", tarfile.FIFOTYPE)], {}),
    "two-top-folders": ([_info("other-6.6.6/setup.py", size=3)], {"other-6.6.6/setup.py": b"x=1"}),
}


def _refused(result: Result) -> str:
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out
    assert result.exit_code == 2, out
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.mark.parametrize("name", list(MALICIOUS))
def test_malicious_sdist_is_refused(name: str, index: Index, tmp_path: Path) -> None:
    members, data = MALICIOUS[name]
    index.add("vllm-6.6.6.tar.gz", sdist("6.6.6", files=2, extra=members, extra_data=data))
    series = index_series(tmp_path)
    result = bake_cli(series, "6.6.6", tmp_path / "out")
    _refused(result)
    cache = Path(os.environ["BAKERY_CACHE_DIR"])
    assert not (tmp_path / "out").exists()
    assert not Path("/tmp/bakery-sdist-escaped.py").exists()
    assert not list(tmp_path.rglob("escaped.py"))
    assert not (cache / "trees" / "vllm-6.6.6.json").exists()
    assert cache_debris(cache) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


def test_setuid_and_odd_modes_are_dropped(index: Index, tmp_path: Path) -> None:
    """tarfile's data filter keeps a file but not its setuid bit or world-writable mode."""
    members = [_info("vllm-6.6.6/vllm/suid.py", size=3, mode=0o6777)]
    index.add(
        "vllm-6.6.6.tar.gz",
        sdist("6.6.6", files=2, extra=members, extra_data={"vllm-6.6.6/vllm/suid.py": b"x=1"}),
    )
    result = bake_cli(index_series(tmp_path), "6.6.6", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    mode = (tmp_path / "out" / "vllm" / "suid.py").stat().st_mode & 0o7777
    assert not mode & 0o6000 and not mode & 0o002


@pytest.mark.parametrize(
    "problem", ["sha-mismatch", "cut-short", "not-a-tarball", "missing", "index-garbage"]
)
def test_bad_downloads_are_refused(
    problem: str, index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "vllm-6.6.6.tar.gz"
    good = sdist("6.6.6", files=2)
    if problem == "sha-mismatch":
        index.add(name, good)
        index.stated_sha[name] = hashlib.sha256(b"something else").hexdigest()
    elif problem == "cut-short":
        index.add(name, good)
        index.cut[name] = len(good) // 3
    elif problem == "not-a-tarball":
        index.add(name, b"<html>certainly not gzip</html>" * 100)
    elif problem == "index-garbage":
        monkeypatch.setenv("BAKERY_INDEX_URL", index.url.replace("/simple", "/files"))
    result = bake_cli(index_series(tmp_path), "6.6.6", tmp_path / "out")
    _refused(result)
    cache = Path(os.environ["BAKERY_CACHE_DIR"])
    assert not (tmp_path / "out").exists()
    assert cache_debris(cache) == []
    if problem != "not-a-tarball":  # only a download that matches the index's hash is kept
        assert not (cache / "sdists" / name).exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_killed_cache_builds_are_cleaned(index: Index, tmp_path: Path) -> None:
    """SIGKILL while the cache downloads a release, then while it builds its tree: no entry
    is left half-made, and the next build of that entry removes what the killed ones left."""
    index.add("vllm-9.9.0.tar.gz", sdist("9.9.0", files=2000))
    # a download from 127.0.0.1 can start and end between two looks at the cache (it did,
    # on a loaded CI machine): spread over a second, it is always seen under way
    index.trickle["vllm-9.9.0.tar.gz"] = 1.0
    series = index_series(tmp_path)
    cache = Path(os.environ["BAKERY_CACHE_DIR"])
    marker = cache / "trees" / "vllm-9.9.0.json"
    left: list[str] = []
    # killed once its download is under way (a .part file), then once its build is (a
    # .build- folder): seen in the cache, not guessed with sleeps
    for stage in ("sdists/", "trees/"):
        before = set(cache_debris(cache))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bakery",
                "apply",
                str(series),
                "--vllm",
                "9.9.0",
                "--out",
                str(tmp_path / "out"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None:
            if any(p.startswith(stage) for p in set(cache_debris(cache)) - before):
                break
            time.sleep(0.0005)
        proc.kill()
        proc.wait()
        left += cache_debris(cache)
        assert not marker.exists(), f"the build was done before the kill ({stage})"
    assert {p.split("/")[0] for p in left} == {"sdists", "trees"}, left
    result = bake_cli(series, "9.9.0", tmp_path / "final")
    assert result.exit_code == 0, result.stderr
    assert_baked(tmp_path / "final", "9.9.0")
    assert cache_debris(cache) == [], f"left by killed builds: {left}"
