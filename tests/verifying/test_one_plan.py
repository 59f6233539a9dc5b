"""Every command path that runs a series' tests runs them the one way the verify plan
says (issue 44): in the series' own test environment.

The series here asks for ``env = "full"``, and one of its tests imports
``vllm.sampling_params``, whose module needs ``vllm/__init__.py`` to have run: true only in
the full environment (the light loader never runs a package's ``__init__.py``). So each
path passes only where it ran the tests in the full environment; on the code before the
plan, ``port --update``, ``--promote``, ``bisect --verify`` and ``verify --pristine`` ran
them in the light one and failed. The full environment is real (a virtual environment
layered on bakery's, built once for the module: the release asks only for torch); the
releases come from a local index and two local upstream histories.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.cli.app import app
from tests.support.archives import sdist
from tests.support.index import serve_index
from tests.support.pick import A_BASE, K_BASE, K_OURS, K_THEIRS, A, K, udiff
from tests.support.repos import git
from tests.support.trees import write_files

#: each path builds or proves and verifies real trees
pytestmark = pytest.mark.slow

SP, REQS = "vllm/sampling_params.py", "requirements/common.txt"
#: importable only where vllm/__init__.py ran: the full environment
SAMPLING = """\
import vllm

if not hasattr(vllm, "__version__"):
    raise ImportError("vllm/__init__.py did not run: not the full environment")


class SamplingParams:
    n = 1
"""
TESTS = """\
from bakery.testing import load_tree_module

k = load_tree_module("vllm.k")
a = load_tree_module("vllm.a")


def test_rev():
    assert k.pick([3, 1, 2], 2, rev=True) == [3, 2]


def test_a():
    assert a.A == 2


def test_size():
    assert k.size([1, 2]) == 2


def test_sampling_params_in_the_full_environment():
    sp = load_tree_module("vllm.sampling_params")
    assert sp.SamplingParams.n == 1
"""
TOML = 'base = "1.0.0"\nstrip = 1\nroot = ""\nenv = "full"\n'


def _modules(k: str) -> dict[str, str]:
    return {K: k, A: A_BASE, SP: SAMPLING, REQS: "torch\n"}


def _history(root: Path, version: str, k: str) -> dict[str, str]:
    """An upstream repository: the release (tagged), a commit of notes, then a commit
    that breaks ``size``; their ids by name."""
    files = {
        **_modules(k),
        "vllm/__init__.py": f'__version__ = "{version}"\n',
        "pyproject.toml": '[project]\nname = "vllm"\n',
    }
    write_files(root, files)
    git(root, "init", "-q")
    ids = {}
    for name, change in (
        ("release", {}),
        ("notes", {"vllm/notes.py": "N = 1\n"}),
        ("break", {K: k.replace("return len(xs)", "return len(xs) + 1")}),
    ):
        write_files(root, change)
        git(root, "add", "-A")
        git(root, "commit", "-qm", name)
        if name == "release":
            git(root, "tag", f"v{version}")
        ids[name] = git(root, "rev-parse", "HEAD").strip()
    return ids


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (and seal key) for the module: the full environment is built once."""
    return tmp_path_factory.mktemp("one-plan")


@pytest.fixture
def project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: Path
) -> Iterator[tuple[Path, dict[str, str], dict[str, str]]]:
    monkeypatch.setenv("BAKERY_CACHE_DIR", str(shared / "cache"))
    monkeypatch.setenv("BAKERY_CONFIG_DIR", str(shared / "config"))
    home = tmp_path / "home"
    series = home / "launcher" / "s"
    write_files(
        series,
        {
            "series.toml": TOML,
            "diffs/01-a.diff": udiff(A, A_BASE, "A = 2\n"),
            "diffs/02-rev.diff": udiff(K, K_BASE, K_OURS),
            "tests/test_k.py": TESTS,
        },
    )
    write_files(home, {".gitignore": "build/\n*.json\n"})
    git(home, "init", "-q")
    git(home, "add", "-A")
    git(home, "commit", "-qm", "the series")
    base = _history(tmp_path / "up-1.0", "1.0.0", K_BASE)
    theirs = _history(tmp_path / "up-1.1", "1.1.0", K_THEIRS)
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add("vllm-1.0.0.tar.gz", sdist("1.0.0", files=2, modules=_modules(K_BASE)))
        idx.add("vllm-1.1.0.tar.gz", sdist("1.1.0", files=2, modules=_modules(K_THEIRS)))
        yield home, base, theirs


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def _ok(*args: str) -> Result:
    res = _cli(*args)
    assert res.exit_code == 0, f"bakery {' '.join(args)}:\n{res.output}"
    return res


