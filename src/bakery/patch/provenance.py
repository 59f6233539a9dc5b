"""What a port was made from: ``patches/SERIES/RELEASE/FROM.toml``.

A port is a full copy of the series' diffs rebased onto one release, and nothing else
links it to the series: when a series diff is fixed, the port silently keeps the old
text (pnpm's and patch-package's most common complaint). The record names, per series
diff the port was made from, its sha256 and its git blob id (so that ``bakery port
--update`` can read the old text back from the project's git history and carry the
interdiff), and the proposed fixes' hashes where the port was made with ``--with-fixes``.
Comparing the record with the series' diffs now gives the port's state: current, stale
(with the diff and both hashes named), or unknown (no record).

The file is written by hand, not by a TOML library: it holds only quoted names and hex
digests in a fixed layout (so that a rewrite of an unchanged record is byte-identical and
reviews show one changed line per changed diff); it is read with :mod:`tomllib`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import SeriesError
from bakery.patch.series import ordered_diffs
from bakery.safety import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE = "FROM.toml"
NO_RECORD = "port has no provenance record"
#: How the record came to be.
MADE_BY = ("refresh", "port", "update", "backfill")


def blob_id(data: bytes) -> str:
    """git's object id of the bytes as a blob (``git hash-object``), computed without git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Entry:
    sha256: str
    blob: str

    @classmethod
    def of(cls, data: bytes) -> Entry:
        return cls(hashlib.sha256(data).hexdigest(), blob_id(data))


@dataclass
class Record:
    made_by: str
    #: series diff name -> what it was when the port was made
    diffs: dict[str, Entry] = field(default_factory=dict)
    #: proposed fix name -> its hash (only for a port made with --with-fixes)
    fixes: dict[str, Entry] = field(default_factory=dict)

    def render(self) -> str:
        lines = [
            "# What this port was made from: the series' diffs (and proposed fixes) it was",
            "# rebased from, by sha256 and git blob id. Written by bakery (refresh, port,",
            "# port --update); bakery reports the port stale when a diff here no longer",
            "# matches the series. Review it with the port; do not edit it by hand.",
            f"made_by = {json.dumps(self.made_by)}",
        ]
        for table, entries in (("diffs", self.diffs), ("fixes", self.fixes)):
            if not entries and table == "fixes":
                continue
            lines += ["", f"[{table}]"]
            for name in sorted(entries):
                e = entries[name]
                lines.append(
                    f"{json.dumps(name)} = {{ sha256 = {json.dumps(e.sha256)}, "
                    f"blob = {json.dumps(e.blob)} }}"
                )
        return "\n".join(lines) + "\n"


def of_series(series_path: Path, made_by: str, fixes: list[Path] | None = None) -> Record:
    """The record of a port made now from the series' own diffs (and these fixes)."""
    rec = Record(made_by)
    for p in ordered_diffs(series_path / "diffs", allow_empty=True):
        rec.diffs[p.name] = Entry.of(p.read_bytes())
    for p in fixes or []:
        rec.fixes[p.name] = Entry.of(p.read_bytes())
    return rec


def carried(series_path: Path, carries: Mapping[str, str] | None) -> bool:
    """True when a tree's manifest says it carries (``Manifest.carries``) the series'
    diffs as they are now."""
    want = {
        p.name: Entry.of(p.read_bytes()).sha256
        for p in ordered_diffs(series_path / "diffs", allow_empty=True)
    }
    return carries == want


def write(port_dir: Path, record: Record) -> None:
    path = port_dir / FILE
    tmp = path.with_name(f".{FILE}.{os.getpid()}.tmp")
    tmp.write_text(record.render(), encoding="utf-8")
    os.replace(tmp, path)


def _entry(where: str, value: object) -> Entry:
    if not isinstance(value, dict) or set(value) != {"sha256", "blob"}:
        raise SeriesError(f"{where}: needs {{ sha256 = ..., blob = ... }}")
    sha, blob = value["sha256"], value["blob"]
    ok = isinstance(sha, str) and isinstance(blob, str)
    if not ok or len(sha) != 64 or len(blob) != 40 or not _hex(sha + blob):
        raise SeriesError(f"{where}: sha256 and blob must be hex digests")
    return Entry(sha, blob)


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def read(port_dir: Path) -> Record | None:
    """The port's record, None when it has none; SeriesError for a malformed one."""
    path = port_dir / FILE
    if not os.path.lexists(path):
        return None
    try:
        paths.regular_file(path, FILE)
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except paths.UnsafeDataError as e:
        raise SeriesError(e.message) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise SeriesError(f"{path}: {e}") from None
    except OSError as e:
        raise SeriesError(f"{path}: {e.strerror}") from None
    unknown = set(data) - {"made_by", "diffs", "fixes"}
    made_by = data.get("made_by")
    if unknown or made_by not in MADE_BY:
        raise SeriesError(f"{path}: not a provenance record (made_by, [diffs], [fixes])")
    rec = Record(str(made_by))
    for table in ("diffs", "fixes"):
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            raise SeriesError(f"{path}: [{table}] must be a table")
        for name, value in entries.items():
            getattr(rec, table)[name] = _entry(f"{path}: {table}.{name}", value)
    return rec


def short(sha: str) -> str:
    return sha[:12]


def stale_lines(series_path: Path, port_dir: Path, record: Record | None = None) -> list[str]:
    """Why the port is not in step with the series' diffs now (empty when it is):
    ``port stale: made from NN-x.diff @ OLD, the series now has NEW``, one line per diff
    changed, added or removed since; ``port has no provenance record`` without a record."""

    rec = record if record is not None else read(port_dir)
    if rec is None:
        return [NO_RECORD]
    now = {
        p.name: Entry.of(p.read_bytes())
        for p in ordered_diffs(series_path / "diffs", allow_empty=True)
    }
    out = []
    for name in sorted(set(now) | set(rec.diffs)):
        old, new = rec.diffs.get(name), now.get(name)
        if old is None and new is not None:
            out.append(f"port stale: made without {name}, the series now has {short(new.sha256)}")
        elif new is None and old is not None:
            out.append(
                f"port stale: made from {name} @ {short(old.sha256)}, the series no longer has it"
            )
        elif old is not None and new is not None and old.sha256 != new.sha256:
            out.append(
                f"port stale: made from {name} @ {short(old.sha256)}, "
                f"the series now has {short(new.sha256)}"
            )
    return out
