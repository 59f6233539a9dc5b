"""Small releases the tests put into bakery's cache (no index needed), the base text
they share, and a series of one change over them (``launcher/s``, base 1.0.0)."""

from __future__ import annotations

from pathlib import Path

from tests.support.series import make_series, udiff
from tests.support.trees import cache_release as release

__all__ = ["BASE", "release", "series"]


BASE = "".join(f"line{i}\n" for i in range(1, 31))


def series(home: Path, before: str, after: str, path: str = "mod.py") -> Path:
    return make_series(
        home,
        "s",
        {"01-change.diff": udiff(path, before, after)},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\n',
    )
