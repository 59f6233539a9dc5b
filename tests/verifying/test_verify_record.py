"""A verify result kept for reuse is read back checked by its type (model/records.py):
the record round-trips, its module paths follow the tree it is read into, and a record of
another shape is a run, never a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bakery.testing.reuse import Record
from bakery.verifying import runner
from bakery.verifying.runner import ModuleOrigin, VerifyResult


def _result(tree: Path) -> VerifyResult:
    return VerifyResult(
        exit_code=0,
        pytest_exit_code=0,
        passed=5,
        failed=0,
        errors=0,
        skipped=2,
        xfailed=1,
        xpassed=0,
        unexpected_skips=0,
        modules=(
            ModuleOrigin("vllm.a", "tree", str(tree / "vllm" / "a.py")),
            ModuleOrigin("vllm.b", "stand-in", "tests/standins/b.py"),
        ),
        tool_fixes=("triton interpreter fix",),
        known_defects={"D1": 1},
        expectations="0.34.0",
        elapsed=1.5,
    )


def _read(data: dict[str, Any], tree: Path) -> VerifyResult:
    return runner._from_record(Record("k", "2026-12-06", data, str(tree)), tree, jobs=2)


def test_a_recorded_result_reads_back_into_the_tree_it_is_read_for(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    data = json.loads(json.dumps(runner._to_record(_result(first), first)))
    assert data["modules"][0] == {"name": "vllm.a", "kind": "tree", "detail": "vllm/a.py"}
    assert data["modules"][1]["absolute"] == "1"
    back = _read(data, second)
    assert back.modules[0].detail == str(second / "vllm" / "a.py")
    assert back.modules[1].detail == "tests/standins/b.py"
    kept = ("passed", "skipped", "xfailed", "known_defects", "expectations", "elapsed")
    assert [getattr(back, k) for k in kept] == [getattr(_result(first), k) for k in kept]
    assert (back.key, back.reused, back.jobs) == ("k", "2026-12-06", 2)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("exit_code", "0"),
        ("exit_code", True),
        ("counts", {"passed": 5}),
        ("elapsed", "fast"),
        ("modules", [{"name": "vllm.a", "kind": "tree"}]),
        ("known_defects", {"D1": "1"}),
        ("tool_fixes", "one"),
    ],
)
def test_a_record_of_another_shape_is_not_a_result(
    tmp_path: Path, where: str, value: object
) -> None:
    data = runner._to_record(_result(tmp_path), tmp_path)
    with pytest.raises(runner._BadRecord):
        _read({**data, where: value}, tmp_path)
