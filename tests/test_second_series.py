"""A second series, made from nothing the way another team would make it (issue 24).

Through the CLI only: ``bakery init myteam --vllm 0.32.0``; three diffs against vLLM
0.32.0 (a new field in ``vllm/sampling_params.py`` made by ``refresh --new-diff``, a new
file and a deleted file made by GNU ``diff -uN``); a bundled test that imports
``vllm.sampling_params`` from the baked tree in the full environment and checks the new
field. Then: apply on the base, verify, check on two other releases, matrix, refresh of
the base tree (and the command it prints), a port, and the same baked bytes from a
``git diff`` copy of the series (and from a CRLF copy, once issue 24 part A is merged).

The full environment (vLLM 0.32.0's requirements, about 0.9 GB) is built once per test
cache (``full_env`` below, in ~/.cache/bakery-tests/envs), then reused offline.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.paths import TEST_CACHE
from tests.support.repos import git

pytestmark = [pytest.mark.network, pytest.mark.slow]

BASE = "0.32.0"
OTHERS = ("0.31.0", "0.33.0")
SAMPLING = "vllm/sampling_params.py"
NEW_FILE = "vllm/myteam_ext.py"
NEW_TEXT = '"""myteam\'s extension (the second series\' new file)."""\n\nBUDGET_UNIT = 16\n'
GONE = "vllm/tool_parsers/granite_engine_tool_parser.py"
FIELD_AFTER = (
    "    ignore_eos: bool = False\n"
    '    """Whether to ignore the EOS token and continue generating\n'
    '    tokens after the EOS token is generated."""\n'
)
FIELD = (
    '    myteam_budget: int = 0\n    """Tokens myteam may spend (the second series\' field)."""\n'
)

SERIES_TEST = '''\
"""myteam's own test: the field its first diff adds, from the baked tree."""

from pathlib import Path

from bakery.testing import load_tree_module


def test_the_new_field() -> None:
    sampling_params = load_tree_module("vllm.sampling_params")
    assert sampling_params.SamplingParams().myteam_budget == 0
    assert sampling_params.SamplingParams(myteam_budget=7).myteam_budget == 7


def test_the_new_file_and_the_deleted_one(baked_tree: Path) -> None:
    assert load_tree_module("vllm.myteam_ext").BUDGET_UNIT == 16
    assert not (baked_tree / "{gone}").exists()
'''.replace("{gone}", GONE)

Cli = Callable[..., Result]


@pytest.fixture(scope="session")
def full_env() -> object:
    """vLLM 0.32.0's full test environment, built once into the persistent test cache."""
    from bakery.sources.cache import Cache
    from bakery.sources.resolve import release
    from bakery.verifying import fullenv

    cache = Cache(TEST_CACHE)
    pristine = release(BASE, cache)
    try:
        return fullenv.ensure(pristine.tree, cpu=True, cache=cache)
    finally:
        pristine.close()


@pytest.fixture(autouse=True)
def _cleanup(home: Path) -> Iterator[None]:
    """Baked vLLM trees are large: removed afterwards, not left to tmp_path's rotation."""
    yield
    for folder in ("build", "work"):
        shutil.rmtree(home / folder, ignore_errors=True)


def diff_un(tmp: Path, rel: str, old: str | None, new: str | None) -> bytes:
    """What GNU ``diff -uN old/REL new/REL`` writes (exit 1: the files differ)."""
    for side, text in (("old", old), ("new", new)):
        p = tmp / side / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if text is not None:
            p.write_text(text)
    proc = subprocess.run(
        ["diff", "-uN", f"old/{rel}", f"new/{rel}"], cwd=tmp, capture_output=True, check=False
    )
    assert proc.returncode == 1, proc.stderr
    shutil.rmtree(tmp / "old")
    shutil.rmtree(tmp / "new")
    return proc.stdout


@dataclass
class Made:
    home: Path
    series: Path
    diffs: dict[str, bytes]  # name -> the bytes written

    @property
    def baked(self) -> Path:
        return self.home / "build" / f"myteam-{BASE}"


