"""Where bakery writes its reports: a file the user named, or stdout for ``-``.

A small stand-in with the same names as the project's one output writer (branch ``sec``:
FIFOs, symlinks and ``/dev/stdout`` honoured, outputs checked before the work starts),
which replaces this module where it lands; the CLI calls only ``is_stdout`` and
``write_json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def is_stdout(target: Path | str | None) -> bool:
    """``--json -``: the report takes standard output."""
    return target is not None and str(target) == "-"


def write_json(target: Path | str, data: object, what: str = "--json") -> None:
    """The report as indented JSON: to stdout for ``-``, else atomically to the file."""
    if is_stdout(target):
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
        return
    from bakery.bake.report import write_json as write_file

    write_file(Path(target), data)  # type: ignore[arg-type]
