"""``bakery list``: the series, their diffs, the files they touch, and their base release."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bakery.patch.series import load_series
from bakery.project import project_root

if TYPE_CHECKING:
    pass


# --- list --------------------------------------------------------------------------------------


def list_series(spec: str | None) -> list[dict[str, Any]]:
    home = project_root()
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
        rows.append(
            {
                "name": s.name,
                "path": str(s.path),
                "base": s.base,
                "root": s.root,
                "strip": s.strip,
                "description": s.description,
                "ports": ports,
                "diffs": [
                    {
                        "name": d.name,
                        "sha256": d.sha256,
                        "files": [
                            fp.new_name if not fp.is_delete else fp.old_name for fp in d.files
                        ],
                        "hunks": sum(len(fp.hunks) for fp in d.files),
                    }
                    for d in s.load_diffs()
                ],
            }
        )
    return rows


# --- verify -------------------------------------------------------------------------------------
