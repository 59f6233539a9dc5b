"""A matrix row read back from its JSON (``Row.from_json``, as ``summarize`` reads a
``matrix --json`` report): ``from_json`` undoes ``to_json``, every field, and a row of
another shape is refused."""

from __future__ import annotations

import pytest

from bakery.model.report import DiffResult
from bakery.model.results import FileResult, HunkResult, Moved, Outcome
from bakery.reports.matrix import Row, read_row


def _row() -> Row:
    hunks = [
        HunkResult(1, Outcome.MERGED, 3, 0, 0, moved_def=Moved("A.f", "g")),
        HunkResult(2, Outcome.FAILED, 9, 0, 0),
    ]
    diff = DiffResult(
        "01-a.diff",
        "ab" * 32,
        [FileResult("m.py", hunks, None)],
        commit="c" * 40,
        warnings=["upstream changed f"],
        notes=["read with CRLF"],
    )
    return Row(
        "0.31.0",
        "conflict",
        port="patches/demo/0.31.0",
        error="01-a.diff does not apply",
        diffs=[diff],
        verify="known-defects",
        verify_log="/tmp/v.log",
        seconds=1.25,
        verify_error=None,
        wheels=["w.whl"],
        wheel_error="no wheel",
        known_defects={"D1": 2},
        port_stale=["01-a.diff changed"],
    )


def test_read_row_undoes_to_json() -> None:
    row = _row()
    back = read_row(row.to_json())
    assert back == row
    assert back.to_json() == row.to_json()
    assert back.diffs[0].status is Outcome.FAILED


def test_a_diff_round_trips_with_its_notes() -> None:
    d = _row().diffs[0]
    assert DiffResult.from_json(d.to_json()).to_json() == d.to_json()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("status", "done"),
        ("verify", "ok"),
        ("diffs", {}),
        ("wheels", "w.whl"),
        ("version", 3),
        ("seconds", "1.25"),
        ("known_defects", {"D1": "2"}),
        ("failed_tests", [1]),
    ],
)
def test_a_row_of_another_shape_is_refused(key: str, value: object) -> None:
    data = {**_row().to_json(), key: value}
    with pytest.raises((TypeError, KeyError, ValueError)):
        read_row(data)
