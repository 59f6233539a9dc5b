"""``bakery upstream`` on real vLLM code, offline: a local repository whose history is the
releases themselves (from bakery's cache), tagged up to one release and left untagged
after it, as vLLM's main branch is between two releases.

    python bench/upstream_replay.py [SERIES] [--tagged 0.30.0 0.31.0 0.32.0]
                                    [--main 0.33.0 0.34.0] [--repo DIR]

The repository is built in DIR (default: a temporary folder) from the cached release
trees (read, never changed; ``PKG-INFO`` left out, as in vLLM's git), then
``bakery upstream SERIES --vllm git+DIR@main`` runs in this process and its JSON report is
printed: the series checked at the newest "main" commit, and the commits since the last
tag that touched the series' hunks or contract names.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bakery.commands import upstream
from bakery.context import Context
from bakery.sources.cache import Cache
from bakery.sources.resolve import release

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "replay",
    "GIT_AUTHOR_EMAIL": "replay@localhost",
    "GIT_COMMITTER_NAME": "replay",
    "GIT_COMMITTER_EMAIL": "replay@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def _git(repo: Path, *args: str, work: Path | None = None) -> str:
    cmd = ["git", f"--git-dir={repo / '.git'}"]
    if work is not None:
        cmd.append(f"--work-tree={work}")
    return subprocess.run(
        [*cmd, *args], env=ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


def build(repo: Path, tagged: list[str], main: list[str]) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], env=ENV, check=True)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("/PKG-INFO\n")
    cache = Cache()
    for v in [*tagged, *main]:
        tree = release(v, cache)
        tree.confirm()
        # the cached tree is the work tree, read only: git add records it, never writes it
        _git(repo, "add", "-A", ".", work=tree.tree)
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"vLLM {v}", work=tree.tree)
        if v in tagged:
            _git(repo, "tag", f"v{v}")
        print(f"committed {v}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("series", nargs="?", default="dcp2")
    ap.add_argument("--tagged", nargs="+", default=["0.30.0", "0.31.0", "0.32.0"])
    ap.add_argument("--main", nargs="+", default=["0.33.0", "0.34.0"])
    ap.add_argument("--repo", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bakery-replay-") as tmp:
        repo = args.repo or Path(tmp) / "vllm"
        if not (repo / ".git").is_dir():
            build(repo, args.tagged, args.main)
        result = upstream.upstream(Context.here(), args.series, f"git+{repo}@main")
        out = result.to_json()
        out.pop("check")
        out["warnings"] = [w for d in result.check.diffs for w in d.warnings]
        out["outcomes"] = [
            f"{f.path}: hunk {h.index}: {h.status.value}"
            for d in result.check.diffs
            for f in d.files
            for h in f.hunks
        ]
        json.dump(out, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
