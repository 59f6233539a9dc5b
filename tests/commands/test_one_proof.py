"""One proof for one content (issue 45, trial finding 5): a verify that passed on exactly
this content, by whichever path ran it, makes that content ``verified`` for every later
command that reports a tree's proof, and they all say the same.

Each case verifies a tiny series one way (``bakery verify``, ``matrix --verify``, ``ci
verify``, ``wheel``'s own verify, ``port --update``'s proof of the carried port), then asks
``apply``, ``check`` and ``matrix`` (without ``--verify``) in JSON. Before the one proof:
``check`` planned in memory and never read a verdict, ``matrix`` baked into its own folder
(another manifest, so another digest), ``matrix --verify`` ran ``-q`` and recorded nothing,
and ``port --update`` verified a tree whose manifest named the scratch port, then recorded
nothing. The releases are real sdists and wheels from a local index; the tests run under
the interpreter in bakery's own environment.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.cli.app import app
from tests.support.archives import record_hash, sdist
from tests.support.index import serve_index
from tests.support.pick import TESTS, A, K, udiff
from tests.support.repos import git
from tests.support.series import X_PY
from tests.support.trees import write_files

#: each case bakes and verifies real trees
pytestmark = pytest.mark.slow

K_BASE = (
    "def pick(xs, k):\n    ys = sorted(xs)\n    return ys[:k]\n\n\n"
    "def size(xs):\n    return len(xs)\n"
)
K_OURS = K_BASE.replace("def pick(xs, k):", "def pick(xs, k, *, rev=False):").replace(
    "sorted(xs)", "sorted(xs, reverse=rev)"
)
#: the next release changed the line diff 02 changes: it needs a port
K_THEIRS = K_BASE.replace("def pick(xs, k):", "def pick(xs, k, key=None):").replace(
    "sorted(xs)", "sorted(xs, key=key)"
)


def _wheel(version: str, modules: dict[str, str]) -> bytes:
    """The release's manylinux wheel: the sdist's vllm/ files and a binary."""
    info = f"vllm-{version}.dist-info"
    members = {
        "vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "vllm/x.py": X_PY.encode(),
        **{f"vllm/pkg/m{i:03d}.py": f"VALUE = {i}\n".encode() for i in range(2)},
        **{k: v.encode() for k, v in modules.items()},
        "vllm/_C.abi3.so": b"\x7fELF binary",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-linux_x86_64\n"
        ),
    }
    text = io.StringIO()
    rows = [(n, record_hash(d), len(d)) for n, d in members.items()]
    csv.writer(text, lineterminator="\n").writerows([*rows, (f"{info}/RECORD", "", "")])
    members[f"{info}/RECORD"] = text.getvalue().encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def _ok(*args: str) -> Result:
    res = _cli(*args)
    assert res.exit_code == 0, f"bakery {' '.join(args)}:\n{res.output}"
    return res


@pytest.fixture
def home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A series of two diffs over 1.0.0 (the project a git repository) and two releases."""
    write_files(
        home / "launcher" / "s",
        {
            "series.toml": 'base = "1.0.0"\nstrip = 1\nroot = ""\n',
            "diffs/01-a.diff": udiff(A, "A = 1\n", "A = 2\n"),
            "diffs/02-rev.diff": udiff(K, K_BASE, K_OURS),
            "tests/test_k.py": TESTS,
        },
    )
    write_files(home, {".gitignore": "build/\n*.json\n"})
    git(home, "init", "-q")
    git(home, "add", "-A")
    git(home, "commit", "-qm", "the series")
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        for version, k in (("1.0.0", K_BASE), ("1.1.0", K_THEIRS)):
            modules = {K: k, A: "A = 1\n"}
            idx.add(f"vllm-{version}.tar.gz", sdist(version, files=2, modules=modules))
            wheel = f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
            idx.add(wheel, _wheel(version, modules))
        yield home


def proofs(vllm: str) -> dict[str, str]:
    """The proof state apply, check and matrix (no --verify) give the same content."""
    _ok("apply", "s", "--vllm", vllm, "--json", "apply.json")
    _ok("check", "s", "--vllm", vllm, "--json", "check.json")
    _ok("matrix", "s", "--vllm", vllm, "--json", "matrix.json", "--jobs", "1")
    (row,) = json.loads(Path("matrix.json").read_text())["releases"]
    return {
        "apply": json.loads(Path("apply.json").read_text())["proof"]["state"],
        "check": json.loads(Path("check.json").read_text())["proof"]["state"],
        "matrix": row["proof"]["state"],
    }


