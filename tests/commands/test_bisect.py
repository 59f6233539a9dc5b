"""`bakery bisect` (issue 26): the first upstream commit that breaks the series, on a local
upstream history of real shapes (the DSA kernel file of 0.30.0 to 0.34.0, made-up commits
between them and after: a renamed argument, a reordering, one kernel's pinning rewritten,
the file moved). The series is the real dcp2 diff with its real ports; its test states one
promise of the series (PIN_NEWEST=False really turns the in-kernel pin off)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.dsa import cache_dsa_releases, dsa_history, dsa_series

PROMISE = """
import ast
from pathlib import Path

DSA = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
RUNS = Path(__file__).with_name("runs")


def _kernel(tree):
    mod = ast.parse((tree / DSA).read_text())
    return next(n for n in mod.body if getattr(n, "name", "") == "_block_scores_kernel")


def test_pin_newest_turns_the_pin_off(baked_tree):
    fn = _kernel(baked_tree)
    assert "PIN_NEWEST" in [a.arg for a in fn.args.args]
    gated = [
        n for n in ast.walk(fn) if isinstance(n, ast.If) and "PIN_NEWEST" in ast.unparse(n.test)
    ]
    assert gated
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

FLAKY = """

def test_once_flaky_on_the_note_after_0_34(baked_tree):
    # fails the first time it runs on that commit's tree, passes when run again
    if (baked_tree / DSA).read_text().endswith("# main.\\n") and "newest =" not in (
        baked_tree / DSA
    ).read_text():
        mark = RUNS / baked_tree.name
        if not mark.exists():
            RUNS.mkdir(exist_ok=True)
            mark.write_text("1")
            raise AssertionError("flaky")
"""


@pytest.fixture
def upstream(tmp_path: Path) -> dict[str, str]:
    hist = dsa_history(tmp_path / "up")
    cache_dsa_releases()
    return {subject: commit for commit, subject in hist}


def _bisect(cli, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    r = cli(
        "bisect", "dsa", "--vllm", f"git+file://{tmp_path}/up", "--good", "v0.30.0",
        "--bad", "main", "--json", "b.json", *args,
    )  # fmt: skip
    return r.exit_code, json.loads(Path("b.json").read_text()), r.output


def test_bisect_on_apply_names_the_commit_that_moved_the_file(cli, tmp_path, home, upstream):
    dsa_series(home)
    code, rep, out = _bisect(cli, tmp_path)
    assert code == 0, out
    culprit = rep["culprit"]
    assert culprit["commit"] == upstream["dsa: move the kernels to blocks.py"]
    assert culprit["why"].startswith("apply:")
    assert rep["mode"] == "apply" and rep["commits"] == 13
    # every hunk failed, and why; and the contract warnings the commit triggers
    assert rep["hunks"] and all(h["status"] == "failed" for h in rep["hunks"])
    assert {h["reason"] for h in rep["hunks"]} == {"the file does not exist in this release"}
    assert any("`_block_scores_kernel` (kernel) is gone upstream" in w for w in rep["warnings"])
    # a binary search: far fewer bakes than commits
    assert len(rep["steps"]) <= 2 + 4
    assert "first bad commit" in out


@pytest.mark.slow
def test_bisect_with_verify_names_the_rewrite_that_broke_the_promise(cli, tmp_path, home, upstream):
    # Every commit up to the move bakes (the syntax merge joins the rewrite), but the
    # rewrite drops what PIN_NEWEST switched: only verify sees it.
    dsa_series(home, tests=PROMISE)
    code, rep, out = _bisect(cli, tmp_path, "--verify")
    assert code == 0, out
    culprit = rep["culprit"]
    assert culprit["commit"] == upstream["dsa: rewrite _block_scores_kernel's pinning"]
    assert culprit["why"].startswith("verify:") and "(twice)" in culprit["why"]
    assert any(h["status"] == "merged-syntax" for h in rep["hunks"]), rep["hunks"]


@pytest.mark.slow
def test_a_verify_failure_that_does_not_reproduce_is_never_the_culprit(
    cli, tmp_path, home, upstream
):
    dsa_series(home, tests=PROMISE + FLAKY)
    code, rep, out = _bisect(cli, tmp_path, "--verify")
    flaky = [s for s in rep["steps"] if s["verdict"] == "flaky"]
    assert [s["commit"] for s in flaky] == [upstream["dsa: a note after 0.34.0"]]
    assert "passed when run again" in flaky[0]["why"]
    assert rep["culprit"]["commit"] == upstream["dsa: rewrite _block_scores_kernel's pinning"]
    # it sits right before the culprit: the culprit is named, and said to be unsure
    assert [s["commit"] for s in rep["unsure"]] == [upstream["dsa: a note after 0.34.0"]]
    assert code == 1, out
    assert "unsure:" in out


def test_bisect_refuses_what_it_cannot_bisect(cli, tmp_path, home, upstream):
    dsa_series(home)
    r = cli("bisect", "dsa", "--vllm", f"{tmp_path}/up", "--good", "v0.30.0", "--bad", "main")
    assert r.exit_code == 2 and "needs --vllm git+URL" in r.output
    r = cli(
        "bisect", "dsa", "--vllm", f"git+file://{tmp_path}/up", "--good", "main",
        "--bad", "v0.30.0",
    )  # fmt: skip
    assert r.exit_code == 2 and "not a first-parent descendant" in r.output
