"""dcp2 on real vLLM releases from the package index (network; the releases are cached in
``BAKERY_TEST_CACHE``, default ``~/.cache/bakery-tests``, so that they download once)."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery.context import Context
from bakery.git import cmd as gitutil
from bakery.sources.cache import Cache
from tests.support.gnupatch import gnu_patch, needs_patch
from tests.support.paths import PROJECT, TEST_CACHE
from tests.support.repos import commits
from tests.support.trees import tree_digest

pytestmark = pytest.mark.network

DIFF = "02-model_executor_kernels_attention_dsa_candidate_blocks.py.diff"
FILE = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"


def _index_reachable() -> bool:
    """Whether the index bakery reads (pip's, see pipconf.py) answers a connection."""
    from urllib.parse import urlsplit

    from bakery.sources.pipconf import configured_index

    url = urlsplit(configured_index().url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.fixture(autouse=True)
def _dcp2_home(home: Path, tmp_path: Path) -> Iterator[None]:
    """The real dcp2 series, copied so that bakery's notes (build/) stay in tmp_path; no
    patches/ folder, so no port is ever picked. Baked vLLM trees are large: they are
    removed afterwards instead of being left to pytest's tmp_path rotation."""
    shutil.copytree(PROJECT / "launcher" / "dcp2", home / "launcher" / "dcp2")
    yield
    for p in tmp_path.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


@pytest.fixture(autouse=True)
def _need_index() -> None:
    cached = all(
        (TEST_CACHE / "trees" / f"vllm-{v}.json").is_file() for v in ("0.30.0", "0.31.0", "0.32.0")
    )
    if not cached and not _index_reachable():
        pytest.skip("the package index is not reachable")


def _cached_tree(version: str) -> Path:
    entry = Cache(TEST_CACHE).tree_entry(f"vllm-{version}")
    assert entry is not None, f"vLLM {version} is not in the cache"
    return entry.tree


def _hunks(path: Path) -> list[tuple[int, str, int, int]]:
    rep = json.loads(path.read_text())
    (d,) = rep["diffs"]
    (f,) = d["files"]
    assert f["path"] == FILE
    return [(h["index"], h["status"], h["line"], h["offset"]) for h in f["hunks"]]


@needs_patch
@pytest.mark.parametrize("version", ["0.30.0", "0.32.0"])
def test_dcp2_bake_matches_gnu_patch(
    cli: Callable[..., Result], tmp_path: Path, version: str
) -> None:
    r = cli(
        "apply",
        "dcp2",
        "--vllm",
        version,
        "--out",
        "a",
        "--json",
        "a.json",
        "--no-merge",
        "--no-port",
    )
    assert r.exit_code == 0, r.output
    hunks = _hunks(tmp_path / "a.json")
    if version == "0.30.0":
        assert [s for _, s, _, _ in hunks] == ["applied"] * 6
    pristine = _cached_tree(version)
    # GNU patch on a copy of the same pristine package folder
    ref = tmp_path / "gnu"
    shutil.copytree(pristine / "vllm", ref, ignore=shutil.ignore_patterns("__pycache__"))
    proc = gnu_patch(ref, PROJECT / "launcher" / "dcp2" / "diffs" / DIFF)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    baked = tmp_path / "a" / FILE
    assert baked.read_bytes() == (ref / FILE.removeprefix("vllm/")).read_bytes()
    # every other file is the pristine one
    assert gitutil.git(tmp_path / "a", "diff", "--name-only", "HEAD~1", "HEAD").split() == [FILE]
    assert gitutil.git(tmp_path / "a", "status", "--porcelain") == ""


def test_dcp2_on_0_30_0_is_reproducible_and_leaves_the_cache_alone(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    r = cli("apply", "dcp2", "--vllm", "0.30.0", "--out", "a", "--json", "a.json")
    assert r.exit_code == 0, r.output
    pristine = _cached_tree("0.30.0")
    head = gitutil.head(pristine)
    before = tree_digest(pristine)
    r = cli("apply", "dcp2", "--out", "b")  # the series' base release is the default
    assert r.exit_code == 0, r.output
    a, b = commits(tmp_path / "a"), commits(tmp_path / "b")
    assert a == b
    assert [s for _, s, _ in a] == ["pristine vLLM 0.30.0", DIFF]
    rep = json.loads((tmp_path / "a.json").read_text())
    assert rep["status"] == "baked"
    assert rep["vllm"]["version"] == "0.30.0"
    assert rep["vllm"]["sha256"] and rep["vllm"]["source"].endswith("vllm-0.30.0.tar.gz")
    assert rep["layout"] == {"strip": 1, "root": "vllm", "detected": False}
    # the cached pristine tree is as it was: same commit, clean, same bytes
    assert gitutil.head(pristine) == head
    assert gitutil.dirty(pristine) == []
    assert tree_digest(pristine) == before


def test_dcp2_check_on_0_31_0_names_the_failed_hunks(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    r = cli("check", "dcp2", "--vllm", "0.31.0", "--no-merge", "--no-port", "--json", "c.json")
    assert r.exit_code == 1, r.output
    hunks = _hunks(tmp_path / "c.json")
    assert [(i, s) for i, s, _, _ in hunks] == [
        (1, "failed"),
        (2, "offset"),
        (3, "offset"),
        (4, "offset"),
        (5, "failed"),
        (6, "offset"),
    ]
    assert [(i, line) for i, s, line, _ in hunks if s == "failed"] == [(1, 1), (5, 174)]
    assert not (tmp_path / "build").exists()


def test_dcp2_check_on_0_32_0_offsets_by_one(cli: Callable[..., Result], tmp_path: Path) -> None:
    r = cli("check", "dcp2", "--vllm", "0.32.0", "--no-merge", "--no-port", "--json", "c.json")
    assert r.exit_code == 0, r.output
    assert _hunks(tmp_path / "c.json") == [
        (1, "applied", 1, 0),
        (2, "applied", 83, 0),
        (3, "applied", 100, 0),
        (4, "offset", 196, 1),
        (5, "offset", 221, 1),
        (6, "offset", 345, 1),
    ]


@pytest.mark.slow
def test_dcp2_bakes_on_0_30_0_and_verifies(cli: Callable[..., Result], tmp_path: Path) -> None:
    """The demo, end to end: bake the base release, then the bundled suite on the CPU
    against the tree just baked (verify's default tree)."""
    assert cli("apply", "dcp2", "--vllm", "0.30.0", "--out", tmp_path / "baked").exit_code == 0
    junit = tmp_path / "verify.xml"
    result = cli("verify", "dcp2", "--interpret", "--junit", junit)
    assert result.exit_code == 0, result.output
    text = junit.read_text()
    assert 'failures="0"' in text and 'errors="0"' in text
    assert 'tests="0"' not in text


@pytest.mark.slow
def test_a_broken_series_bakes_but_fails_verify(
    cli: Callable[..., Result], home: Path, tmp_path: Path
) -> None:
    """A series whose DCP reduce sums instead of taking the maximum applies cleanly: only
    verify can tell, and it must."""
    broken = home / "launcher" / "broken"
    shutil.copytree(home / "launcher" / "dcp2", broken)
    diff = broken / "diffs" / DIFF
    text = diff.read_bytes()
    assert text.count(b"ReduceOp.MAX") == 1
    diff.write_bytes(text.replace(b"ReduceOp.MAX", b"ReduceOp.SUM"))
    out = tmp_path / "broken-baked"
    assert cli("apply", "broken", "--vllm", "0.30.0", "--out", out).exit_code == 0
    result = cli("verify", "broken", "--tree", out, "--interpret", "--", "-x", "-q", "-k", "dcp")
    assert result.exit_code == 1, result.output


#: Lines each port in patches/dcp2/ adds, and mutants of them: the DCP reduce sums
#: instead of taking the maximum; the newest block is no longer pinned. "none" is the
#: control: the port as committed passes the same tests.
PORT_MUTANTS: dict[str, tuple[bytes, bytes] | None] = {
    "none": None,
    "reduce-sum": (b"ReduceOp.MAX", b"ReduceOp.SUM"),
    "no-pin": (b'+        scores.scatter_(1, pin[r0:r1], float("inf"))\n', b"+        pass\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutant", list(PORT_MUTANTS))
def test_verify_judges_the_ports_too(
    cli: Callable[..., Result], home: Path, tmp_path: Path, mutant: str
) -> None:
    """The ports are code that verify must judge too: the 0.34.0 port bakes, as a port,
    and passes DCP-against-single-rank tests; with a mutant it still bakes, and fails."""
    port = home / "patches" / "dcp2" / "0.34.0"
    shutil.copytree(PROJECT / "patches" / "dcp2" / "0.34.0", port)
    change = PORT_MUTANTS[mutant]
    if change is not None:
        (diff,) = port.glob("*.diff")
        text = diff.read_bytes()
        assert text.count(change[0]) == 1, mutant
        diff.write_bytes(text.replace(*change))
    out = tmp_path / "baked"
    r = cli("apply", "dcp2", "--vllm", "0.34.0", "--out", out, "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["port"] == "home/patches/dcp2/0.34.0"
    # DCP against single-rank, world 2, one seed: every block size, repeat, start and width
    tests = "test_dcp_equals_single_rank and world2-0"
    result = cli("verify", "dcp2", "--tree", out, "--interpret", "--", "-x", "-q", "-k", tests)
    if change is None:
        assert result.exit_code == 0 and " failed" not in result.stderr, result.output
    else:
        assert result.exit_code == 1 and "1 failed" in result.output, result.output


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_dcp2_is_not_ambiguous_nor_moved_and_ports_resolve_its_contracts(
    version: str, home: Path
) -> None:
    """Issue 19: dcp2's hunks are unique and land in their own definitions; on 0.33.0,
    upstream changed `_block_scores_kernel`, and the port's code fits the change."""
    from bakery.commands import apply as commands

    shutil.copytree(PROJECT / "patches" / "dcp2", home / "patches" / "dcp2")
    ctx = Context.here()
    own = commands.check(ctx, "dcp2", commands.BakeOptions(vllm=version, use_port=False))
    ported = commands.check(ctx, "dcp2", commands.BakeOptions(vllm=version))
    hunks = [h for d in own.diffs for f in d.files for h in f.hunks]
    assert hunks and all(h.status.value != "ambiguous" for h in hunks)
    moved = [h for h in hunks if h.moved_def is not None]
    if version == "0.33.0":
        # upstream moved code around `_block_scores` (the finder of enclosing definitions
        # sees into if/try blocks since issue 23): the guard names the hunk that lands in
        # another definition, and the release's port is what bakes there
        assert moved and ported.port is not None
    else:
        assert moved == []
    contracts = [w for d in ported.diffs for w in d.warnings if w.startswith("contract:")]
    if version == "0.33.0":
        assert ported.port and ported.ok
        assert len(contracts) == 1 and "`_block_scores_kernel`" in contracts[0]
        assert "resolved by the port" in contracts[0]
    else:
        assert own.ok and contracts == []