def by_verify(home: Path) -> str:
    _ok("apply", "s")
    _ok("verify", "s", "--interpret")
    return "1.0.0"


def by_matrix_verify(home: Path) -> str:
    _ok("matrix", "s", "--vllm", "1.0.0", "--verify", "--interpret", "--jobs", "1")
    return "1.0.0"


def by_ci_verify(home: Path) -> str:
    _ok("ci", "bake", "s", "--vllm", "1.0.0")
    res = _ok("ci", "verify", "s", "--vllm", "1.0.0")
    # its last line is the check step's: the verdict the verify step just recorded
    last = res.output.strip().splitlines()[-1]
    assert "verified" in last and "unverified" not in last, res.output
    return "1.0.0"


def by_wheel(home: Path) -> str:
    res = _ok("wheel", "s", "--vllm", "1.0.0", "--interpret", "--out", "dist")
    assert list(Path("dist").glob("*.whl")), res.output
    return "1.0.0"


def by_port_update(home: Path) -> str:
    _ok("port", "s", "--vllm", "1.1.0", "--interpret")
    git(home, "add", "-A")
    git(home, "commit", "-qm", "the port")
    # the series changes diff 01 (a file 1.1.0 did not change): the port is stale
    (home / "launcher/s/diffs/01-a.diff").write_text(udiff(A, "A = 1\n", "A = 2\nB = 3\n"))
    git(home, "commit", "-qam", "a fix to 01")
    _ok("port", "s", "--update", "--vllm", "1.1.0", "--interpret")
    assert "B = 3" in (home / "patches/s/1.1.0/01-a.diff").read_text()
    return "1.1.0"


WAYS: dict[str, Callable[[Path], str]] = {
    "verify": by_verify,
    "matrix --verify": by_matrix_verify,
    "ci verify": by_ci_verify,
    "wheel": by_wheel,
    "port --update": by_port_update,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_verify_by_any_path_makes_the_content_verified_for_every_command(
    way: str, home: Path
) -> None:
    vllm = WAYS[way](home)
    assert proofs(vllm) == dict.fromkeys(("apply", "check", "matrix"), "verified")


def test_every_command_says_unverified_before_a_verify_and_after_the_content_changes(
    home: Path,
) -> None:
    unverified = dict.fromkeys(("apply", "check", "matrix"), "unverified")
    assert proofs("1.0.0") == unverified
    by_verify(home)
    assert proofs("1.0.0") == dict.fromkeys(("apply", "check", "matrix"), "verified")
    # the same series with one more line: other content, no verdict for it yet
    (home / "launcher/s/diffs/01-a.diff").write_text(udiff(A, "A = 1\n", "A = 2\nB = 3\n"))
    assert proofs("1.0.0") == unverified


def test_a_failed_verify_makes_the_content_failed_for_every_command(home: Path) -> None:
    (home / "launcher/s/diffs/01-a.diff").write_text(udiff(A, "A = 1\n", "A = 3\n"))
    _ok("apply", "s")
    assert _cli("verify", "s", "--interpret").exit_code == 1
    failed = proofs("1.0.0")
    # apply keeps a failed verdict; check and matrix say the same for the same content
    assert failed == dict.fromkeys(("apply", "check", "matrix"), "failed")


def test_check_names_the_content_of_a_local_tree_it_plans_as_apply_writes_it(
    home: Path, tmp_path: Path
) -> None:
    """A local tree (no git) is copied whole by the bake: check's planned content is it."""
    local = tmp_path / "vllm-src"
    write_files(
        local,
        {"vllm/__init__.py": '__version__ = "1.0.0"\n', K: K_BASE, A: "A = 1\n", "setup.py": ""},
    )
    _ok("apply", "s", "--vllm", str(local))
    assert proofs(str(local)) == dict.fromkeys(("apply", "check", "matrix"), "unverified")
    _ok("verify", "s", "--interpret")
    assert proofs(str(local)) == dict.fromkeys(("apply", "check", "matrix"), "verified")
    # a file the series does not touch is content too
    (local / "setup.py").write_text("# changed\n")
    assert proofs(str(local)) == dict.fromkeys(("apply", "check", "matrix"), "unverified")
