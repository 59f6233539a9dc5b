"""bakery matrix: the releases it picks from the index (``--since``, ``--pre``), the keys of
its JSON report, and ``--verify``, which is ok only where the series' tests ran and passed.

Releases are put into the test's cache (or served by a local index), and the series carries
its own small ``tests/`` folder, so that verify runs real pytest on the baked trees without
the network or the dcp2 kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.archives import sdist
from tests.support.index import Index
from tests.support.series import index_series, make_series, udiff
from tests.support.trees import cache_release, write_files

Cli = Callable[..., Result]

MOD = "A = 1\nVALUE = 1\nB = 1\n"
#: The series' own test: the bake changed VALUE, and the release's code is sound.
TREE_TEST = """
import runpy


def test_the_bake_changed_the_value(baked_tree):
    code = runpy.run_path(str(baked_tree / "vllm" / "mod.py"))
    assert code["VALUE"] == 2
    assert code.get("SOUND", True)
"""
RELEASE_KEYS = {
    "proof",
    "version",
    "status",
    "port",
    "port_stale",
    "error",
    "verify",
    "verify_error",
    "verify_log",
    "failed_tests",
    "seconds",
    "wheels",
    "wheel_error",
    "known_defects",
    "diffs",
}


def make_s(home: Path, tests: dict[str, str] | None) -> Path:
    """Series "s": VALUE = 1 -> 2 in vllm/mod.py; with ``tests``, a tests/ folder."""
    series = make_series(
        home,
        "s",
        {"01-value.diff": udiff("mod.py", MOD, MOD.replace("VALUE = 1", "VALUE = 2"))},
        'root = "vllm"\nstrip = 1\n',
    )
    if tests is not None:
        write_files(series / "tests", tests)
    return series


@pytest.fixture
def releases() -> None:
    """1.0.0 bakes and passes the series' test; 1.1.0 bakes, but its code fails the test."""
    cache_release("1.0.0", {"vllm/mod.py": MOD})
    cache_release("1.1.0", {"vllm/mod.py": MOD + "SOUND = False\n"})


def reports(tmp_path: Path) -> tuple[dict[str, dict[str, object]], dict[str, object], str]:
    """(release -> JSON row, the whole JSON report, the Markdown)."""
    data = json.loads((tmp_path / "m.json").read_text())
    rows = {str(r["version"]): r for r in data["releases"]}
    return rows, data, (tmp_path / "m.md").read_text()


def junit_cases(tmp_path: Path) -> dict[tuple[str, str], ET.Element]:
    suites = ET.parse(tmp_path / "m.xml").getroot()
    return {(str(s.get("name")), str(c.get("name"))): c for s in suites for c in s.iter("testcase")}


REPORTS = ("--json", "m.json", "--markdown", "m.md", "--junit", "m.xml", "--out", "mx")


# --- --verify ---------------------------------------------------------------------------------


def test_verify_passes_and_fails_per_release(
    cli: Cli, home: Path, releases: None, tmp_path: Path
) -> None:
    make_s(home, {"test_tree.py": TREE_TEST})
    r = cli("matrix", "s", "--vllm", "1.0.0", "--verify", "--jobs", "1", *REPORTS)
    assert r.exit_code == 0, r.output
    rows, data, md = reports(tmp_path)
    assert data["ok"] is True and rows["1.0.0"]["verify"] == "passed"
    assert "| 1.0.0 | ✅ baked |" in md and md.rstrip().endswith("| passed |")

    r = cli("matrix", "s", "--vllm", "1.0.0", "1.1.0", "--verify", "--jobs", "2", *REPORTS)
    assert r.exit_code == 1, r.output
    rows, data, md = reports(tmp_path)
    assert data["ok"] is False
    assert {v: (x["status"], x["verify"], x["verify_error"]) for v, x in rows.items()} == {
        "1.0.0": ("baked", "passed", None),
        "1.1.0": ("baked", "failed", None),
    }
    log = Path(str(rows["1.1.0"]["verify_log"])).read_text()
    assert "1 failed" in log and "SOUND" in log
    assert "| 1.0.0 | ✅ baked |" in md and "| 1.1.0 | ❌ baked |" in md
    cases = junit_cases(tmp_path)
    assert cases[("s vLLM 1.1.0", "verify")].find("failure") is not None
    assert len(cases[("s vLLM 1.0.0", "verify")]) == 0  # no failure, no error
    assert "failed" in r.stdout and "passed" in r.stdout
    assert cli("matrix", "s", "--vllm", "1.1.0", "--verify", "--allow-fail").exit_code == 0


