"""Where a bake's time goes: run one ``bakery apply`` in this process with timers
wrapped around its parts, and print them as JSON. With an empty cache
(``BAKERY_CACHE_DIR``) it is a cold bake, and the download and unpack are timed too.

    python bench/phases.py SERIES VERSION OUT

Process start is measured by bench.py (``python -c pass``); this script measures the
imports, then each part of the bake. Every git subprocess is timed by its subcommand
(clone, read-tree, fast-import...), so the table follows the core as it changes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
# what apply imports
from bakery.bake import tree as bake  # noqa: E402
from bakery.cli import app as cli  # noqa: E402,F401
from bakery.commands import apply as commands  # noqa: E402
from bakery.context import Context  # noqa: E402
from bakery.git import cmd as gitutil  # noqa: E402
from bakery.sources import resolve as sources  # noqa: E402

T_IMPORTS = time.perf_counter() - T0

from bakery.formats import unpack  # noqa: E402 - only a cold bake imports it

acc: dict[str, float] = {}
_local = threading.local()


def _wrap(obj: Any, name: str, label: Callable[..., str] | str) -> None:
    """Time obj.name, less the timed calls it makes (no double counts). Calls made in another
    thread (the clone beside the copy) are marked: they overlap the main thread's."""
    fn = getattr(obj, name, None)
    if fn is None:
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        key = label(*args, **kwargs) if callable(label) else label
        if threading.current_thread() is not threading.main_thread():
            key += " (in a thread, overlapped)"
        stack = _local.__dict__.setdefault("stack", [0.0])
        stack.append(0.0)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            children = stack.pop()
            stack[-1] += spent
            acc[key] = acc.get(key, 0.0) + spent - children

    setattr(obj, name, timed)


def _git_label(cwd: Path, *args: str, **kwargs: Any) -> str:
    """git CMD, past the global options (--no-optional-locks, -c NAME=VALUE...)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-c" else rest[1:]
    return "git " + (rest[0] if rest else "?")


def main() -> None:
    series, version, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    _wrap(gitutil, "git", _git_label)
    _wrap(sources, "resolve", "resolve (cache lookup)")
    _wrap(commands.sources, "resolve", "resolve (cache lookup)")
    _wrap(sources, "index_files", "cold: read the index")
    _wrap(sources, "_download", "cold: download + sha256")
    _wrap(sources, "_unpack", "cold: inflate, read the tar, check members, make folders")
    _wrap(unpack._Tree, "finish_files", "cold: wait for the writer threads")
    _wrap(unpack._Tree, "make_links", "cold: links")
    _wrap(unpack, "_commit", "cold: trees, commit, pack and index written")
    _wrap(bake, "refuse_unless_replaceable", "check --out")
    _wrap(commands, "plan", "plan (in memory)")
    _wrap(bake, "plan", "plan (in memory)")
    _wrap(gitutil.Pending, "result", "git status (wait: it ran during the copy)")
    _wrap(bake, "link_objects", "history: link the cached objects")
    _wrap(bake, "copy_tree", "copy the files")  # bake.copy_tree is treecopy.copy_tree
    _wrap(bake, "restat_index", "index from the cache")
    _wrap(bake, "write_files", "write the changed files")
    _wrap(bake, "write_json", "manifest")
    _wrap(bake, "remove_tree", "remove old --out")
    _wrap(commands, "bake", "rest of bake (staging, rename)")
    start = time.perf_counter()
    report = commands.apply(Context.here(), series, commands.ApplyOptions(vllm=version, out=out))
    total = time.perf_counter() - start
    if report.status != "baked":
        raise SystemExit(f"bake failed: {report.status}")
    print(json.dumps({"imports": T_IMPORTS, "apply": total, "parts": acc}))


if __name__ == "__main__":
    main()
