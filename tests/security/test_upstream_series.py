"""Class 13: ``bakery upstream`` on a valid series of two diffs to one file.

A second diff's line numbers are those of the file after the first; the upstream file
at REF has neither. Each hunk's lines are mapped back through the earlier diffs' landed
hunks before git follows them (``git log -L``): no ``fatal: file has only N lines``, and
a commit touching the lines the second diff patches is listed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from bakery.cli.app import app
from bakery.commands.upstream import _back
from bakery.git import cmd as gitutil
from bakery.sources.cache import Cache
from tests.support.repos import GIT_ENV

X = "".join(f"line{i}\n" for i in range(1, 11))  # 10 lines
HEADER = "".join(f"# header {i}\n" for i in range(1, 21))  # 20 lines
ONE = HEADER + X
TWO = ONE.replace("line8\n", "line8 = patched\n")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _commit(repo: Path, text: str, message: str) -> str:
    (repo / "vllm").mkdir(exist_ok=True)
    (repo / "vllm" / "__init__.py").write_text("")
    (repo / "vllm" / "x.py").write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _udiff(a: str, b: str) -> str:
    import difflib

    return "".join(
        difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a/vllm/x.py", "b/vllm/x.py")
    )


def test_back_maps_through_earlier_hunks() -> None:
    # an earlier diff inserted 20 lines before line 1 (its hunk: out 1..20+1, in 1)
    earlier = [[(1, 21, 1, 1)]]
    assert _back(28, earlier) == 8
    assert _back(5, earlier) == 1  # inside what it wrote: its own first line
    assert _back(3, []) == 3


def test_upstream_two_diffs_to_one_file(tmp_path: Path) -> None:
    repo = tmp_path / "up"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, X, "release")
    _git(repo, "tag", "v0.1.0")
    cache = Cache()
    with cache.lock("vllm-0.1.0"), cache.building("vllm-0.1.0") as tmp:
        top = tmp / "tree"
        (top / "vllm").mkdir(parents=True)
        (top / "vllm" / "__init__.py").write_text("")
        (top / "vllm" / "x.py").write_text(X)
        gitutil.init_commit_all(top, "pristine vLLM 0.1.0")
        cache.commit_tree(
            "vllm-0.1.0", top, {"source": "test", "sha256": "0" * 64, "version": "0.1.0"}
        )
    folder = tmp_path / "series"
    (folder / "diffs").mkdir(parents=True)
    (folder / "series.toml").write_text('base = "0.1.0"\nroot = ""\nstrip = 1\n')
    (folder / "diffs" / "01-header.diff").write_text(_udiff(X, ONE))
    (folder / "diffs" / "02-patch.diff").write_text(_udiff(ONE, TWO))
    # upstream changes line 8 and changes it back: the series applies at REF, and both
    # commits touched the lines the second diff patches
    near = _commit(repo, X.replace("line8\n", "line8 = upstream\n"), "upstream: line 8")
    back = _commit(repo, X, "upstream: line 8 back")
    out = tmp_path / "up.json"
    res = CliRunner().invoke(
        app, ["upstream", str(folder), "--vllm", f"git+{repo}@main", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "fatal" not in res.output and "only" not in res.output
    report = json.loads(out.read_text())
    assert report["applies"]
    regions = report["regions"]
    assert any(r.startswith("vllm/x.py:") and "02-patch.diff" in r for r in regions), regions
    (second,) = [r for r in regions if "02-patch.diff" in r]
    first_line = int(second.split(":", 1)[1].split("-", 1)[0])
    assert first_line <= 10  # a line of the upstream file, not of the file after diff 1
    shas = [c["sha"] for c in report["commits"]]
    assert near in shas and back in shas
