"""The report types read back from their JSON: ``from_json`` undoes ``to_json`` for a diff
and its hunks (every optional field), and refuses a report of another shape."""

from __future__ import annotations

import pytest

from bakery.model import records
from bakery.model.records import RecordError
from bakery.model.report import DiffResult
from bakery.model.results import FileResult, HunkResult, Moved, Outcome


def _diff() -> DiffResult:
    hunks = [
        HunkResult(1, Outcome.APPLIED, 3, 0, 0),
        HunkResult(
            2,
            Outcome.AMBIGUOUS,
            40,
            offset=-2,
            fuzz=1,
            reason="also matches",
            action="look",
            also_matches=[7, 9],
            moved_def=Moved("A.f", "g"),
            uses=["vllm.x.y"],
        ),
    ]
    failed = [HunkResult(1, Outcome.FAILED, 5, 0, 0, reason="no match")]
    return DiffResult(
        "01-a.diff",
        "ab" * 32,
        [FileResult("m.py", hunks, b"code"), FileResult("n.py", failed, None)],
        commit="c" * 40,
        warnings=["upstream changed f"],
    )


def test_from_json_undoes_to_json() -> None:
    d = _diff()
    back = DiffResult.from_json(d.to_json())
    assert back.to_json() == d.to_json()
    assert back.status is Outcome.FAILED and not back.ok
    assert back.files[0].hunks == d.files[0].hunks
    assert all(f.content is None for f in back.files)  # the report has no file contents


@pytest.mark.parametrize(
    "bad",
    [
        {"index": 1, "status": "no such outcome", "line": 1, "offset": 0, "fuzz": 0},
        {"index": "1", "status": "applied", "line": 1, "offset": 0, "fuzz": 0},
        {"index": True, "status": "applied", "line": 1, "offset": 0, "fuzz": 0},
        {"index": 1, "status": "applied", "line": 1, "offset": 0, "fuzz": 0, "moved_def": "f"},
        {"index": 1, "status": "applied", "line": 1, "offset": 0, "fuzz": 0, "uses": "vllm.x"},
        {"status": "applied", "line": 1, "offset": 0, "fuzz": 0},
        {"index": 1, "status": "applied", "line": 1, "fuzz": 0},
        {"index": 1, "status": "applied", "line": 1, "offset": 0.5, "fuzz": 0},
    ],
)
def test_a_hunk_of_another_shape_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(RecordError):
        records.load(bad, HunkResult)