def make_series(cli: Cli, home: Path, tmp: Path) -> Made:
    """The second series from nothing, through the CLI (see the module docstring)."""
    r = cli("init", "myteam", "--vllm", BASE)
    assert r.exit_code == 0, r.output
    series, work = home / "launcher" / "myteam", home / "work" / "myteam"
    # 1. a modification, made in the pristine working tree and refreshed into a diff
    sp = work / SAMPLING
    text = sp.read_text()
    assert text.count(FIELD_AFTER) == 1
    sp.write_text(text.replace(FIELD_AFTER, FIELD_AFTER + FIELD))
    r = cli("refresh", "myteam", "--tree", work, "--new-diff", "budget")
    assert r.exit_code == 0, r.output
    # 2. a creation and 3. a deletion, made by GNU diff -uN
    pristine_gone = (work / GONE).read_text()
    creation = diff_un(tmp / "d2", NEW_FILE, None, NEW_TEXT)
    deletion = diff_un(tmp / "d3", GONE, pristine_gone, None)
    assert b"1970-01-01" in creation.split(b"\n")[0] and b"@@ -0,0 +1,3 @@" in creation
    assert b"1970-01-01" in deletion.split(b"\n")[1] and b" +0,0 @@" in deletion
    (series / "diffs" / "02-myteam_ext.diff").write_bytes(creation)
    (series / "diffs" / "03-drop_granite_engine_parser.diff").write_bytes(deletion)
    (series / "tests" / "test_myteam.py").write_text(SERIES_TEST)
    diffs = {p.name: p.read_bytes() for p in sorted((series / "diffs").iterdir())}
    assert list(diffs) == [
        "01-budget.diff",
        "02-myteam_ext.diff",
        "03-drop_granite_engine_parser.diff",
    ]
    return Made(home, series, diffs)


