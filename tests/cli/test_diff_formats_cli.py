"""The diff formats of tests/patch/test_formats.py through the CLI: what a bake says about
a CRLF copy or a diff's own strip (a note, once, never under -q), and the JSON's notes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from rich.console import Console

from bakery.cli import render
from bakery.model.report import BakeReport, DiffResult
from tests.support.paths import SAMPLES
from tests.support.series import make_series
from tests.support.trees import cache_release

BEFORE = {
    "vllm/__init__.py": "",
    "vllm/m.py": "import os\n\n\ndef f():\n    return 1\n",
    "vllm/legacy.py": "OLD = 1\nGONE = 2\n",
}


def test_a_crlf_copy_bakes_with_one_note(home: Path, cli: Callable[..., Result]) -> None:
    cache_release("0.32.0", BEFORE)
    make_series(
        home,
        "s",
        {"01-x.diff": (SAMPLES / "crlf_copy.diff").read_bytes()},
        'base = "0.32"\n',  # the release 0.32.0, as `--vllm 0.32` is
    )
    out = home / "baked"
    res = cli("apply", "s", "--out", out, "--json", home / "r.json")
    assert res.exit_code == 0, res.output
    assert (out / "vllm" / "myteam_ext.py").read_bytes() == b'"""A new module."""\n\nEXT = 2\n'
    assert not (out / "vllm" / "legacy.py").exists()
    assert b"\r" not in (out / "vllm" / "m.py").read_bytes()
    assert res.output.count("a CRLF copy") == 1
    (diff,) = json.loads((home / "r.json").read_text())["diffs"]
    assert diff["notes"] == [
        "a CRLF copy: the trailing CR of its lines was dropped, as GNU patch does "
        "(`--binary` keeps them): vllm/legacy.py, vllm/m.py, vllm/myteam_ext.py"
    ]
    quiet = cli("-q", "check", "s")
    assert quiet.exit_code == 0 and "CRLF" not in quiet.output


def test_notes_print_once_and_not_under_quiet() -> None:
    note = "contract: vllm/x.py: upstream changed `f`; resolved by the port (its code fits)"
    report = BakeReport("s", "launcher/s", status="checked", version="0.33.0")
    report.diffs.append(DiffResult("01-x.diff", "0" * 64, warnings=[note, note, "moved-def: y"]))
    for quiet, notes in ((False, 1), (True, 0)):
        buf = io.StringIO()
        render.bake_report(Console(file=buf, width=300), report, quiet=quiet)
        text = buf.getvalue()
        assert text.count("resolved by the port") == notes, text
        assert text.count("moved-def: y") == 1


def test_one_hunk_is_one_hunk(home: Path, cli: Callable[..., Result]) -> None:
    make_series(home, "s", {"01-x.diff": (SAMPLES / "diff_uN.diff").read_bytes()})
    r = cli("list", "s")
    assert r.exit_code == 0, r.output
    assert "01-x.diff  (3 hunks)" in r.output
    make_series(home, "t", {"01-y.diff": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"})
    assert "01-y.diff  (1 hunk)" in cli("list", "t").output


def test_a_failed_new_file_says_hunk_1_without_line_0() -> None:
    from bakery.patch.engine import FileResult, HunkResult, Outcome

    report = BakeReport("s", "launcher/s", status="conflict", version="0.33.0")
    gone = HunkResult(
        1, Outcome.FAILED, 0, 0, 0, reason="the new file already exists with other content"
    )
    two = [HunkResult(1, Outcome.FAILED, 3, 0, 0), HunkResult(2, Outcome.FAILED, 9, 0, 0)]
    report.diffs.append(
        DiffResult(
            "01-x.diff",
            "0" * 64,
            files=[FileResult("vllm/new.py", [gone], None), FileResult("vllm/m.py", two, None)],
        )
    )
    buf = io.StringIO()
    render.bake_report(Console(file=buf, width=300), report, quiet=True)
    text = buf.getvalue()
    assert "01-x.diff: vllm/new.py: hunk 1 does not apply" in text
    assert "line 0" not in text
    assert "01-x.diff: vllm/m.py: hunks 1 (line 3), 2 (line 9) do not apply" in text
