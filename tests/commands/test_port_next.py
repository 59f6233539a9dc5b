"""Ports for what is not released yet (issue 26): `bakery port SERIES --vllm git+URL@REF`
writes patches/SERIES/next/ only when verify proves it, with the upstream commit it was
proven on; `--promote VERSION` moves it at the release, as it is where the release is that
commit, else only once re-proven on the release. On the local upstream history of real
shapes (tests/support/dsa.py dsa_history) with the real dcp2 diff and ports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.dsa import (
    DSA,
    DSA_BREAK,
    cache_dsa_releases,
    dsa_file,
    dsa_history,
    dsa_series,
    dsa_tree,
)
from tests.support.index import Index
from tests.support.trees import cache_release

#: each port proves its candidates with the series' tests: long
pytestmark = pytest.mark.slow

PROMISE = """
import ast

DSA = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"


def test_pin_newest_turns_the_pin_off(baked_tree):
    mod = ast.parse((baked_tree / DSA).read_text())
    fn = next(n for n in mod.body if getattr(n, "name", "") == "_block_scores_kernel")
    gated = [
        n for n in ast.walk(fn) if isinstance(n, ast.If) and "PIN_NEWEST" in ast.unparse(n.test)
    ]
    set_there = {
        t.id for g in gated for s in g.body for t in ast.walk(s)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    wheres = [ast.unparse(n) for n in ast.walk(fn)
              if isinstance(n, ast.Call) and ast.unparse(n.func) == "tl.where"]
    assert any(name in w for w in wheres for name in set_there), wheres
    # ... and before the scores are stored
    stores = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call)
              and ast.unparse(n).startswith("tl.store(scores")]
    assert stores and all(g.lineno < min(stores) for g in gated)
