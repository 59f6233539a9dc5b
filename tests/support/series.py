"""Series folders and the diffs in them: ``launcher/<name>/`` in a project, a series of one
diff anywhere, and ``diff -u`` text of one file."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

X_PY = "".join(f"{c}\n" for c in "abcdefghij")


DIFF = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n d\n"

#: A series' expectations.toml with one probed feature, ``x`` (``FEATURE_X`` in vllm/a.py),
#: listed for 0.31.0-0.33.0 and not for 0.30.0.
FEATURE_X_RULES = (
    '[probe.x]\nfile = "vllm/a.py"\ncontains = "FEATURE_X"\n'
    '[release."0.30.0"]\nfeatures = []\n'
    '[release."0.31.0"]\nfeatures = ["x"]\n'
    '[release."0.32.0"]\nfeatures = ["x"]\n'
    '[release."0.33.0"]\nfeatures = ["x"]\n'
)


def make_series(
    home: Path, name: str, diffs: Mapping[str, str | bytes], toml: str | None = None
) -> Path:
    """launcher/<name>/ with diffs/ (and series.toml when given)."""
    folder = home / "launcher" / name
    (folder / "diffs").mkdir(parents=True)
    for fname, text in diffs.items():
        data = text.encode() if isinstance(text, str) else text
        (folder / "diffs" / fname).write_bytes(data)
    if toml is not None:
        (folder / "series.toml").write_text(toml)
    return folder


def udiff(path: str, before: str, after: str, old: str = "baked-ours", new: str = "baked") -> str:
    """A ``diff -u`` of one file, with dcp2's header prefixes by default."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"{old}/{path}",
            f"{new}/{path}",
        )
    )


def series(root: Path, diff: str = DIFF, toml: str = 'strip = 1\nroot = ""\n') -> Path:
    """root/series: one diff (by default vllm/x.py: b -> B, for the releases ``sdist``
    makes) and its series.toml."""
    s = root / "series"
    (s / "diffs").mkdir(parents=True, exist_ok=True)
    (s / "series.toml").write_text(toml)
    (s / "diffs" / "01-x.diff").write_text(diff)
    return s


def index_series(root: Path) -> Path:
    """A series of one diff (vllm/x.py: b -> B) for the releases ``sdist`` makes."""
    return series(root)
