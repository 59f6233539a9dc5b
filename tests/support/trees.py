"""Trees on disk: files written under a folder, a digest and a snapshot of everything
under one, the tiny vLLM-like tree and its series of three diffs, and a release put into
bakery's cache as bakery would after downloading it."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.series import make_series, udiff

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


def files_under(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            yield Path(dirpath, n)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root with what it is (a file's sha256, a link's target, a
    folder): two snapshots are equal only when nothing under root changed."""
    out: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = Path(dirpath, n)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "special"
    return out


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
