"""``bakery list``: the series, their diffs, the files they touch, and their base release."""

from __future__ import annotations

from dataclasses import dataclass, field

from bakery.context import Context
from bakery.patch.diffs import FilePatch, agreeing_strip
from bakery.patch.series import load_series

# --- list --------------------------------------------------------------------------------------


@dataclass
class ListedDiff:
    name: str
    sha256: str
    #: the paths it touches (a deleted file by its old name)
    files: list[str]
    hunks: int
    #: the same files as bakery reads them: the strip taken off, the root put on where
    #: series.toml sets them (what ``bakery list`` prints; --json keeps the header names)
    shown: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "sha256": self.sha256, "files": self.files, "hunks": self.hunks}


@dataclass
class SeriesRow:
    """One series as ``bakery list`` shows it (``--json``: ``to_json``)."""

    name: str
    path: str
    base: str | None
    root: str | None
    strip: int | None
    description: str
    #: the releases it has a port for (``patches/<series>/<release>/``)
    ports: list[str] = field(default_factory=list)
    diffs: list[ListedDiff] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": self.path,
            "base": self.base,
            "root": self.root,
            "strip": self.strip,
            "description": self.description,
            "ports": self.ports,
            "diffs": [d.to_json() for d in self.diffs],
        }


def list_series(ctx: Context, spec: str | None) -> list[SeriesRow]:
    home = ctx.home
    if spec:
        names = [spec]
    else:
        names = sorted(p.name for p in (home / "launcher").glob("*") if (p / "diffs").is_dir())
        if not names:
            from bakery.errors import SeriesError
            from bakery.project import where_series_are

            raise SeriesError(f"no series{where_series_are(home)}")
    rows = []
    for name in names:
        s = load_series(name, home)
        ports = (
            sorted(p.name for p in (home / "patches" / s.name).glob("*") if p.is_dir())
            if (home / "patches" / s.name).is_dir()
            else []
        )
        diffs = [
            ListedDiff(
                d.name,
                d.sha256,
                [fp.new_name if not fp.is_delete else fp.old_name for fp in d.files],
                sum(len(fp.hunks) for fp in d.files),
                [_shown(fp, s.strip, s.root) for fp in d.files],
            )
            for d in s.load_diffs()
        ]
        rows.append(
            SeriesRow(s.name, str(s.path), s.base, s.root, s.strip, s.description, ports, diffs)
        )
    return rows


def _shown(fp: FilePatch, strip: int | None, root: str | None) -> str:
    """A file's name with the series' strip taken off; without one in series.toml, git's
    (1) for a git diff, else the strip under which both header names are one file; the
    name as written where none fits (the bake detects it against the tree)."""
    name = fp.old_name if fp.is_delete else fp.new_name
    if strip is None:
        strip = 1 if fp.git else agreeing_strip(fp)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if strip is None or len(parts) <= strip:
        return name
    return "/".join([*([root.strip("/")] if root and root.strip("/") else []), *parts[strip:]])


# --- verify -------------------------------------------------------------------------------------