def baked_digest(tree: Path) -> dict[str, bytes]:
    """Every file of a baked tree but its .git and .bakery: path -> bytes."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".bakery"))
        for name in filenames:
            p = Path(dirpath, name)
            found[str(p.relative_to(tree))] = p.read_bytes()
    return found


def test_a_second_series_bakes_and_verifies_in_the_full_environment(
    cli: Cli, home: Path, tmp_path: Path, full_env: object, capfd: pytest.CaptureFixture[str]
) -> None:
    made = make_series(cli, home, tmp_path)
    r = cli("apply", "myteam")
    assert r.exit_code == 0, r.output
    tree = made.baked
    assert FIELD in (tree / SAMPLING).read_text()
    assert (tree / NEW_FILE).read_text() == NEW_TEXT
    assert not (tree / GONE).exists()

    capfd.readouterr()
    # series.toml: env = "full"; pytest's -v: its summary lists each module from the tree
    # (without it, past three, one line: a full environment loads some 170)
    r = cli("verify", "myteam", "--", "-v")
    out = capfd.readouterr().out
    assert r.exit_code == 0, r.output + out
    assert "environment: full" in r.output
    assert "stood in: vllm.triton_utils" in r.output  # the interpreter: Triton's stand-in
    assert f"from the tree  vllm.sampling_params  ({tree / SAMPLING})" in out
    assert "4 passed" in out  # the example test and myteam's own

    # the light environment cannot import it: vLLM's own dependencies are absent there
    # (msgspec is bakery's own dependency, numpy comes with its tools: pydantic is the
    # first that is missing)
    r = cli("verify", "myteam", "--env", "light")
    out = capfd.readouterr().out
    assert r.exit_code == 1, r.output + out
    assert "No module named 'pydantic'" in out


def test_a_second_series_on_other_releases(cli: Cli, home: Path, tmp_path: Path) -> None:
    make_series(cli, home, tmp_path)
    for version in OTHERS:
        r = cli("check", "myteam", "--vllm", version)
        assert r.exit_code == 0, f"{version}: {r.output}"
    report = tmp_path / "matrix.json"
    r = cli("matrix", "myteam", "--vllm", OTHERS[0], BASE, OTHERS[1], "--json", report)
    assert r.exit_code == 0, r.output
    rows = json.loads(report.read_text())["releases"]
    assert sorted((row["version"], row["status"]) for row in rows) == [
        (v, "baked") for v in sorted((*OTHERS, BASE))
    ]


def test_refresh_of_the_base_tree_and_its_next_command(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    made = make_series(cli, home, tmp_path)
    assert cli("apply", "myteam").exit_code == 0
    ext = made.baked / NEW_FILE
    ext.write_text(NEW_TEXT.replace("= 16", "= 32"))
    r = cli("refresh", "myteam", "--tree", made.baked)
    assert r.exit_code == 0, r.output
    assert "02-myteam_ext.diff" in r.output
    assert (made.series / "diffs" / "01-budget.diff").read_bytes() == made.diffs["01-budget.diff"]
    assert b"+BUDGET_UNIT = 32" in (made.series / "diffs" / "02-myteam_ext.diff").read_bytes()
    printed = [ln.strip() for ln in r.output.splitlines() if ln.strip().startswith("bakery apply")]
    # the refreshed tree is apply's own --out: its edits are in the diffs now, so a plain
    # apply replaces it (no --force: apply replaces a tree whose edits the diffs hold)
    assert printed == [f"bakery apply myteam --vllm {BASE}"], r.output
    again = cli(*shlex.split(printed[0])[1:])
    assert again.exit_code == 0, again.output
    assert "BUDGET_UNIT = 32" in (made.baked / NEW_FILE).read_text()


def test_a_port_of_the_second_series(
    cli: Cli, home: Path, tmp_path: Path, full_env: object
) -> None:
    made = make_series(cli, home, tmp_path)
    r = cli("port", "myteam", "--vllm", OTHERS[1], "--out", tmp_path / "port")
    # the series' own diffs bake and verify there: no port is needed, none is written
    # (issue 25); the story of a port that is needed is tests/porting/test_in_step.py's
    assert r.exit_code == 0 and "no port needed" in r.output, r.output
    assert not (home / "patches" / "myteam" / OTHERS[1]).exists()
    r = cli("apply", "myteam", "--vllm", OTHERS[1])
    assert r.exit_code == 0 and "patches/myteam" not in r.output, r.output
    assert sorted(made.diffs) == sorted(p.name for p in (made.series / "diffs").iterdir())


def test_a_git_diff_copy_bakes_the_same_bytes(cli: Cli, home: Path, tmp_path: Path) -> None:
    made = make_series(cli, home, tmp_path)
    assert cli("apply", "myteam").exit_code == 0
    want = baked_digest(made.baked)
    # the same three changes, each committed in the pristine tree and taken by git diff
    work = home / "work" / "myteam"
    git(work, "checkout", "--quiet", "--", ".")
    diffs = made.series / "diffs"
    for p in diffs.iterdir():
        p.unlink()
    steps = [
        lambda: (work / SAMPLING).write_text(
            (work / SAMPLING).read_text().replace(FIELD_AFTER, FIELD_AFTER + FIELD)
        ),
        lambda: (work / NEW_FILE).write_text(NEW_TEXT),
        lambda: (work / GONE).unlink(),
    ]
    for n, (step, name) in enumerate(zip(steps, made.diffs, strict=True)):
        step()
        git(work, "add", "-A")
        (diffs / name).write_text(git(work, "diff", "--cached"))
        git(work, "commit", "--quiet", "-m", f"step {n}")
    assert b"--- /dev/null" in (diffs / "02-myteam_ext.diff").read_bytes()
    r = cli("apply", "myteam", "--force")
    assert r.exit_code == 0, r.output
    assert baked_digest(made.baked) == want


def test_a_crlf_copy_bakes_the_same_bytes(cli: Cli, home: Path, tmp_path: Path) -> None:
    made = make_series(cli, home, tmp_path)
    assert cli("apply", "myteam").exit_code == 0
    want = baked_digest(made.baked)
    for name, data in made.diffs.items():
        crlf = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        (made.series / "diffs" / name).write_bytes(crlf)
    r = cli("apply", "myteam", "--force")
    assert r.exit_code == 0, r.output
    assert baked_digest(made.baked) == want


def test_diff_uN_as_written(cli: Cli, home: Path, tmp_path: Path) -> None:
    made = make_series(cli, home, tmp_path)
    r = cli("apply", "myteam")
    assert r.exit_code == 0, r.output
    assert (made.baked / NEW_FILE).read_text() == NEW_TEXT
    assert not (made.baked / GONE).exists()


def test_a_wheel_carries_the_new_file(cli: Cli, home: Path, tmp_path: Path) -> None:
    make_series(cli, home, tmp_path)
    # about the new file in the wheel, not the publish rule (tests/package): --unverified
    r = cli("wheel", "myteam", "--vllm", BASE, "--out", tmp_path / "dist", "--unverified")
    assert r.exit_code == 0, r.output
    (wheel,) = (tmp_path / "dist").glob("vllm-*.whl")  # this machine's platform
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    assert (target / NEW_FILE).read_text() == NEW_TEXT
    assert not (target / GONE).exists()
