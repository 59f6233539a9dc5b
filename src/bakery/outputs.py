"""Where bakery writes its reports: a file the user named, or stdout for ``-``.

A small writer for the CLI's ``--json -``; the project's one output writer (FIFOs and
symlinks honoured, outputs checked before the work starts) replaces it where it lands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: The target that means standard output.
STDOUT = "-"


def write_report(target: str, data: Any) -> None:
    """The report as indented JSON: to stdout for ``-``, else atomically to the file."""
    if target == STDOUT:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
        return
    from bakery.bake.report import write_json

    write_json(Path(target), data)
