"""`bakery bisect` (issue 26): the first upstream commit that breaks the series, on a local
upstream history of real shapes (the DSA kernel file of 0.30.0 to 0.34.0, made-up commits
between them and after: a renamed argument, a reordering, one kernel's pinning rewritten,
the file moved). The series is the real dcp2 diff with its real ports; its test states one
promise of the series (PIN_NEWEST=False really turns the in-kernel pin off)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bakery import project
from bakery.commands.bisect import Step, _Run
from bakery.context import Context
from bakery.sources.cache import Cache
from tests.support.dsa import DSA, cache_dsa_releases, dsa_history, dsa_series
from tests.support.repos import git, git_repo
from tests.support.trees import Tiny, snapshot, write_files

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


# --- the line bisect follows, varied (issue 50) -------------------------------------------------


def _commit(repo: Path, subject: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def merged(tmp_path: Path, home: Path) -> dict[str, str]:
    """After 0.34.0: a trunk whose history holds a merge. The side branch moves the kernel
    file (the series no longer applies); the trunk's own commits only add notes; a third
    branch is never merged. subject -> commit."""
    up = tmp_path / "up"
    dsa_history(up)
    cache_dsa_releases()
    dsa_series(home)
    c: dict[str, str] = {}
    notes = up / "vllm" / "notes.py"
    git(up, "checkout", "-q", "-b", "side", "v0.34.0")
    git(up, "mv", DSA, DSA.replace("candidate_blocks.py", "blocks.py"))
    c["side: move"] = _commit(up, "side: move the kernels to blocks.py")
    notes.write_text("SIDE = 1\n")
    c["side: note"] = _commit(up, "side: a note")
    git(up, "checkout", "-q", "-b", "other", "v0.34.0")
    notes.write_text("OTHER = 1\n")
    c["other"] = _commit(up, "other: never merged")
    git(up, "checkout", "-q", "-b", "trunk", "v0.34.0")
    notes.write_text("T = 1\n")
    c["t1"] = _commit(up, "trunk: one")
    notes.write_text("T = 2\n")
    c["t2"] = _commit(up, "trunk: two")
    git(up, "merge", "-q", "--no-ff", "-X", "theirs", "-m", "merge side", "side")
    c["merge"] = git(up, "rev-parse", "HEAD").strip()
    notes.write_text("T = 3\n")
    c["t3"] = _commit(up, "trunk: three")
    return c


def _on_trunk(cli, tmp_path: Path, good: str) -> tuple[int, dict[str, Any] | None, str]:
    out = tmp_path / "m.json"
    r = cli(
        "bisect", "dsa", "--vllm", f"git+file://{tmp_path}/up", "--good", good,
        "--bad", "trunk", "--json", out,
    )  # fmt: skip
    return r.exit_code, json.loads(out.read_text()) if out.is_file() else None, r.output


def test_on_a_history_with_merges_the_culprit_is_on_the_first_parent_line(
    cli, tmp_path, merged
) -> None:
    code, rep, out = _on_trunk(cli, tmp_path, "v0.34.0")
    assert code == 0 and rep is not None, out
    assert (rep["series"], rep["mode"], rep["bad"]) == ("dsa", "apply", merged["t3"])
    assert rep["vllm"] == f"git+file://{tmp_path}/up" and len(rep["good"]) == 40
    # the merge brought the move in: it is the culprit, never the side branch's commit
    assert rep["culprit"]["commit"] == merged["merge"], rep["steps"]
    assert rep["commits"] == 4  # t1, t2, the merge, t3: the side's commits are not steps
    side = {merged["side: move"], merged["side: note"]}
    assert not side & {s["commit"] for s in rep["steps"]}


@pytest.mark.parametrize(
    ("good", "said"),
    [
        ("other", "is not an ancestor of --bad trunk"),  # a branch never merged
        # an ancestor, off the line
        ("side: move", "only through a merged side branch: bisect follows --bad's first-parent"),
        ("trunk", "not a first-parent descendant"),  # --good is --bad
    ],
)
def test_a_good_off_the_first_parent_line_of_bad_is_refused(
    cli, tmp_path, merged, good: str, said: str
) -> None:
    ref = merged.get(good, good)
    code, _, out = _on_trunk(cli, tmp_path, ref)
    assert code == 2, out
    assert said in out, out


COLLECTION = """
import os
from pathlib import Path