"""


@pytest.fixture
def upstream(tmp_path: Path, home: Path) -> dict[str, str]:
    hist = dsa_history(tmp_path / "up")
    cache_dsa_releases()
    dsa_series(home, tests=PROMISE)
    return {subject: commit for commit, subject in hist}


def _port(cli, *args: str) -> tuple[int, dict[str, Any], str]:
    r = cli("port", "dsa", "--json", "p.json", *args)
    assert Path("p.json").is_file(), r.output
    return r.exit_code, json.loads(Path("p.json").read_text()), r.output


def test_a_ref_gets_next_only_when_proven_and_promote_moves_it(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    nxt = home / "patches" / "dsa" / "next"
    # the rewrite of the pinning: every start bakes, none proves -> nothing written
    bad = upstream["dsa: rewrite _block_scores_kernel's pinning"]
    code, rep, out = _port(cli, "--vllm", f"git+file://{tmp_path}/up@{bad}")
    assert code == 1, out
    assert rep["port"] is None and not nxt.exists()
    assert rep["tried"] and all(not t["accepted"] for t in rep["tried"])
    # the commit before it: proven, written to next/ with the commit it was proven on
    good = upstream["dsa: a note after 0.34.0"]
    code, rep, out = _port(cli, "--vllm", f"git+file://{tmp_path}/up@{good}")
    assert code == 0, out
    assert rep["vllm"] == f"0.34.0+g{good[:12]}"
    assert rep["port"] == "home/patches/dsa/next"
    record = json.loads((nxt / "PROVEN-ON.json").read_text())
    assert record["commit"] == good and record["identity"] == rep["vllm"]
    assert DSA in record["package"]
    assert f"upstream commit: {good}" in (nxt / "PROVENANCE.md").read_text()
    # no release's port was written or replaced
    assert sorted(p.name for p in (home / "patches" / "dsa").iterdir()) == [
        "0.31.0",
        "0.33.0",
        "0.34.0",
        "next",
    ]
    # 0.35.0 ships exactly that commit's files: next/ moves as it is
    cache_release("0.35.0", _release_files(dsa_file("0.34.0") + "\n# main.\n", "0.35.0"))
    code, done, out = _port(cli, "--promote", "0.35.0")
    assert code == 0, out
    assert done["how"] == "same files" and done["port"] == "home/patches/dsa/0.35.0"
    # PROVEN-ON.json is never the proof: promote baked and verified it on the release
    assert str(done["verify"]).startswith("passed")
    assert not nxt.exists() and (home / "patches" / "dsa" / "0.35.0" / "PROVEN-ON.json").exists()
    # and apply now takes it for the pristine 0.35.0, silently
    r = cli("check", "dsa", "--vllm", "0.35.0", "--strict")
    assert r.exit_code == 0, r.output


def _release_files(content: str, version: str) -> dict[str, str]:
    files = dsa_tree(content, version)
    files.pop("setup.py")
    return files


def _proven_next(cli, tmp_path: Path, upstream: dict[str, str]) -> None:
    good = upstream["dsa: a note after 0.34.0"]
    code, _, out = _port(cli, "--vllm", f"git+file://{tmp_path}/up@{good}")
    assert code == 0, out


def test_promote_re_proves_a_port_on_a_release_that_is_another_tree(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    _proven_next(cli, tmp_path, upstream)
    # 0.35.0 is not the commit next/ was proven on, but next/ proves on it
    cache_release("0.35.0", _release_files(dsa_file("0.34.0") + "\n# 0.35.0\n", "0.35.0"))
    code, done, out = _port(cli, "--promote", "0.35.0")
    assert code == 0, out
    assert done["how"] == "re-proven" and done["differs"] == [DSA]
    assert str(done["verify"]).startswith("passed")
    note = (home / "patches" / "dsa" / "0.35.0" / "PROVENANCE.md").read_text()
    assert "re-proven on it" in note


def test_promote_refuses_a_port_that_does_not_prove_on_the_release(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    _proven_next(cli, tmp_path, upstream)
    cache_release("0.35.0", _release_files(DSA_BREAK(dsa_file("0.34.0")), "0.35.0"))
    code, done, out = _port(cli, "--promote", "0.35.0")
    assert code == 1, out
    assert done["port"] is None and not (home / "patches" / "dsa" / "0.35.0").exists()
    assert (home / "patches" / "dsa" / "next").is_dir()
    assert "does not prove on the release" in str(done["note"])


def test_port_refuses_what_it_cannot_do(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    r = cli("port", "dsa")
    assert r.exit_code == 2 and "--vllm SPEC or --promote VERSION" in r.output
    r = cli("port", "dsa", "--promote", "0.35.0")
    assert r.exit_code == 2 and "no port of an unreleased tree to promote" in r.output
    tag = upstream["vLLM 0.34.0"]
    r = cli("port", "dsa", "--vllm", f"git+file://{tmp_path}/up@{tag}")
    assert r.exit_code == 2 and "the pristine release 0.34.0" in r.output


def test_a_ref_the_series_does_not_fit_leaves_its_attempt_and_names_upstream(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    """Issue 45: a port to a ref leaves its best attempt as a port to a release does (the
    conflicts in git's index, as apply --keep-failed), blames with --upstream, and says
    one thing: no "ported to" above "no proposal proven"."""
    moved = upstream["dsa: move the kernels to blocks.py"]
    code, rep, out = _port(
        cli, "--vllm", f"git+file://{tmp_path}/up@{moved}", "--upstream", str(tmp_path / "up")
    )
    assert code == 1, out
    assert rep["port"] is None and not (home / "patches" / "dsa" / "next").exists()
    attempt = tmp_path / str(rep["failed_out"])
    assert attempt.name == "attempt.failed" and (attempt / ".bakery" / "manifest.json").is_file()
    assert f"no proposal proven; best attempt in {rep['failed_out']}" in out
    assert "ported to" not in out and "a port to vLLM 0.34.0+g" in out
    # the hunks a person must look at, each with the upstream commits behind it (here
    # none can be named: the file is gone at the ref, and blame says so)
    assert rep["hunks"] and all("upstream" in h for h in rep["hunks"])
    # a ref where the file is there: the commits behind the hunks' lines are named
    bad = upstream["dsa: rewrite _block_scores_kernel's pinning"]
    code, rep, out = _port(
        cli, "--vllm", f"git+file://{tmp_path}/up@{bad}", "--upstream", str(tmp_path / "up")
    )
    assert code == 1 and rep["failed_out"], out
    named = {line[13:] for h in rep["hunks"] for line in h["upstream"]}
    assert "vLLM 0.33.0" in named, named  # the release commit that rewrote the kernel


def test_refresh_of_a_tree_of_main_writes_next_never_a_release(
    cli, tmp_path: Path, home: Path, upstream: dict[str, str]
) -> None:
    """Issue 45: a tree baked from main (here a commit after 0.34.0, which takes 0.34.0's
    port with a warning), edited and refreshed, writes patches/dsa/next/ with its commit;
    the release's port, which was proven on the pristine 0.34.0, is left as it is."""
    ports = home / "patches" / "dsa"
    before = {p: p.read_bytes() for p in sorted(ports.rglob("*")) if p.is_file()}
    good = upstream["dsa: a note after 0.34.0"]
    r = cli("apply", "dsa", "--vllm", f"git+file://{tmp_path}/up@{good}", "--out", "main")
    assert r.exit_code == 0, r.output
    dsa = tmp_path / "main" / DSA
    dsa.write_text(dsa.read_text() + "\n# a fix made on main\n")
    r = cli("refresh", "dsa", "--tree", "main")
    assert r.exit_code == 0, r.output
    assert {p: p.read_bytes() for p in before} == before  # no release's port changed
    nxt = ports / "next"
    made = json.loads((nxt / "MADE-ON.json").read_text())
    assert made == {"commit": good, "identity": f"0.34.0+g{good[:12]}", "made_by": "refresh"}
    assert "+# a fix made on main" in "".join(p.read_text() for p in nxt.glob("*.diff"))
    assert sorted(p.name for p in ports.iterdir()) == ["0.31.0", "0.33.0", "0.34.0", "next"]


K = "vllm/k.py"
K_BASE = "def pick(xs, k):\n    ys = sorted(xs)\n    return ys[:k]\n"


def test_a_ref_that_conflicts_leaves_its_conflicts_in_gits_index(
    cli, tmp_path: Path, home: Path, index: Index
) -> None:
    """Issue 45: main changes the very line the series changes: no merge keeps both. The
    port to that ref leaves the attempt as apply --keep-failed does (the file unmerged in
    git's index, with diff3 markers), says so in one headline, and writes no next/."""
    from tests.support.archives import sdist
    from tests.support.repos import git, git_repo
    from tests.support.series import make_series, udiff

    index.add("vllm-1.0.0.tar.gz", sdist("1.0.0", files=0, modules={K: K_BASE}))
    up = git_repo(tmp_path / "up", {"setup.py": "", "vllm/__init__.py": "", K: K_BASE})
    git(up, "tag", "v1.0.0")
    (up / K).write_text(K_BASE.replace("sorted(xs)", "sorted(set(xs))"))
    git(up, "commit", "-qam", "main: distinct items")
    series = make_series(
        home,
        "s",
        {"01-rev.diff": udiff(K, K_BASE, K_BASE.replace("sorted(xs)", "sorted(xs, reverse=True)"))},
        'base = "1.0.0"\nroot = ""\nstrip = 1\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_k.py").write_text("def test_nothing():\n    pass\n")
    r = cli("port", "s", "--vllm", f"git+file://{up}@main", "--json", "p.json")
    assert r.exit_code == 1, r.output
    rep = json.loads(Path("p.json").read_text())
    assert rep["port"] is None and not (home / "patches" / "s" / "next").exists()
    attempt = tmp_path / str(rep["failed_out"])
    assert attempt.name == "attempt.failed"
    assert git(attempt, "status", "--porcelain", "--", K) == f"UU {K}\n"
    assert "<<<<<<< release" in (attempt / K).read_text()
    assert f"no proposal proven; best attempt in {rep['failed_out']}" in r.output
    assert "ported to" not in r.output
