"""FROM.toml: a port's record of the series diffs it was made from, and the port's state
read from it (in step, stale with both hashes named, or no record)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from bakery.errors import SeriesError
from bakery.patch import provenance


def _series(root: Path, diffs: dict[str, str]) -> Path:
    (root / "diffs").mkdir(parents=True)
    for name, text in diffs.items():
        (root / "diffs" / name).write_text(text)
    return root


def test_a_record_round_trips_and_names_git_blobs(tmp_path: Path) -> None:
    s = _series(tmp_path / "s", {"01-a.diff": "one\n", "02-b.diff": "two\n"})
    rec = provenance.of_series(s, "port")
    port = tmp_path / "port"
    port.mkdir()
    provenance.write(port, rec)
    assert provenance.read(port) == rec
    blob = (
        subprocess.run(
            ["git", "hash-object", "--stdin"], input=b"two\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    assert rec.diffs["02-b.diff"].blob == blob
    assert provenance.stale_lines(s, port) == []
    first = (port / provenance.FILE).read_bytes()
    provenance.write(port, provenance.of_series(s, "port"))
    assert (port / provenance.FILE).read_bytes() == first  # a rewrite changes nothing


def test_every_change_of_the_series_is_named(tmp_path: Path) -> None:
    s = _series(tmp_path / "s", {"01-a.diff": "one\n", "02-b.diff": "two\n"})
    port = tmp_path / "port"
    port.mkdir()
    provenance.write(port, provenance.of_series(s, "refresh"))
    old = hashlib.sha256(b"two\n").hexdigest()[:12]
    (s / "diffs" / "02-b.diff").write_text("two, fixed\n")
    (s / "diffs" / "01-a.diff").unlink()
    (s / "diffs" / "03-c.diff").write_text("three\n")
    new02 = hashlib.sha256(b"two, fixed\n").hexdigest()[:12]
    new03 = hashlib.sha256(b"three\n").hexdigest()[:12]
    one = hashlib.sha256(b"one\n").hexdigest()[:12]
    assert provenance.stale_lines(s, port) == [
        f"port stale: made from 01-a.diff @ {one}, the series no longer has it",
        f"port stale: made from 02-b.diff @ {old}, the series now has {new02}",
        f"port stale: made without 03-c.diff, the series now has {new03}",
    ]
    (port / provenance.FILE).unlink()
    assert provenance.stale_lines(s, port) == ["port has no provenance record"]


@pytest.mark.parametrize(
    "text",
    [
        "made_by = 3\n",
        'made_by = "port"\n[diffs]\n"a.diff" = "nothex"\n',
        'made_by = "port"\n[diffs]\n"a.diff" = { sha256 = "ab", blob = "cd" }\n',
        'made_by = "port"\nextra = 1\n',
        "not toml [",
    ],
)
def test_a_malformed_record_is_one_clear_error(tmp_path: Path, text: str) -> None:
    port = tmp_path / "port"
    port.mkdir()
    (port / provenance.FILE).write_text(text)
    with pytest.raises(SeriesError) as err:
        provenance.read(port)
    assert err.value.exit_code == 2 and "FROM.toml" in err.value.message
