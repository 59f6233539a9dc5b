"""Local git repositories: git run with a fixed identity and no user configuration,
a checkout of one commit, its commits read back; and traps (a command, a hook) that leave
a marker behind if anything runs them, for the checks that git never runs foreign code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.trees import Files, write_files

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2001-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2001-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    proc = subprocess.run(
        [
            "git",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "core.autocrlf=false",
            "-c",
            "safe.directory=*",
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def git_repo(root: Path, files: Files) -> Path:
    """A local git checkout holding files in one commit."""
    write_files(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "upstream")
    return root


def commits(tree: Path) -> list[tuple[str, str, str]]:
    """(id, subject, body) of each commit, oldest first."""
    out = git(tree, "log", "--reverse", "--format=%H%x00%s%x00%b%x01")
    rows = []
    for rec in filter(None, (r.strip("\n") for r in out.split("\x01"))):
        cid, subject, body = rec.split("\x00")
        rows.append((cid, subject, body.strip()))
    return rows


def trap(marker: Path) -> str:
    """A shell command that leaves marker behind if anything runs it."""
    return f"touch {marker}; false"


def hook(git_dir: Path, name: str, marker: Path) -> None:
    hooks = git_dir / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / name).chmod(0o755)