FAILING = {
    "test_tree.py": TREE_TEST,
    "test_more.py": "class TestVALUE:\n    def test_in_a_class(self):\n        assert False\n\n\n"
    "def test_passes():\n    pass\n",
}


@pytest.mark.parametrize("quiet", [False, True])
def test_matrix_names_the_failing_tests_and_the_log(
    cli: Cli, home: Path, releases: None, tmp_path: Path, quiet: bool
) -> None:
    make_s(home, FAILING)
    flags = ["-q"] if quiet else []
    r = cli(*flags, "matrix", "s", "--vllm", "1.0.0", "1.1.0", "--verify", "--jobs", "1", *REPORTS)
    assert r.exit_code == 1, r.output
    rows, _, _ = reports(tmp_path)
    log = str(rows["1.1.0"]["verify_log"])
    # 1.0.0: only the test in a class fails; 1.1.0: both, each by its node id
    assert rows["1.0.0"]["failed_tests"] == ["test_more.py::TestVALUE::test_in_a_class"]
    assert rows["1.1.0"]["failed_tests"] == [
        "test_more.py::TestVALUE::test_in_a_class",
        "test_tree.py::test_the_bake_changed_the_value",
    ]
    out = " ".join(r.output.split())
    assert "1.1.0: 2 tests failed test_more.py::TestVALUE::test_in_a_class" in out
    assert "test_tree.py::test_the_bake_changed_the_value" in out
    assert f"log: {log}" in out and "test_the_bake_changed_the_value" in Path(log).read_text()


def assert_not_verified(code: int, stdout: str, tmp_path: Path, why: str) -> None:
    """Every report says the bake was not verified, and why; nothing says ok."""
    assert code == 2, stdout
    rows, data, md = reports(tmp_path)
    row = rows["1.0.0"]
    assert data["ok"] is False
    assert (row["status"], row["verify"]) == ("baked", "error")
    assert why in str(row["verify_error"])
    assert "✅" not in md and "| 1.0.0 | ❌ baked |" in md and "not verified: " in md
    (suite,) = ET.parse(tmp_path / "m.xml").getroot()
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    error = junit_cases(tmp_path)[("s vLLM 1.0.0", "verify")].find("error")
    assert error is not None and why in str(error.get("message"))
    assert "not verified" in stdout and why in " ".join(stdout.split())


def test_a_series_without_tests_is_not_verified(
    cli: Cli, home: Path, releases: None, tmp_path: Path
) -> None:
    make_s(home, tests=None)
    r = cli("matrix", "s", "--vllm", "1.0.0", "--verify", "--jobs", "1", *REPORTS)
    assert_not_verified(r.exit_code, r.stdout, tmp_path, "has no tests/ folder")
    # --allow-fail forgives releases that fail, not a verify that never ran
    r = cli("matrix", "s", "--vllm", "1.0.0", "--verify", "--allow-fail", *REPORTS)
    assert_not_verified(r.exit_code, r.stdout, tmp_path, "has no tests/ folder")


