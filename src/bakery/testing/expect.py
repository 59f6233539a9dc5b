"""What a series' bundled tests expect of a baked tree, read from the series' own data files.

``known-defects.toml`` registers defects that the series is known to have::

    [[defect]]
    id = "dcp2-mask-past-width"          # what the tests' known_defect marker names
    summary = "one line"
    input = "the smallest input that shows it"
    releases = ["0.30.0", "0.31.0"]      # the releases whose bake has it
    fix = "fixes/90-mask-past-width.diff" # the proposed fix (optional)

A test that hits a defect carries ``@pytest.mark.known_defect("ID")``; on a tree whose bake
has the defect (its release is listed, and the fix is not among the bake's diffs), the
test is a strict expected failure: it must still fail, and once it passes the entry is to
be removed.

``expectations.toml`` says what each vLLM release has upstream, keyed on the release the
bake's manifest records, never on what the tree under test happens to hold::

    [release."0.33.0"]
    skips = ["test_x.py::test_rocm_*"]   # the only tests that may skip (fnmatch on node ids)
    skips_gpu = [...]                    # ... and, on a GPU only / under the interpreter only
    skips_interpret = [...]
    features = ["valid_blocks"]          # anything else: handed to the tests as is

A release not listed takes the newest listed release below it (upstream features carry
forward). Both files are read with tomllib; this module checks their shape.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFECTS_FILE = "known-defects.toml"
EXPECTATIONS_FILE = "expectations.toml"
MANIFEST = Path(".bakery") / "manifest.json"


class SeriesDataError(ValueError):
    """A data file of the series is malformed (the plugin turns it into a usage error)."""


@dataclass(frozen=True)
class Defect:
    id: str
    summary: str
    input: str
    releases: tuple[str, ...]
    fix: str | None = None

    @property
    def fix_name(self) -> str | None:
        return Path(self.fix).name if self.fix else None


@dataclass(frozen=True)
class Bake:
    """What the baked tree's manifest says: its release and the diffs applied."""

    release: str | None
    diffs: tuple[str, ...] = ()

    @classmethod
    def of(cls, tree: Path) -> Bake:
        try:
            data = json.loads((tree / MANIFEST).read_text())
        except (OSError, ValueError):
            return cls(None)
        release = (data.get("vllm") or {}).get("version")
        names = tuple(str(d.get("name")) for d in data.get("diffs") or [] if isinstance(d, dict))
        return cls(str(release) if release else None, names)


@dataclass(frozen=True)
class Expectations:
    """One release's expectations: the skips allowed, the rest for the tests."""

    release: str | None  # the listed release they come from
    skips: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)

    def allows_skip(self, nodeid: str) -> bool:
        name = nodeid.split("/")[-1]
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.skips)


def _read(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > _MAX_FILE:
            raise SeriesDataError(f"{path}: larger than {_MAX_FILE} bytes")
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SeriesDataError(f"{path}: {e}") from None
    except RecursionError:
        raise SeriesDataError(f"{path}: nested too deeply") from None


#: A series data file is a few kB; it is read whole.
_MAX_FILE = 4 << 20


def check_files(series_dir: Path) -> None:
    """Both files read and checked for shape, every entry (SeriesDataError, one line):
    verify calls this before pytest starts, so a malformed file is never an internal
    error of the pytest session."""
    load_defects(series_dir)
    path = series_dir / EXPECTATIONS_FILE
    if path.is_file():
        table = _read(path).get("release", {})
        if not isinstance(table, dict):
            raise SeriesDataError(f'{path}: [release."X.Y.Z"] tables expected')
        for key in table:
            load_expectations(series_dir, key, interpret=True)
            load_expectations(series_dir, key, interpret=False)


def _strings(path: Path, where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SeriesDataError(f"{path}: {where} must be a list of strings")
    return tuple(value)


def load_defects(series_dir: Path) -> dict[str, Defect]:
    path = series_dir / DEFECTS_FILE
    if not path.is_file():
        return {}
    defects: dict[str, Defect] = {}
    entries = _read(path).get("defect", [])
    if not isinstance(entries, list):
        raise SeriesDataError(f"{path}: [[defect]] entries expected")
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise SeriesDataError(f"{path}: defect {n} is not a [[defect]] table")
        missing = {"id", "summary", "input", "releases"} - set(entry)
        if missing:
            raise SeriesDataError(f"{path}: defect {n} lacks {', '.join(sorted(missing))}")
        unknown = set(entry) - {"id", "summary", "input", "releases", "fix"}
        if unknown:
            raise SeriesDataError(f"{path}: defect {n}: unknown keys {', '.join(sorted(unknown))}")
        defect = Defect(
            id=str(entry["id"]),
            summary=str(entry["summary"]).strip(),
            input=str(entry["input"]).strip(),
            releases=_strings(path, f"defect {entry['id']}: releases", entry["releases"]),
            fix=str(entry["fix"]) if entry.get("fix") else None,
        )
        if defect.id in defects:
            raise SeriesDataError(f"{path}: defect {defect.id} is registered twice")
        defects[defect.id] = defect
    return defects


def active(defect: Defect, bake: Bake) -> bool:
    """Whether this bake has the defect: its release is listed (or unknown), and the
    defect's fix is not among the bake's diffs."""
    if defect.fix_name is not None and defect.fix_name in bake.diffs:
        return False
    return bake.release is None or bake.release in defect.releases


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def load_expectations(
    series_dir: Path, release: str | None, *, interpret: bool
) -> Expectations | None:
    """The expectations for ``release``: its own entry, else the newest listed release
    below it; None when the series has no expectations file or the release is unknown."""
    path = series_dir / EXPECTATIONS_FILE
    if not path.is_file() or release is None:
        return None
    table = _read(path).get("release", {})
    if not isinstance(table, dict):
        raise SeriesDataError(f'{path}: [release."X.Y.Z"] tables expected')
    wanted = _version(release)
    if wanted is None:
        return None
    listed = sorted(
        ((v, key) for key in table if (v := _version(key)) is not None and v <= wanted),
        reverse=True,
    )
    if not listed:
        return None
    key = listed[0][1]
    if not isinstance(table[key], dict):
        raise SeriesDataError(f'{path}: release "{key}" is not a table')
    entry = dict(table[key])
    skips = _strings(path, f"release {key}: skips", entry.pop("skips", []))
    by_mode = {
        mode: _strings(path, f"release {key}: skips_{mode}", entry.pop(f"skips_{mode}", []))
        for mode in ("gpu", "interpret")
    }
    skips += by_mode["interpret" if interpret else "gpu"]
    return Expectations(release=key, skips=skips, data=entry)
