"""The project bakery runs in: the folder holding ``launcher/`` and ``patches/``, and the
record of each series' last bake (verify's default tree).

Found once per command (``BAKERY_HOME``, else the nearest ancestor of the working directory
with a ``launcher/`` folder). The last-bake record lives in bakery's own folder (the cache),
keyed by project: apply never writes into the working directory or the project beyond
``--out``. This module only reads and writes that record; what the record is trusted for
is :mod:`bakery.commands.verify`'s to decide (SECURITY.md).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from bakery.safety import cachepolicy

__all__ = ["LAST_BAKES", "last_applies", "project_root", "remember", "where_series_are"]

#: The record's file name in the cache folder.
LAST_BAKES = "last-bakes.json"


def project_root() -> Path:
    """The folder holding launcher/ and patches/: BAKERY_HOME, else the nearest ancestor of
    the working directory with a launcher/ folder, else the working directory."""
    env = os.environ.get("BAKERY_HOME")
    if env:
        return Path(env)
    cwd = Path.cwd()
    for d in (cwd, *cwd.parents):
        if (d / "launcher").is_dir():
            return d
    return cwd


def where_series_are(home: Path) -> str:
    """The end of an "unknown series" line: the series known, or where bakery looked."""
    launcher = home / "launcher"
    if launcher.is_dir():
        known = sorted(p.name for p in launcher.glob("*") if p.is_dir())
        return f" (known: {', '.join(known)})" if known else f" (none in {launcher})"
    if os.environ.get("BAKERY_HOME"):
        return f": BAKERY_HOME={home} has no launcher/ folder"
    return (
        f": no launcher/ folder in {home} or above it; run bakery inside a project, "
        "set BAKERY_HOME to one, or give the path to a series folder"
    )


def _read(record: Path) -> str:
    """The record's text: a regular file of the cache only (a FIFO is never opened, a link
    never followed: safety.cachepolicy), bounded."""
    return cachepolicy.read_text(record, 16 << 20, "last-bake record")


def remember(record: Path, series: str, out: Path) -> None:
    """Note ``out`` as the tree of the series' last ``bakery apply`` in ``record`` (the last
    key of the project's: the last apply of all). Only a convenience for verify: an
    unwritable record never fails a bake."""
    from bakery.model.report import write_json

    try:
        data = json.loads(_read(record)) if os.path.lexists(record) else {}
    except (OSError, ValueError, RecursionError, cachepolicy.CacheRefused):
        data = {}
    if not isinstance(data, dict):
        data = {}
    project = str(project_root().absolute())
    mine = data.get(project)
    mine = mine if isinstance(mine, dict) else {}
    mine.pop(series, None)
    mine[series] = str(out.absolute())
    data[project] = mine
    with contextlib.suppress(OSError):
        write_json(record, data)


def last_applies(record: Path) -> dict[str, str]:
    """The project's series and the trees of their last applies, oldest first."""
    try:
        data = json.loads(_read(record))
        mine = data[str(project_root().absolute())]
    except (OSError, ValueError, RecursionError, KeyError, TypeError, cachepolicy.CacheRefused):
        return {}
    if not isinstance(mine, dict):
        return {}
    return {str(k): v for k, v in mine.items() if isinstance(v, str)}