def test_a_pytest_that_cannot_run_is_not_verified(
    cli: Cli, home: Path, releases: None, tmp_path: Path
) -> None:
    make_s(home, {"test_tree.py": TREE_TEST, "pytest.ini": "[pytest]\naddopts = --no-such\n"})
    r = cli("matrix", "s", "--vllm", "1.0.0", "--verify", "--jobs", "1", *REPORTS)
    assert_not_verified(r.exit_code, r.stdout, tmp_path, "pytest stopped: usage error")


def test_verify_on_a_gpu_without_a_gpu_is_not_verified(
    home: Path, releases: None, tmp_path: Path
) -> None:
    """``--gpu`` where torch sees no GPU (CUDA_VISIBLE_DEVICES empty, in a fresh process,
    so that it holds on a GPU host too)."""
    make_s(home, {"test_tree.py": TREE_TEST})
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "bakery", "matrix", "s", "--vllm", "1.0.0", "--verify"]
    proc = subprocess.run(
        [*cmd, "--gpu", "--jobs", "1", *REPORTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr
    assert_not_verified(proc.returncode, proc.stdout, tmp_path, "no CUDA GPU is visible")


# --- the JSON report's keys ----------------------------------------------------------------------


def test_json_keys_port_and_seconds(
    cli: Cli, home: Path, releases: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    series = make_s(home, tests=None)
    port = home / "patches" / "s" / "1.1.0"
    port.mkdir(parents=True)
    (port / "01-value.diff").write_bytes((series / "diffs" / "01-value.diff").read_bytes())
    monkeypatch.chdir(home)  # paths in reports are relative to where bakery runs
    r = cli("matrix", "s", "--vllm", "1.0.0", "1.1.0", "--jobs", "1", *REPORTS)
    assert r.exit_code == 0, r.output
    rows, data, _ = reports(home)
    assert set(data) == {"series", "ok", "releases"} and data["series"] == "s"
    for row in rows.values():
        assert set(row) == RELEASE_KEYS
        assert row["verify"] is row["verify_error"] is row["verify_log"] is None  # not asked
        seconds = row["seconds"]
        assert isinstance(seconds, float) and 0 < seconds < 120
    assert rows["1.0.0"]["port"] is None
    assert rows["1.1.0"]["port"] == "patches/s/1.1.0"
    # a port that records nothing of what it was made from is said in every report
    assert rows["1.0.0"]["port_stale"] == []
    assert rows["1.1.0"]["port_stale"] == ["port has no provenance record"]
    # issue 45: each row's proof state; a port without a record is stale, never verified
    assert rows["1.0.0"]["proof"] == {
        "state": "unverified",
        "reason": "0 hunks merged; not yet tested",
    }
    assert rows["1.1.0"]["proof"] == {
        "state": "stale",
        "reason": "patches/s/1.1.0: port has no provenance record",
    }
    _, _, md = reports(home)
    assert "patches/s/1.1.0 ⚠️ port has no provenance record" in md
    assert md.rstrip().endswith("| stale |"), md  # the verify column: the proof state
    case = junit_cases(home)[("s vLLM 1.1.0", "port")]
    assert case.find("failure") is not None
    assert ("s vLLM 1.0.0", "port") not in junit_cases(home)
    assert "1.1.0: port has no provenance record" in r.output


def test_two_jobs_run_in_spawned_workers_that_share_the_cores(
    cli: Cli, home: Path, releases: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--jobs 2: a pool of two spawned workers (named, not the platform's default), each
    started by the initializer that shares the cores among the bakes in progress; their
    rows come back as rows, the same as with one job."""
    from concurrent.futures import ProcessPoolExecutor

    import bakery.commands.matrix as matrix

    pools: list[dict[str, object]] = []

    class Recorded(ProcessPoolExecutor):
        def __init__(self, *args: object, **kwargs: object) -> None:
            pools.append(kwargs)
            super().__init__(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(matrix, "ProcessPoolExecutor", Recorded)
    make_s(home, tests=None)
    r = cli("matrix", "s", "--vllm", "1.0.0", "1.1.0", "--jobs", "2", *REPORTS)
    assert r.exit_code == 0, r.output
    two, _, _ = reports(tmp_path)
    r = cli("matrix", "s", "--vllm", "1.0.0", "1.1.0", "--jobs", "1", *REPORTS)
    assert r.exit_code == 0, r.output
    one, _, _ = reports(tmp_path)
    assert len(pools) == 1, "--jobs 1 runs in this process, --jobs 2 in one pool"
    pool = pools[0]
    assert pool["max_workers"] == 2 and pool["initializer"] is matrix._worker_init
    assert pool["mp_context"].get_start_method() == "spawn"  # type: ignore[attr-defined]
    busy = pool["initargs"][0]  # type: ignore[index]
    assert busy.value == 0  # every bake that started also ended
    strip = {"seconds", "diffs"}
    assert {v: {k: x for k, x in row.items() if k not in strip} for v, row in two.items()} == {
        v: {k: x for k, x in row.items() if k not in strip} for v, row in one.items()
    }
    assert {v: row["diffs"] for v, row in two.items()} == {
        v: row["diffs"] for v, row in one.items()
    }


def test_an_unreadable_release_is_an_error_row(cli: Cli, home: Path, tmp_path: Path) -> None:
    make_s(home, tests=None)
    r = cli("matrix", "s", "--vllm", "9.9.9", "--jobs", "1", *REPORTS)
    assert r.exit_code == 1, r.output
    rows, data, md = reports(tmp_path)
    assert data["ok"] is False
    assert rows["9.9.9"]["status"] == "error" and rows["9.9.9"]["error"]
    assert "| 9.9.9 | ❌ error: " in md


@pytest.mark.parametrize("spec", ["0.30.0-0.34.0", "no-such-tree"])
def test_a_spec_no_bake_could_take_is_a_bad_argument(
    cli: Cli, home: Path, tmp_path: Path, spec: str
) -> None:
    # not a failed row per value (exit 1): a bad argument, exit 2, before anything is baked
    make_s(home, tests=None)
    r = cli("matrix", "s", "--vllm", "1.0.0", spec, "--jobs", "1", *REPORTS)
    assert r.exit_code == 2, r.output
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert f"--vllm '{spec}' is not a release, a local tree or git+URL@REF" in line
    if "-0." in spec:
        assert "--since 0.30.0" in line
    assert not (tmp_path / "m.json").exists()


# --- --since and --pre ---------------------------------------------------------------------------


def test_since_and_pre_take_releases_from_the_index(cli: Cli, index: Index, tmp_path: Path) -> None:
    for v in ("0.9.0", "1.0.0", "1.1.0rc1", "1.1.0", "1.2.0.dev1", "1.2.0"):
        index.add(f"vllm-{v}.tar.gz", sdist(v, files=2))
    index.add("vllm-1.3.0-py3-none-any.whl", b"not an sdist")
    series = index_series(tmp_path)

    def versions(*args: str) -> list[str]:
        r = cli("matrix", series, *args, "--jobs", "1", "--json", "m.json")
        assert r.exit_code == 0, r.output
        return [x["version"] for x in json.loads((tmp_path / "m.json").read_text())["releases"]]

    assert versions("--since", "1.0.0") == ["1.0.0", "1.1.0", "1.2.0"]
    assert versions("--since", "1.1.0", "--pre") == ["1.1.0", "1.2.0.dev1", "1.2.0"]
    assert versions("--since", "1.0.1", "--pre") == ["1.1.0rc1", "1.1.0", "1.2.0.dev1", "1.2.0"]
    # --vllm comes first; --since adds what it does not name yet
    assert versions("--vllm", "0.9.0", "--vllm", "1.2.0", "--since", "1.1.0") == [
        "0.9.0",
        "1.2.0",
        "1.1.0",
    ]
    r = cli("matrix", series, "--since", "2.0.0")
    assert r.exit_code == 2 and "matrix needs" in r.stderr and "Traceback" not in r.output
