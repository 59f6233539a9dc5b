"""Default outputs go to the project's ``build/`` (issue 46): ``port``, ``port --update``,
``bisect`` and ``matrix`` wrote ``build/`` into whatever folder bakery was started from.

Each command runs from a folder outside the project; its scratch or output folder must
appear under ``PROJECT/build/`` and nothing under the working directory. A ``--out`` the
user names is still taken as named (relative to the working directory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.patch import provenance
from tests.support.repos import git
from tests.support.series import DIFF, X_PY
from tests.support.trees import cache_release, write_files

Cli = Callable[..., Result]
RELEASE = {"vllm/__init__.py": "", "vllm/x.py": X_PY}
# 1.1.0 lost the lines the diff changes: the series does not apply there
MOVED = {"vllm/__init__.py": "", "vllm/x.py": "".join(f"{c}\n" for c in "qrstuvwxyz")}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def project(home: Path) -> Path:
    s = home / "launcher" / "s"
    (s / "diffs").mkdir(parents=True)
    (s / "tests").mkdir()
    (s / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (s / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (s / "diffs" / "01-x.diff").write_text(DIFF)
    cache_release("1.0.0", RELEASE)
    cache_release("1.1.0", MOVED)
    return home


def _nothing_here(cwd: Path) -> None:
    assert list(cwd.iterdir()) == []


def test_matrix_writes_its_trees_under_the_project(
    cli: Cli, project: Path, elsewhere: Path
) -> None:
    r = cli("matrix", "s", "--vllm", "1.0.0")
    assert r.exit_code == 0, r.output
    assert (project / "build" / "matrix" / "s-1.0.0" / "vllm" / "x.py").is_file()
    _nothing_here(elsewhere)


def test_port_proves_its_candidates_under_the_project(
    cli: Cli, project: Path, elsewhere: Path
) -> None:
    r = cli("port", "s", "--vllm", "1.1.0")
    assert r.exit_code == 0, r.output  # proposed by a syntax merge, verified in scratch
    assert (project / "build" / "port" / "s-1.1.0" / "candidate-1" / "tree").is_dir()
    assert (project / "patches" / "s" / "1.1.0").is_dir()
    _nothing_here(elsewhere)


def test_port_update_scratch_is_under_the_project(cli: Cli, project: Path, elsewhere: Path) -> None:
    s = project / "launcher" / "s"
    port = project / "patches" / "s" / "1.1.0"
    port.mkdir(parents=True)
    (port / "01-x.diff").write_text(DIFF)
    provenance.write(port, provenance.of_series(s, "port"))
    (s / "diffs" / "01-x.diff").write_text(DIFF.replace("+B", "+BB"))  # the port is stale
    r = cli("port", "s", "--update")
    assert r.exit_code == 1, r.output
    assert (project / "build" / "port" / "s-1.1.0-update").is_dir()
    _nothing_here(elsewhere)


def test_bisect_bakes_under_the_project(
    cli: Cli, project: Path, elsewhere: Path, tmp_path: Path
) -> None:
    up = write_files(tmp_path / "up", {"setup.py": "", **RELEASE})
    git(up, "init", "-q")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "good")
    good = git(up, "rev-parse", "HEAD").strip()
    write_files(up, MOVED)
    git(up, "commit", "-qam", "bad")
    r = cli("bisect", "s", "--vllm", f"git+file://{up}", "--good", good, "--bad", "HEAD")
    assert "Traceback" not in r.output
    assert (project / "build" / "bisect" / "s").is_dir(), r.output
    _nothing_here(elsewhere)


def test_an_out_the_user_names_is_taken_as_named(cli: Cli, project: Path, elsewhere: Path) -> None:
    r = cli("matrix", "s", "--vllm", "1.0.0", "--out", "mine")
    assert r.exit_code == 0, r.output
    assert (elsewhere / "mine" / "s-1.0.0" / "vllm" / "x.py").is_file()
    assert not (project / "build").exists()