DSA = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
TEXT = (Path(os.environ["BAKERY_TREE"]) / DSA).read_text()
if "newest =" in TEXT:  # the rewrite: what this module reads at import is gone
    raise ImportError("the kernel's pinning is gone")


def test_the_pin_is_there():
    assert "pinned" in TEXT
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "tests",
    [COLLECTION, COLLECTION.replace("raise ImportError", "TEXT = 'no pin:'; print")],
    ids=["error-at-collection", "failing-test"],
)
def test_a_commit_whose_tests_error_at_collection_is_bad(
    cli, tmp_path, home, upstream, tests: str
) -> None:
    """Upstream breaks a series' tests most often at import (a name is gone): a
    collection error is as bad as a failing test, and names the same culprit."""
    dsa_series(home, tests=tests)
    r = cli(
        "bisect", "dsa", "--vllm", f"git+file://{tmp_path}/up", "--good", "v0.34.0",
        "--bad", upstream["dsa: a typo"], "--verify", "--json", "b.json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rep = json.loads(Path("b.json").read_text())
    culprit = rep["culprit"]
    assert culprit["commit"] == upstream["dsa: rewrite _block_scores_kernel's pinning"], rep
    assert culprit["verdict"] == "bad" and "(twice)" in culprit["why"]
    if tests is COLLECTION:
        assert "1 errors" in culprit["why"], culprit


def test_a_good_that_is_not_good_is_refused_naming_it(cli, tmp_path, merged) -> None:
    # the merge brought the move in: as --good it does not bake
    r = cli(
        "bisect", "dsa", "--vllm", f"git+file://{tmp_path}/up", "--good", merged["merge"],
        "--bad", "trunk",
    )  # fmt: skip
    assert r.exit_code == 2, r.output
    said = f"--good {merged['merge']} ({merged['merge'][:12]}) is not good: apply: "
    assert said in r.output, r.output


# --- each commit's verdict under --verify, the verify run for real on a tiny series (issue 50) ---

ONCE = """
from pathlib import Path

MARK = Path({mark!r})


def test_the_promise():
    ran_before = MARK.exists()
    MARK.write_text("ran")
    assert {check}
"""


def _judge_with_tests(tiny: Tiny, tmp_path: Path, check: str) -> Callable[[], Step]:
    """A step of ``bisect --verify`` on the tiny series' one upstream commit, whose test
    asserts ``check`` (``ran_before``: whether it ran before, on any tree)."""
    git_repo(tiny.src, {})
    commit = git(tiny.src, "rev-parse", "HEAD").strip()
    (tiny.series / "tests").mkdir(exist_ok=True)
    test = ONCE.format(mark=str(tmp_path / "ran"), check=check)
    (tiny.series / "tests" / "test_promise.py").write_text(test)
    run = _Run("demo", f"file://{tiny.src}", tmp_path / "scratch", True, True, Context.here())
    return lambda: run.judge(commit, "upstream")


@pytest.mark.parametrize(
    ("check", "verdict", "why"),
    [
        ("True", "good", ""),
        ("False", "bad", "verify: 1 failed, 0 errors, 0 passed (twice)"),
        ("ran_before", "flaky", "verify: 1 failed, 0 errors, 0 passed; passed when run again"),
    ],
    ids=["passes", "fails-twice", "fails-once"],
)
def test_a_failed_verify_runs_again_and_only_a_second_failure_makes_the_commit_bad(
    tiny: Tiny, tmp_path: Path, check: str, verdict: str, why: str
) -> None:
    judge = _judge_with_tests(tiny, tmp_path, check)
    commit = git(tiny.src, "rev-parse", "HEAD").strip()
    assert judge() == Step(commit, "upstream", verdict, why)


def test_a_commit_judged_again_reuses_its_passing_verify(tiny: Tiny, tmp_path: Path) -> None:
    """The test passes only the first time it runs: judged again, the commit is good
    from the recorded result, not from a second run."""
    judge = _judge_with_tests(tiny, tmp_path, "not ran_before")
    assert judge().verdict == "good"
    assert judge().verdict == "good"


@pytest.mark.parametrize("left", ["folder", "file", "link", "fifo"])
def test_a_step_bakes_over_what_an_earlier_bisect_left_at_its_place(
    tiny: Tiny, tmp_path: Path, left: str
) -> None:
    """A bisect stopped half-way leaves its scratch folder behind: the next bisect's step
    for the same commit bakes there all the same, whatever is at its place (a folder that
    is no baked tree, a file, a link, a FIFO: each a bake alone refuses to replace), and
    never calls the commit bad for it; a link is unlinked, what it names left alone."""
    git_repo(tiny.src, {})
    commit = git(tiny.src, "rev-parse", "HEAD").strip()
    scratch = tmp_path / "scratch"
    place = scratch / commit[:12]
    elsewhere = write_files(tmp_path / "elsewhere", {"vllm/theirs.py": "the user's\n"})
    before = snapshot(elsewhere)
    scratch.mkdir()
    if left == "folder":
        write_files(place, {"vllm/half.py": "half a tree\n"})
    elif left == "file":
        place.write_text("a file\n")
    elif left == "link":
        place.symlink_to(elsewhere, target_is_directory=True)
    else:
        os.mkfifo(place)
    run = _Run("demo", f"file://{tiny.src}", scratch, False, True, Context.here())
    assert run.judge(commit, "upstream") == Step(commit, "upstream", "good")
    assert not place.is_symlink() and (place / ".bakery" / "manifest.json").is_file()
    assert not (place / "vllm" / "half.py").exists()
    assert snapshot(elsewhere) == before


def test_a_bisect_step_never_becomes_the_series_last_bake(cli, tiny: Tiny, tmp_path: Path) -> None:
    """verify's default tree is the series' last apply: a bisect's bakes of upstream
    commits are not it, before or after a step bakes."""
    git_repo(tiny.src, {})
    commit = git(tiny.src, "rev-parse", "HEAD").strip()
    record = Cache().path(".") / project.LAST_BAKES
    mine = tmp_path / "mine"
    r = cli("apply", "demo", "--vllm", f"git+file://{tiny.src}@main", "--out", mine)
    assert r.exit_code == 0, r.output
    before = project.last_applies(record)
    assert list(before) == ["demo"] and Path(before["demo"]).resolve() == mine.resolve()
    run = _Run("demo", f"file://{tiny.src}", tmp_path / "scratch", False, True, Context.here())
    assert run.judge(commit, "upstream").verdict == "good"
    assert project.last_applies(record) == before


@pytest.mark.parametrize("vllm", ["{tmp}/up", "0.30.0", "latest", "no-such-release"])
def test_bisect_needs_a_git_source_whatever_else_is_given(
    cli, tmp_path: Path, home: Path, vllm: str
) -> None:
    """An existing folder, a release, and what names no source at all: each is told the
    same (bisect walks a git history), never another command's message."""
    (tmp_path / "up").mkdir()
    dsa_series(home)
    spec = vllm.format(tmp=tmp_path)
    r = cli("bisect", "dsa", "--vllm", spec, "--good", "v0.30.0", "--bad", "main")
    assert r.exit_code == 2, r.output
    assert f"bakery bisect needs --vllm git+URL, not {spec!r}" in r.output, r.output
