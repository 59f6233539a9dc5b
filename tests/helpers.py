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


# --- an upstream vLLM history of real shapes (issue 26) ------------------------------------------

#: The dcp2 series' target file, as five vLLM releases ship it (copied from the releases'
#: sdists into tests/fixtures/dsa/: real code, no download needed).
DSA = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
DSA_RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")


def dsa_file(version: str) -> str:
    return (FIXTURES / "dsa" / f"candidate_blocks-{version}.py").read_text()


def DSA_BREAK(v34: str) -> str:  # noqa: N802 (the commit that breaks the series)
    """0.34.0's _block_scores_kernel with its pinning rewritten (made up, as main would)."""
    old = (
        "        pinned = (end > start) & (blocks == (end - start - 1) // BLOCK_SIZE)\n"
        "        if not FULL_WIDTH:\n"
        "            pinned |= reduced != reduced\n"
        '        reduced = tl.where(pinned, float("inf"), reduced)\n'
    )
    new = (
        "        newest = blocks == (end - start - 1) // BLOCK_SIZE\n"
        "        nan_block = (reduced != reduced) & (not FULL_WIDTH)\n"
        '        reduced = tl.where(((end > start) & newest) | nan_block, float("inf"), reduced)\n'
    )
    assert old in v34
    return v34.replace(old, new)


def _dsa_steps() -> list[tuple[str, str | None, str]]:
    """(subject, tag or None, file content) of each commit, oldest first: the five
    releases' files, and between them made-up commits of the shapes upstream makes (a
    comment, a renamed parameter, a reordering, one kernel rewritten)."""
    v30, v31, v32, v33, v34 = (dsa_file(v) for v in DSA_RELEASES)
    flags = v30[v30.index("@triton.jit", v30.index("def _store_candidates_kernel")) :]
    flags = flags[: flags.index("@triton.jit", 10)]
    reordered = v30.replace(flags, "")
    at = reordered.index("def select_candidate_blocks(")
    reordered = reordered[:at] + flags + reordered[at:]
    return [
        ("vLLM 0.30.0", "v0.30.0", v30),
        ("dsa: a note on padding", None, v30 + "\n# -inf denotes padding.\n"),
        (
            "dsa: rename _max_with_nan's arguments",
            None,
            v30.replace(
                "def _max_with_nan(a, b):\n    return tl.maximum(a, b,",
                "def _max_with_nan(lhs, rhs):\n    return tl.maximum(lhs, rhs,",
            ),
        ),
        ("dsa: move _candidate_flags_kernel next to its caller", None, reordered),
        ("vLLM 0.31.0", "v0.31.0", v31),
        ("dsa: keep 0.31.0's fused top-k, simpler", None, v31 + "\n# ROCm: fused top-k.\n"),
        ("vLLM 0.32.0", "v0.32.0", v32),
        ("vLLM 0.33.0", "v0.33.0", v33),
        ("dsa: a note before score_dtype", None, v33 + "\n# score_dtype next.\n"),
        ("vLLM 0.34.0", "v0.34.0", v34),
        ("dsa: a note after 0.34.0", None, v34 + "\n# main.\n"),
        ("dsa: rewrite _block_scores_kernel's pinning", None, DSA_BREAK(v34) + "\n# main.\n"),
        ("dsa: a typo", None, DSA_BREAK(v34) + "\n# main!\n"),
        ("dsa: move the kernels to blocks.py", "moved", DSA_BREAK(v34) + "\n# main!\n"),
    ]


def dsa_tree(content: str, version: str | None = None) -> dict[str, str]:
    """The files of a small vLLM tree whose DSA kernel file is content."""
    files = {"setup.py": "", "vllm/__init__.py": "", DSA: content}
    if version is not None:
        files["PKG-INFO"] = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    return files


def dsa_history(root: Path, *, fillers: int = 0) -> list[tuple[str, str]]:
    """A local upstream repository (main) of real shapes; (commit, subject) oldest first.
    Release commits are tagged vX.Y.Z. ``fillers`` commits touching another file are put
    after the 0.30.0 tag (a longer history for bisect's benchmark)."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    out = []
    for subject, tag, content in _dsa_steps():
        if tag == "moved":  # the file moves: the series' hunks find no file to patch
            git(root, "mv", DSA, DSA.replace("candidate_blocks.py", "blocks.py"))
            tag = None
        else:
            write_files(root, dsa_tree(content))
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", subject)
        if tag:
            git(root, "tag", tag)
        out.append((git(root, "rev-parse", "HEAD").strip(), subject))
        for n in range(fillers if tag == "v0.30.0" else 0):
            write_files(root, {"vllm/notes.py": f"N = {len(out)}_{n}\n"})
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", f"notes {len(out)}.{n}")
            out.append((git(root, "rev-parse", "HEAD").strip(), f"notes {len(out)}.{n}"))
    return out


def cache_dsa_releases(*versions: str) -> None:
    """The releases' small trees in bakery's cache, as bakery would hold them."""
    for v in versions or DSA_RELEASES:
        files = dsa_tree(dsa_file(v), v)
        files.pop("setup.py")
        cache_release(v, files)


def dsa_series(home: Path, *, ports: bool = True, tests: str | None = None) -> Path:
    """launcher/dsa: the real dcp2 diff on its base 0.30.0, with the real 0.31.0/0.33.0/
    0.34.0 ports in patches/dsa/ (ports=True), and tests/ when given."""
    diff = next((PROJECT / "launcher" / "dcp2" / "diffs").glob("*.diff"))
    folder = make_series(
        home,
        "dsa",
        {diff.name: diff.read_bytes()},
        'base = "0.30.0"\nroot = "vllm"\nstrip = 1\n',
    )
    if ports:
        for port in (PROJECT / "patches" / "dcp2").iterdir():
            if port.is_dir():
                dest = home / "patches" / "dsa" / port.name
                dest.mkdir(parents=True)
                for f in [*port.glob("*.diff"), *port.glob("FROM.toml")]:
                    shutil.copyfile(f, dest / f.name)  # FROM.toml: made from the same diff
    if tests is not None:
        write_files(folder / "tests", {"test_dsa.py": tests})
    return folder
