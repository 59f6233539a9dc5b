"""An upstream vLLM history of real shapes (issue 26): the dcp2 series' target file as
five releases ship it, made-up commits between them, the releases in the cache, and the
real dcp2 diff and ports as a series "dsa"."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.paths import FIXTURES, PROJECT
from tests.support.repos import git
from tests.support.series import make_series
from tests.support.trees import cache_release, write_files

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
