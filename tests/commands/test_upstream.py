"""``bakery upstream`` (issue 19's early warning from vLLM's main branch), against a local
git repository the test builds: no network. Also checks that the scheduled workflow runs
it the way this test does."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from bakery.cli.app import app
from bakery.git import cmd as gitutil
from bakery.sources.cache import Cache
from tests.support.paths import PROJECT
from tests.support.repos import GIT_ENV

LIB = """def helper(x, scale=1):
    return x * scale


def other():
    return 0
"""

USER = """from vllm.lib import helper


def first(x):
    y = x + 1
    return y


def run(x):
    a = 1
    b = 2
    return helper(x)


def last():
    return None
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _cache_base(files: dict[str, str]) -> None:
    """The series' base release, as the cache holds a release (no index needed)."""
    cache = Cache()
    with cache.lock("vllm-0.1.0"), cache.building("vllm-0.1.0") as tmp:
        top = tmp / "tree"
        for rel, text in files.items():
            (top / rel).parent.mkdir(parents=True, exist_ok=True)
            (top / rel).write_text(text)
        gitutil.init_commit_all(top, "pristine vLLM 0.1.0")
        cache.commit_tree(
            "vllm-0.1.0", top, {"source": "test", "sha256": "0" * 64, "version": "0.1.0"}
        )


def _series(tmp: Path) -> Path:
    import difflib

    folder = tmp / "series"
    (folder / "diffs").mkdir(parents=True)
    (folder / "series.toml").write_text('base = "0.1.0"\nroot = ""\nstrip = 1\n')
    ours = USER.replace("return helper(x)", "return helper(x, scale=b)")
    diff = "".join(
        difflib.unified_diff(
            USER.splitlines(keepends=True),
            ours.splitlines(keepends=True),
            "a/vllm/user.py",
            "b/vllm/user.py",
        )
    )
    (folder / "diffs" / "01-scale.diff").write_text(diff)
    return folder


def test_upstream_lists_commits_that_touch_hunks_and_contract_names(tmp_path: Path) -> None:
    repo = tmp_path / "vllm-upstream"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    base = {"vllm/__init__.py": "", "vllm/lib.py": LIB, "vllm/user.py": USER}
    _commit(repo, base, "release 0.1.0")
    _git(repo, "tag", "v0.1.0")
    _cache_base(base)
    folder = _series(tmp_path)
    # after the release: one commit renames a parameter the series passes by keyword, one
    # touches another file, one touches the series' file far from its hunk
    renamed = _commit(repo, {"vllm/lib.py": LIB.replace("scale", "factor")}, "lib: rename")
    _commit(repo, {"vllm/other.py": "X = 1\n"}, "other: new file")
    _commit(repo, {"vllm/user.py": USER.replace("return None", "return 1")}, "user: last")

    runner = CliRunner()
    out = tmp_path / "up.json"
    res = runner.invoke(
        app, ["upstream", str(folder), "--vllm", f"git+{repo}@main", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["since"] == "v0.1.0" and report["applies"]
    assert [c["sha"] for c in report["commits"]] == [renamed]
    touches = report["commits"][0]["touches"]
    assert touches == ["vllm/lib.py:1-2 (`helper`, used by hunk 1 of 01-scale.diff)"]
    assert "lib: rename" in res.output
    # the contract warning says what the rename does to the series' call
    warnings = report["check"]["diffs"][0]["warnings"]
    assert any("passes scale= by keyword, which is no longer a parameter" in w for w in warnings)

    # a commit inside the hunk's lines is listed too (the hunk no longer applies there)
    inside = _commit(
        repo,
        {"vllm/user.py": USER.replace("return None", "return 1").replace("b = 2", "b = 3")},
        "user: b",
    )
    res = runner.invoke(
        app, ["upstream", str(folder), "--vllm", f"git+{repo}@main", "--json", str(out)]
    )
    report = json.loads(out.read_text())
    shas = [c["sha"] for c in report["commits"]]
    assert inside in shas and renamed in shas


def test_upstream_needs_a_git_source_and_a_tag(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"vllm/__init__.py": "", "vllm/user.py": USER}, "no tags")
    folder = _series(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["upstream", str(folder), "--vllm", "0.1.0"])
    assert res.exit_code == 2 and "git+URL@REF" in res.output
    res = runner.invoke(app, ["upstream", str(folder), "--vllm", f"git+{repo}@main"])
    assert res.exit_code == 2 and "no release tag" in res.output
    _git(repo, "tag", "v0.0.1")
    res = runner.invoke(
        app, ["upstream", str(folder), "--vllm", f"git+{repo}@main", "--since", "9.9.9"]
    )
    assert res.exit_code == 2 and "--since 9.9.9: no tag v9.9.9" in res.output
    assert "Traceback" not in res.output


def test_scheduled_workflow_runs_upstream_against_main() -> None:
    # read as text: the hardening rules are about the text (zizmor checks the rest)
    text = (PROJECT / ".github/workflows/upstream-main.yml").read_text()
    assert re.search(r"^on:\n  schedule:\n    - cron: ", text, re.M)
    # no write permission for the workflow as a whole: each job asks for what it needs
    assert re.search(r"^permissions: (read-all|\{\})$", text, re.M)
    assert 'bakery upstream "$SERIES" --vllm "git+$VLLM_URL@main"' in text
    uses = re.findall(r"uses: ([\w/-]+)@(\S+)", text)
    assert uses and all(re.fullmatch(r"[0-9a-f]{40}", ref) for _, ref in uses)  # pinned
    assert text.count("persist-credentials: false") == sum(a == "actions/checkout" for a, _ in uses)
    runs = re.findall(r"run: \|\n((?:          .*\n)+)|run: (.*)", text)
    assert runs and not any("${{" in "".join(r) for r in runs)  # inputs only through env:
