"""Re-baking per release (issue 4) on small releases the tests put into the cache: the
three-way fallback, why a hunk failed, drift warnings, refresh and ports, --up-to-date,
the matrix and its reports. No network: sources.release finds these in the cache."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.sources.cache import Cache
from tests.support.releases import BASE, series
from tests.support.trees import cache_release as release

CODE = (
    "def a():\n    x = 1\n    return x\n\n\n"
    "def b():\n    w = 0\n    v = 0\n    u = 0\n    t = 0\n    y = 2\n    return y\n\n\n"
    "def c():\n    return 3\n"
)
Cli = Callable[..., Result]


def hunks(report: Path) -> list[dict[str, object]]:
    data = json.loads(report.read_text())
    return [h for d in data["diffs"] for f in d["files"] for h in f["hunks"]]


@pytest.fixture
def drifted(home: Path) -> str:
    """Base 1.0.0; the series changes line15; 1.1.0 changed line13 (inside the context)."""
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE.replace("line13\n", "thirteen\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    return "1.1.0"


def test_a_drifted_hunk_is_merged_three_way(cli: Cli, drifted: str, tmp_path: Path) -> None:
    r = cli("apply", "s", "--vllm", drifted, "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    (h,) = hunks(tmp_path / "r.json")
    assert h["status"] == "merged" and "1.0.0" in str(h["reason"])
    text = (tmp_path / "out/vllm/mod.py").read_text()
    assert "thirteen\n" in text and "FIFTEEN\n" in text and "line15" not in text


def test_no_merge_leaves_it_failed_with_a_reason(cli: Cli, drifted: str, tmp_path: Path) -> None:
    r = cli("apply", "s", "--vllm", drifted, "--out", "out", "--no-merge", "--json", "r.json")
    assert r.exit_code == 1
    (h,) = hunks(tmp_path / "r.json")
    assert h["status"] == "failed" and "context drift" in str(h["reason"])
    assert "refresh" in str(h["action"])
    assert not (tmp_path / "out").exists()


@pytest.fixture
def conflicting(home: Path) -> str:
    """1.1.0 changed the very line the series changes: the merge conflicts."""
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE.replace("line15\n", "fifteen\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    return "1.1.0"


def test_conflict_markers_then_refresh_then_port(
    cli: Cli, conflicting: str, home: Path, tmp_path: Path
) -> None:
    r = cli(
        "apply", "s", "--vllm", conflicting, "--out", "out", "--keep-failed", "--json", "r.json"
    )
    assert r.exit_code == 1
    (h,) = hunks(tmp_path / "r.json")
    assert h["status"] == "failed" and "merge: 1 conflict" in str(h["reason"])
    failed = tmp_path / "out.failed"
    mod = failed / "vllm/mod.py"
    assert "<<<<<<< release" in mod.read_text() and not (tmp_path / "out").exists()
    # refresh refuses a file that still has conflict markers, naming it and the line
    r = cli("refresh", "s", "--tree", failed)
    assert r.exit_code == 2 and "vllm/mod.py:15" in r.output
    # resolve: keep upstream's word and the series' change
    resolved = BASE.replace("line15\n", "fifteen\nFIFTEEN\n")
    mod.write_text(resolved)
    r = cli("refresh", "s", "--tree", failed)
    assert r.exit_code == 0, r.output
    port = home / "patches/s/1.1.0/01-change.diff"
    text = port.read_text()
    assert text.startswith("--- baked-ours/mod.py\n+++ baked/mod.py\n")  # no timestamps
    # apply now takes the port, and the baked file is the resolved one, byte for byte
    r = cli("apply", "s", "--vllm", conflicting, "--out", "out", "--json", "r2.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r2.json").read_text())["port"].endswith("patches/s/1.1.0")
    assert (tmp_path / "out/vllm/mod.py").read_text() == resolved
    # refresh of the baked port reproduces it exactly; --up-to-date agrees
    r = cli("refresh", "s", "--tree", tmp_path / "out")
    assert r.exit_code == 0 and port.read_text() == text
    assert cli("check", "s", "--vllm", conflicting, "--up-to-date").exit_code == 0
    port.write_text(text.replace("--- baked-ours/mod.py", "--- a/mod.py"))
    r = cli("check", "s", "--vllm", conflicting, "--up-to-date")
    assert r.exit_code == 1 and "not up to date" in r.output


def test_up_to_date_with_a_release_checks_only_that_releases_port(
    cli: Cli, drifted: str, home: Path, tmp_path: Path
) -> None:
    # CI checks each port in the job that has its release cached, not every port in one job
    assert cli("apply", "s", "--vllm", drifted, "--out", "out").exit_code == 0
    assert cli("refresh", "s", "--tree", tmp_path / "out").exit_code == 0
    port = home / f"patches/s/{drifted}/01-change.diff"
    first, rest = port.read_text().split("\n", 1)
    port.write_text("--- a/mod.py\n" + rest)  # applies, but is not what refresh writes
    assert first != "--- a/mod.py"
    assert cli("check", "s", "--vllm", "1.0.0", "--up-to-date").exit_code == 0
    r = cli("check", "s", "--vllm", drifted, "--up-to-date")
    assert r.exit_code == 1 and f"patches/s/{drifted}" in r.output, r.output
    r = cli("check", "s", "--up-to-date")  # without --vllm: every port
    assert r.exit_code == 1 and "not up to date" in r.output


def test_refresh_of_a_base_release_tree_rewrites_the_series_own_diffs(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    """As quilt refresh: a tree of the series' base release refreshes launcher/s/diffs/,
    never a port that would shadow them; the edit made after the bake is in it."""
    release("1.0.0", {"vllm/mod.py": BASE})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    assert cli("apply", "s", "--vllm", "1.0.0", "--out", "out").exit_code == 0
    mod = tmp_path / "out/vllm/mod.py"
    mod.write_text(mod.read_text().replace("line20\n", "TWENTY\n"))
    r = cli("refresh", "s", "--tree", "out", "--release", "1.0")  # 1.0 is 1.0.0
    assert r.exit_code == 0, r.output
    assert not (home / "patches").exists()
    own = (home / "launcher/s/diffs/01-change.diff").read_text()
    assert "+FIFTEEN" in own and "+TWENTY" in own
    # a diffstat and the next step, pasteable
    assert "01-change.diff  1 file, +2 -2" in r.stdout
    assert "bakery apply s --vllm 1.0.0" in r.stdout
    assert cli("apply", "s", "--vllm", "1.0.0", "--out", "out2").exit_code == 0
    assert (tmp_path / "out2/vllm/mod.py").read_bytes() == mod.read_bytes()


def test_already_upstream(cli: Cli, home: Path, tmp_path: Path) -> None:
    after = BASE.replace("line15\n", "FIFTEEN\n")
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": after})
    series(home, BASE, after)
    r = cli("check", "s", "--vllm", "1.1.0", "--json", "r.json")
    assert r.exit_code == 1
    (h,) = hunks(tmp_path / "r.json")
    assert h["status"] == "already-applied" and "already upstream" in str(h["reason"])
    assert "drop" in str(h["action"])


def test_a_moved_file_is_found_by_content(cli: Cli, home: Path, tmp_path: Path) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/pkg/mod.py": BASE.replace("line2\n", "line two\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    r = cli("check", "s", "--vllm", "1.1.0", "--json", "r.json")
    assert r.exit_code == 1
    (h,) = hunks(tmp_path / "r.json")
    assert h["status"] == "failed" and "moved upstream to vllm/pkg/mod.py" in str(h["reason"])


def test_drift_warning_names_the_changed_function(cli: Cli, home: Path, tmp_path: Path) -> None:
    release("1.0.0", {"vllm/mod.py": CODE})
    # upstream changed b() above the hunk's context: the diff still applies cleanly
    release("1.1.0", {"vllm/mod.py": CODE.replace("w = 0", "w = 10")})
    series(home, CODE, CODE.replace("    y = 2\n", "    y = 3\n"))
    r = cli("apply", "s", "--vllm", "1.1.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    (d,) = json.loads((tmp_path / "r.json").read_text())["diffs"]
    assert d["warnings"] and "function b" in d["warnings"][0] and "function a" not in str(d)
    assert "warning" in r.output
    # unchanged upstream: no warning
    release("1.2.0", {"vllm/mod.py": CODE, "vllm/other.py": "x = 1\n"})
    r = cli("apply", "s", "--vllm", "1.2.0", "--out", "out3", "--json", "r3.json")
    assert r.exit_code == 0, r.output
    (d,) = json.loads((tmp_path / "r3.json").read_text())["diffs"]
    assert "warnings" not in d


def test_drift_warning_finds_a_function_inside_an_if(cli: Cli, home: Path, tmp_path: Path) -> None:
    """A definition inside ``if``/``try`` (a fallback, a platform branch) is found as the
    guard finds it: the warning names it, not nothing."""
    code = "import sys\n\nif sys.platform:\n" + "".join(
        "    " + line if line else "" for line in CODE.splitlines(keepends=True)
    )
    release("1.0.0", {"vllm/mod.py": code})
    release("1.1.0", {"vllm/mod.py": code.replace("w = 0", "w = 10")})
    series(home, code, code.replace("        y = 2\n", "        y = 3\n"))
    r = cli("apply", "s", "--vllm", "1.1.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    (d,) = json.loads((tmp_path / "r.json").read_text())["diffs"]
    assert d.get("warnings") and "function b" in d["warnings"][0], d


def test_matrix_reports(cli: Cli, conflicting: str, tmp_path: Path) -> None:
    release("1.2.0", {"vllm/mod.py": BASE})
    r = cli(
        "matrix",
        "s",
        "--vllm",
        "1.0.0",
        "--vllm",
        "1.2.0",
        "--vllm",
        "1.1.0",
        "--jobs",
        "2",
        "--json",
        "m.json",
        "--markdown",
        "m.md",
        "--junit",
        "m.xml",
        "--out",
        "mx",
    )
    assert r.exit_code == 1  # 1.1.0 conflicts
    data = json.loads((tmp_path / "m.json").read_text())
    status = {x["version"]: x["status"] for x in data["releases"]}
    assert status == {"1.0.0": "baked", "1.2.0": "baked", "1.1.0": "conflict"}
    assert data["ok"] is False
    md = (tmp_path / "m.md").read_text()
    assert "| 1.1.0 | ❌ conflict" in md and "1 applied" in md and "1 failed" in md
    suites = ET.parse(tmp_path / "m.xml").getroot()
    failures = {s.get("name"): s.get("failures") for s in suites}
    assert failures["s vLLM 1.1.0"] == "1" and failures["s vLLM 1.0.0"] == "0"
    assert (tmp_path / "mx/s-1.0.0/.bakery/manifest.json").is_file()
    assert cli("matrix", "s", "--vllm", "1.1.0", "--allow-fail").exit_code == 0


def test_summarize_joins_job_reports(cli: Cli, drifted: str, tmp_path: Path) -> None:
    for version, out in (("1.0.0", "a"), (drifted, "b")):
        r = cli("apply", "s", "--vllm", version, "--out", out, "--json", f"r-{version}.json")
        assert r.exit_code == 0, r.output
    r = cli("summarize", "r-1.1.0.json", "r-1.0.0.json", "--markdown", "sum.md")
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "sum.md").read_text().splitlines()
    rows = [ln for ln in lines if ln.startswith("| 1.")]
    assert [ln.split(" | ")[0] for ln in rows] == ["| 1.0.0", "| 1.1.0"]
    assert "1 merged" in rows[1]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = cli("summarize", bad)
    assert r.exit_code == 2 and "not a bakery report" in r.output


def test_summarize_exits_1_when_a_row_failed(cli: Cli, conflicting: str, tmp_path: Path) -> None:
    """A conflict among the reports, or a matrix row whose verify did not run: exit 1,
    and the Markdown says which."""
    r = cli("apply", "s", "--vllm", "1.0.0", "--out", "a", "--json", "ok.json")
    assert r.exit_code == 0, r.output
    r = cli("apply", "s", "--vllm", conflicting, "--out", "b", "--json", "bad.json")
    assert r.exit_code == 1, r.output
    assert cli("summarize", "ok.json").exit_code == 0
    r = cli("summarize", "ok.json", "bad.json", "--markdown", "sum.md")
    assert r.exit_code == 1, r.output
    text = (tmp_path / "sum.md").read_text()
    assert f"| {conflicting} | ❌ conflict" in text and "| 1.0.0 | ✅ baked" in text
    # a matrix report whose verify could not run
    row = json.loads((tmp_path / "ok.json").read_text())
    matrix = {
        "series": "s",
        "ok": False,
        "releases": [
            {
                "version": "1.0.0",
                "status": "baked",
                "port": None,
                "error": None,
                "verify": "error",
                "verify_error": "no CUDA GPU is visible to torch",
                "verify_log": None,
                "seconds": 1.0,
                "diffs": row["diffs"],
            }
        ],
    }
    (tmp_path / "m.json").write_text(json.dumps(matrix))
    r = cli("summarize", "m.json")
    assert r.exit_code == 1, r.output
    assert "✅" not in r.stdout and "not verified: no CUDA GPU" in r.stdout


def test_matrix_workers_share_the_cores_for_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy in a matrix worker takes the cores over the bakes in progress."""
    import multiprocessing
    import os

    from bakery.bake import treecopy
    from bakery.commands import matrix

    monkeypatch.setattr(treecopy, "_jobs", None)
    monkeypatch.setattr(matrix, "_busy", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    busy = multiprocessing.Value("i", 0)
    matrix._worker_init(busy)
    seen = []
    for n in (2, 1, 3):
        busy.value = n
        assert treecopy._jobs is not None
        seen.append(treecopy._jobs())
    assert seen == [2, 4, 1]


def test_a_changed_base_release_is_never_used(cli: Cli, drifted: str, tmp_path: Path) -> None:
    """The base release is checked for changes while the bake runs (as the target is): a
    cached base that somebody edited is thrown away, not merged against."""
    base = Cache().root / "trees" / "vllm-1.0.0" / "vllm" / "mod.py"
    base.write_text(BASE.replace("line20\n", "planted\n"))
    r = cli("apply", "s", "--vllm", drifted, "--out", "out")
    assert "vllm-1.0.0 had changed files; it is extracted again" in r.stderr
    assert not (Cache().root / "trees" / "vllm-1.0.0.json").exists()
    # extracting it again needs the index, which this test has not: one clear error
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