Project = tuple[Path, dict[str, str], dict[str, str]]


def verify(p: Project) -> None:
    _ok("apply", "s")
    _ok("verify", "s", "--interpret", "--no-reuse")


def verify_pristine(p: Project) -> None:
    _ok("apply", "s")
    res = _ok("verify", "s", "--interpret", "--pristine")
    assert "pass only on the baked tree" in res.output


def matrix_verify(p: Project) -> None:
    _ok("matrix", "s", "--vllm", "1.0.0", "--verify", "--interpret", "--json", "m.json")
    (row,) = json.loads(Path("m.json").read_text())["releases"]
    assert row["verify"] == "passed", row


def port(p: Project) -> None:
    res = _ok("port", "s", "--vllm", "1.1.0", "--interpret")
    assert (p[0] / "patches" / "s" / "1.1.0" / "02-rev.diff").is_file(), res.output


def port_update(p: Project) -> None:
    home = p[0]
    _ok("port", "s", "--vllm", "1.1.0", "--interpret")
    git(home, "add", "-A")
    git(home, "commit", "-qm", "the port")
    # the series changes diff 01 (a file the release did not change): the port is stale
    (home / "launcher/s/diffs/01-a.diff").write_text(udiff(A, A_BASE, "A = 2\nB = 3\n"))
    git(home, "commit", "-qam", "a fix to 01")
    _ok("port", "s", "--update", "--vllm", "1.1.0", "--interpret")
    assert "B = 3" in (home / "patches/s/1.1.0/01-a.diff").read_text()


def port_ref_and_promote(p: Project) -> None:
    home, _, theirs = p
    up = home.parent / "up-1.1"
    _ok("port", "s", "--vllm", f"git+file://{up}@{theirs['notes']}", "--interpret")
    assert (home / "patches/s/next").is_dir()
    # the release is another tree than the commit (no notes.py): proven again on it
    res = _ok("port", "s", "--promote", "1.1.0", "--interpret")
    assert (home / "patches/s/1.1.0").is_dir(), res.output


def bisect_verify(p: Project) -> None:
    home, base, _ = p
    up = home.parent / "up-1.0"
    res = _ok(
        "bisect", "s", "--vllm", f"git+file://{up}", "--good", base["release"],
        "--bad", base["break"], "--verify", "--interpret", "--json", "b.json",
    )  # fmt: skip
    culprit = json.loads(Path("b.json").read_text())["culprit"]
    assert culprit["commit"] == base["break"], res.output


def mutants(p: Project) -> None:
    from bakery.verifying.mutants import main as run_mutants

    home = p[0]
    _ok("apply", "s")
    series = home / "launcher" / "s"
    write_files(
        series,
        {
            "mutants.toml": 'file = "vllm/a.py"\n\n[[mutant]]\nname = "comment"\n'
            'old = "A = 2"\nnew = "A = 2  # a comment"\nsurvives = "a comment"\n'
        },
    )
    # survives (with its reason) only where every test passed: the full environment
    assert run_mutants([str(series), "--tree", str(home / "build" / "s-1.0.0")]) == 0


PATHS: dict[str, Callable[[Project], None]] = {
    f.__name__: f
    for f in (
        verify,
        verify_pristine,
        matrix_verify,
        port,
        port_update,
        port_ref_and_promote,
        bisect_verify,
        mutants,
    )
}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_runs_the_series_tests_in_its_environment(path: str, project: Project) -> None:
    PATHS[path](project)
