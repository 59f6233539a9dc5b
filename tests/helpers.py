"""Helpers for bakery's tests: tiny trees, local git repos, series folders, sample diffs,
GNU patch. Fixtures are in conftest.py; tests import these from here."""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: The project's own root (holds launcher/ and patches/); some tests need its real series.
PROJECT = Path(__file__).resolve().parents[1]
SAMPLES = Path(__file__).resolve().parent / "samples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Read at import, before any test changes HOME (conftest imports this module).
TEST_CACHE = Path(
    os.environ.get("BAKERY_TEST_CACHE") or Path.home() / ".cache" / "bakery-tests"
).expanduser()

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


# --- trees, repos, series ----------------------------------------------------------------------

Files = Mapping[str, "str | bytes | tuple[str | bytes, int]"]


def write_files(root: Path, files: Files) -> Path:
    """Write files under root; a value is the content, or (content, mode)."""
    for rel, value in files.items():
        content, mode = value if isinstance(value, tuple) else (value, 0o644)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        path.chmod(mode)
    return root


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


def make_series(
    home: Path, name: str, diffs: Mapping[str, str | bytes], toml: str | None = None
) -> Path:
    """launcher/<name>/ with diffs/ (and series.toml when given)."""
    folder = home / "launcher" / name
    (folder / "diffs").mkdir(parents=True)
    for fname, text in diffs.items():
        data = text.encode() if isinstance(text, str) else text
        (folder / "diffs" / fname).write_bytes(data)
    if toml is not None:
        (folder / "series.toml").write_text(toml)
    return folder


def cache_release(version: str, files: Mapping[str, str]) -> None:
    """Put release ``version`` of vLLM into bakery's cache (BAKERY_CACHE_DIR), as bakery
    would after downloading it: bakes of that version need no index."""
    from bakery.git import cmd as gitutil
    from bakery.sources.cache import Cache

    cache = Cache()
    key = f"vllm-{version}"
    with cache.lock(key), cache.building(key) as tmp:
        top = write_files(tmp / f"vllm-{version}", {"setup.py": "", **files})
        gitutil.init_commit_all(top, f"pristine vLLM {version}")
        cache.commit_tree(
            key,
            top,
            {"source": f"test://vllm-{version}.tar.gz", "sha256": "0" * 64, "version": version},
        )


def tree_digest(root: Path) -> str:
    """A hash of every entry under root (.git included): names, modes, contents, links."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]):
            p = Path(dirpath, name)
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(p).encode())
            else:
                h.update(p.read_bytes())
    return h.hexdigest()


def commits(tree: Path) -> list[tuple[str, str, str]]:
    """(id, subject, body) of each commit, oldest first."""
    out = git(tree, "log", "--reverse", "--format=%H%x00%s%x00%b%x01")
    rows = []
    for rec in filter(None, (r.strip("\n") for r in out.split("\x01"))):
        cid, subject, body = rec.split("\x00")
        rows.append((cid, subject, body.strip()))
    return rows


def udiff(path: str, before: str, after: str, old: str = "baked-ours", new: str = "baked") -> str:
    """A ``diff -u`` of one file, with dcp2's header prefixes by default."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"{old}/{path}",
            f"{new}/{path}",
        )
    )


KERNEL = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(1, 16))


@dataclass
class Tiny:
    """A tiny vLLM-like source tree and a series "demo" of three diffs for it."""

    src: Path
    series: Path
    #: tree-relative path -> content after the whole series (None: deleted)
    baked: dict[str, bytes | None] = field(default_factory=dict)
    diffs: list[str] = field(default_factory=list)

    def diff_path(self, i: int) -> Path:
        return self.series / "diffs" / self.diffs[i]


def make_tiny(root: Path, home: Path, toml: str | None = 'root = "vllm"\nstrip = 1\n') -> Tiny:
    src = write_files(
        root,
        {
            "README.md": "vLLM\n",
            "setup.py": "print('setup')\n",
            "vllm/__init__.py": "",
            "vllm/model_executor/k.py": KERNEL,
            "vllm/old.py": "obsolete\nstuff\n",
            "vllm/tools/run.sh": ("#!/bin/sh\necho hi\n", 0o755),
        },
    )
    step1 = KERNEL.replace("return 2\n", "return 2 + 0\n").replace(
        "def f14():\n", 'def f14():\n    """Fourteen."""\n'
    )
    step3 = step1.replace("return 2 + 0\n", "return 2 + 1\n")
    files_diff = (
        "diff --git a/model_executor/new.py b/model_executor/new.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n+++ b/model_executor/new.py\n@@ -0,0 +1,2 @@\n+NEW = 1\n+OLD = 0\n"
        "diff --git a/old.py b/old.py\n"
        "deleted file mode 100644\n"
        "--- a/old.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-obsolete\n-stuff\n"
        "diff --git a/tools/run.sh b/tools/run.sh\nold mode 100755\nnew mode 100644\n"
    )
    diffs = {
        "01-kernel.diff": udiff("model_executor/k.py", KERNEL, step1),
        "2-files.diff": files_diff,
        "10-again.diff": udiff("model_executor/k.py", step1, step3),
    }
    series = make_series(home, "demo", diffs, toml=toml)
    return Tiny(
        src,
        series,
        {
            "vllm/model_executor/k.py": step3.encode(),
            "vllm/model_executor/new.py": b"NEW = 1\nOLD = 0\n",
            "vllm/old.py": None,
        },
        list(diffs),
    )


# --- GNU patch ---------------------------------------------------------------------------------

PATCH = shutil.which("patch")
#: The oracle tests need GNU patch: skipped on a machine without it, but never in CI
#: (``CI`` set), where a missing patch must fail them rather than pass them unseen.
needs_patch = pytest.mark.skipif(
    PATCH is None and not os.environ.get("CI"), reason="GNU patch is not on PATH"
)


def gnu_patch(tree: Path, diff: Path | bytes, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``patch -p1`` in tree (no backups, no .rej files in the tree)."""
    assert PATCH is not None
    data = diff.read_bytes() if isinstance(diff, Path) else diff
    proc = subprocess.run(
        [PATCH, "-p1", "--no-backup-if-mismatch", "-r", "-", "-f", *extra],
        cwd=tree,
        input=data,
        capture_output=True,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )
