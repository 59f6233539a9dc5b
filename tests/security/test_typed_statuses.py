"""Statuses in a report read back (``summarize``) are typed: a status that is not one
bakery writes never reaches a renderer; the report is refused in one line naming the file,
which holds none of the hostile text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bakery.errors import BakeryError
from bakery.reports import matrix as mx

HOSTILE = "\x1b[2J\r::error file=x::pwned|<img src=x onerror=alert(1)>"


def _report(row_status: str, hunk_status: str, verify: str | None = None) -> dict[str, object]:
    hunk = {"index": 1, "status": hunk_status, "line": 1, "offset": 0, "fuzz": 0}
    diff = {"name": "01.diff", "files": [{"path": "p", "hunks": [hunk]}]}
    row = {"version": "1.0", "status": row_status, "verify": verify, "diffs": [diff]}
    return {"series": "s", "ok": False, "releases": [row]}


@pytest.mark.parametrize(
    "report",
    [
        _report("conflict" + HOSTILE, "failed"),
        _report("conflict", HOSTILE),
        _report("baked", "applied", verify=HOSTILE),
    ],
)
def test_a_status_bakery_does_not_write_is_refused(
    report: dict[str, object], tmp_path: Path
) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    with pytest.raises(BakeryError) as e:
        mx.rows_from_reports([path])
    assert e.value.message == f"{path}: not a bakery report (bad ValueError)"
