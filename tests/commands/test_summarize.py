"""bakery summarize: reports of several CI jobs joined, each release once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result


def _check(version: str, status: str = "checked") -> dict[str, object]:
    return {
        "status": status,
        "error": None,
        "series": {"name": "s", "path": "launcher/s"},
        "vllm": {"version": version, "source": "x", "sha256": None},
        "port": None,
        "diffs": [],
    }


def _matrix(*rows: tuple[str, str, str | None]) -> dict[str, object]:
    return {
        "series": "s",
        "ok": True,
        "releases": [
            {"version": v, "status": st, "port": None, "error": None, "diffs": [], "verify": ver}
            for v, st, ver in rows
        ],
    }


def test_a_release_in_two_reports_is_one_row(cli: Callable[..., Result], tmp_path: Path) -> None:
    Path("check.json").write_text(json.dumps(_check("0.32.0")))
    Path("m.json").write_text(
        json.dumps(_matrix(("0.32.0", "baked", "passed"), ("0.33.0", "baked", "passed")))
    )
    r = cli("summarize", "check.json", "m.json", "--markdown", "sum.md")
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "sum.md").read_text().splitlines()
    assert lines[0] == "### bakery summary: s"
    rows = [ln for ln in lines if ln.startswith("| 0.")]
    assert [ln.split(" | ")[0] for ln in rows] == ["| 0.32.0", "| 0.33.0"]
    assert rows[0].endswith("| passed |")  # the verified row, not the check's


def test_a_failure_in_any_report_is_kept(cli: Callable[..., Result], tmp_path: Path) -> None:
    Path("bad.json").write_text(json.dumps(_check("0.32.0", "conflict")))
    Path("m.json").write_text(json.dumps(_matrix(("0.32.0", "baked", "passed"))))
    r = cli("summarize", "bad.json", "m.json", "--markdown", "sum.md")
    assert r.exit_code == 1, r.output
    rows = [ln for ln in (tmp_path / "sum.md").read_text().splitlines() if ln.startswith("| 0.")]
    assert len(rows) == 1 and "❌ conflict" in rows[0]


def test_each_row_shows_its_proof_state(cli: Callable[..., Result], tmp_path: Path) -> None:
    """Issue 45: a release only checked or baked is "unverified" (or "stale") in the verify
    column, a verified one "passed"; never a bare "-"."""
    check = {**_check("0.31.0"), "proof": {"state": "stale", "reason": "p: port stale: ..."}}
    Path("check.json").write_text(json.dumps(check))
    Path("m.json").write_text(
        json.dumps(_matrix(("0.32.0", "baked", None), ("0.33.0", "baked", "passed")))
    )
    r = cli("summarize", "check.json", "m.json", "--markdown", "sum.md")
    assert r.exit_code == 0, r.output
    rows = [ln for ln in (tmp_path / "sum.md").read_text().splitlines() if ln.startswith("| 0.")]
    assert [ln.rsplit(" | ", 1)[1] for ln in rows] == ["stale |", "unverified |", "passed |"]
