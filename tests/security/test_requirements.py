"""The tree's requirements, as the full test environment reads them (issue 46: "Building
the full environment runs code from the index", its requirements part, and "Malformed
requirements end in three tracebacks"): only regular files inside the tree, reached
through real folders; anything else, and a file bakery cannot read as requirements, is
one line that names the file (and line), never a traceback, never the index asked, never
a secret.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import VerifyError
from bakery.sources.cache import Cache
from bakery.verifying import fullenv
from bakery.verifying import requirements as reqfiles
from tests.support.index import Server, serve
from tests.support.series import make_series, udiff
from tests.support.trees import cache_release, write_files

Cli = Callable[..., Result]
SECRET = "hunter2-secret"
OUTSIDE = f"leaked-package-name\nprivate @ https://me:{SECRET}@example.invalid/p.whl\n"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A local index that records every request: nothing may reach it."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with serve(tmp_path / "site") as srv:
        monkeypatch.setenv("BAKERY_INDEX_URL", f"{srv.url}/simple")
        yield srv


def _refused(tmp_path: Path, tree: Path, site: Server, *words: str) -> str:
    with pytest.raises(VerifyError) as err:
        fullenv.ensure(tree, cpu=True, cache=Cache(tmp_path / "cache"))
    line = str(err.value)
    assert "\n" not in line and SECRET not in line and "leaked-package-name" not in line
    for word in words:
        assert word in line, line
    assert site.seen == []  # no line of it went to the index
    return line


def test_a_requirements_file_linked_out_of_the_tree_is_refused(
    tmp_path: Path, site: Server
) -> None:
    (tmp_path / "outside.txt").write_text(OUTSIDE)
    tree = write_files(tmp_path / "tree", {"requirements/cpu.txt": "regex\n"})
    (tree / "requirements" / "common.txt").symlink_to(tmp_path / "outside.txt")
    _refused(tmp_path, tree, site, "requirements/common.txt", "symbolic link")


def test_a_nested_file_linked_out_of_the_tree_is_refused(tmp_path: Path, site: Server) -> None:
    (tmp_path / "outside.txt").write_text(OUTSIDE)
    tree = write_files(tmp_path / "tree", {"requirements/common.txt": "regex\n-r cuda.txt\n"})
    (tree / "requirements" / "cuda.txt").symlink_to(tmp_path / "outside.txt")
    _refused(tmp_path, tree, site, "requirements/cuda.txt", "symbolic link")


def test_a_linked_requirements_folder_is_refused(tmp_path: Path, site: Server) -> None:
    write_files(tmp_path / "elsewhere", {"common.txt": OUTSIDE})
    tree = write_files(tmp_path / "tree", {"vllm/__init__.py": ""})
    (tree / "requirements").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    _refused(tmp_path, tree, site, "requirements/common.txt", "a folder on its way is a link")


def test_a_fifo_is_not_read(tmp_path: Path, site: Server) -> None:
    tree = write_files(tmp_path / "tree", {"requirements/cpu.txt": "regex\n"})
    os.mkfifo(tree / "requirements" / "common.txt")
    _refused(tmp_path, tree, site, "requirements/common.txt", "not a regular file")


MALFORMED: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "odd marker": (
        (
            f"regex\nprivate @ https://me:{SECRET}@example.invalid/p.whl "
            '; python_version ~= "abc"\n'
        ).encode(),
        ("requirements/common.txt:2", "a marker bakery cannot evaluate"),
    ),
    "not UTF-8": (b"regex\nmsg\xffspec\n", ("requirements/common.txt", "not UTF-8 (byte 9)")),
    "missing -r file": (
        b"regex\n-r nope.txt\n",
        ("requirements/common.txt:2", "-r nope.txt: no such file in the tree"),
    ),
    "-r out of the folder": (
        b"-r ../../outside.txt\n",
        ("requirements/common.txt:1", "leaves the requirements folder"),
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_requirements_file_is_one_line(tmp_path: Path, site: Server, case: str) -> None:
    data, words = MALFORMED[case]
    (tmp_path / "outside.txt").write_text(OUTSIDE)
    tree = write_files(tmp_path / "tree", {"requirements/common.txt": data})
    _refused(tmp_path, tree, site, *words)


def test_lines_bakery_does_not_install_are_left_out_with_why(tmp_path: Path) -> None:
    """What is not an error: index options, a URL, a line packaging does not read."""
    tree = write_files(
        tmp_path / "tree",
        {
            "requirements/common.txt": (
                "--index-url https://example.invalid/simple\nregex\n"
                "pkg @ https://example.invalid/p.whl\nnot a requirement!\n"
            )
        },
    )
    reqs = reqfiles.requirements(tree, cpu=False)
    assert reqs.kept == ["regex"]
    assert reqs.dropped["pkg @ https://example.invalid/p.whl"].startswith("a direct URL")
    assert reqs.dropped["not a requirement!"].startswith("not a requirement bakery reads")


# --- through the CLI: one line, exit 2, no traceback ---------------------------------------------


@pytest.mark.parametrize("case", ["odd marker", "not UTF-8", "missing -r file"])
def test_verify_says_one_line_for_a_malformed_file(
    cli: Cli, home: Path, tmp_path: Path, site: Server, case: str
) -> None:
    mod = "VALUE = 1\n"
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/mod.py": mod})
    series = make_series(
        home,
        "s",
        {"01-value.diff": udiff("mod.py", mod, "VALUE = 2\n")},
        'root = "vllm"\nstrip = 1\n',
    )
    write_files(series / "tests", {"test_t.py": "def test_t():\n    pass\n"})
    r = cli("apply", "s", "--vllm", "1.0.0")
    assert r.exit_code == 0, r.output
    write_files(home / "build" / "s-1.0.0", {"requirements/common.txt": MALFORMED[case][0]})
    r = cli("verify", "s", "--env", "full", "--interpret", "--no-reuse")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert "Traceback" not in r.output and SECRET not in r.output
    assert [ln for ln in lines if MALFORMED[case][1][1] in ln], r.output
    assert site.seen == []
