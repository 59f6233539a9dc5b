"""Issue 45: a reversed diff (made as ``diff -u NEW OLD``) on the release the series' diffs
are made on is named reversed, never "already upstream: drop it from this release's port";
the same hunk on another release, whose file already has the change, is upstream's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.support.releases import BASE, release, series

CHANGED = BASE.replace("line10\n", "line10 changed\n")


def _hunk(cli: Callable[..., Result], version: str) -> tuple[Result, dict[str, object]]:
    r = cli("apply", "s", "--vllm", version, "--json", "r.json")
    (d,) = json.loads(Path("r.json").read_text())["diffs"]
    return r, d["files"][0]["hunks"][0]


def test_a_reversed_diff_on_its_own_base_is_named_reversed(
    home: Path, cli: Callable[..., Result]
) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    # the change BASE -> CHANGED, made as diff -u NEW OLD: its + side is the base's text
    series(home, CHANGED, BASE)
    r, hunk = _hunk(cli, "1.0.0")
    assert r.exit_code == 1, r.output
    assert hunk["status"] == "already-applied"
    assert str(hunk["reason"]).startswith("reversed: its new side is already in 1.0.0")
    assert "are swapped" in r.output and "drop the hunk" not in r.output


def test_the_same_hunk_on_another_release_is_upstream(
    home: Path, cli: Callable[..., Result]
) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": CHANGED})  # upstream took the series' change
    series(home, BASE, CHANGED)
    r, hunk = _hunk(cli, "1.1.0")
    assert r.exit_code == 1, r.output
    assert hunk["status"] == "already-applied" and "already upstream" in str(hunk["reason"])
    assert "reversed" not in r.output
