"""The one manifest reader: every field bakery acts on comes back typed (the series, each
diff's files and commit, where a conflicted bake stopped, what a ``port --update`` tree
carries), and a field of the wrong type is refused, not passed on."""

from __future__ import annotations

import pytest

from bakery.model.manifest import CARRIES, BakedDiff, ManifestError, parse

_C = "c" * 40


def _data() -> dict[str, object]:
    return {
        "status": "conflict",
        "series": {"name": "demo", "path": "/p/launcher/demo"},
        "vllm": {"version": "0.30.0"},
        "layout": {"strip": 1, "root": ""},
        "port": "patches/demo/0.30.0",
        "diffs": [
            {"name": "01-a.diff", "commit": _C, "files": [{"path": "vllm/a.py"}]},
            {"name": "02-b.diff", "files": [{"path": "vllm/b.py"}, {"path": "vllm/c.py"}]},
        ],
        "stopped_at": "02-b.diff",
        "pristine_commit": "a" * 40,
        "head": "b" * 40,
        "files": {"vllm/a.py": "00" * 32},
        CARRIES: {"01-a.diff": "11" * 32},
    }


def test_every_field_bakery_acts_on_is_typed() -> None:
    m = parse(_data(), "m.json")
    assert (m.series_name, m.series_path, m.version) == ("demo", "/p/launcher/demo", "0.30.0")
    assert m.diffs == [
        BakedDiff("01-a.diff", ["vllm/a.py"], _C),
        BakedDiff("02-b.diff", ["vllm/b.py", "vllm/c.py"], None),
    ]
    assert m.stopped_at == "02-b.diff" and m.port == "patches/demo/0.30.0"
    assert m.carries == {"01-a.diff": "11" * 32}


def test_a_plain_bake_has_no_stop_and_carries_nothing() -> None:
    data = _data()
    del data["stopped_at"], data[CARRIES], data["series"]
    m = parse(data, "m.json")
    assert m.stopped_at is None and m.carries is None and m.series_name is None


@pytest.mark.parametrize(
    ("key", "value"),
    [("stopped_at", 3), ("series", "demo"), (CARRIES, ["01-a.diff"])],
)
def test_a_field_of_the_wrong_type_is_refused(key: str, value: object) -> None:
    data = {**_data(), key: value}
    with pytest.raises(ManifestError):
        parse(data, "m.json")


def test_a_series_name_of_the_wrong_type_is_refused() -> None:
    data = {**_data(), "series": {"name": 7}}
    with pytest.raises(ManifestError, match="name has the wrong type"):
        parse(data, "m.json")


def test_a_status_bakery_does_not_write_is_neither_baked_nor_a_conflict() -> None:
    assert parse({**_data(), "status": "baked"}, "m.json").status == "baked"
    assert parse({**_data(), "status": "mine"}, "m.json").status is None
