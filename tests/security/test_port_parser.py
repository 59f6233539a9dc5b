"""Class 9: release content cannot crash or stall ``bakery port``.

The syntax merge parses release files with libcst, whose native parser dies of SIGSEGV
on a deeply nested literal and can take minutes on long expressions. It runs in a forked
child with a CPU-time and memory bound (bake/synchild.py); when the child crashes or
passes a bound, the file is merged by lines and the hunk's note says why: port still
ends with its report and its attempt. ``--lines-only`` means lines only, for the
attempt too.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.bake import synchild
from bakery.bake.synmerge import SyntaxConflict
from bakery.cli.app import app
from tests.support.archives import sdist as make_sdist
from tests.support.index import serve_index

MOD = "vllm/k.py"
BASE = "def pick(xs, k):\n    ys = sorted(xs)\n    return ys[:k]\n"
OURS = "def pick(xs, k, *, rev=False):\n    ys = sorted(xs, reverse=rev)\n    return ys[:k]\n"
THEIRS = "def pick(xs, k, key=None):\n    ys = sorted(xs, key=key)\n    return ys[:k]\n"
DEEP = "\nTABLE = " + "[" * 100_000 + "]" * 100_000 + "\n"
LONG = "".join(f"y{i} = " + " + ".join(f"a{j}" for j in range(300)) + "\n" for i in range(100))


def test_parser_crash_is_bounded() -> None:
    src = [x.encode() for x in (BASE + DEEP, OURS + DEEP, THEIRS + DEEP)]
    with pytest.raises(synchild.Bounded, match="crashed|nested"):
        synchild.merge_bounded(*src)


def test_parser_time_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synchild, "SYNTAX_SECONDS", 1)
    src = [x.encode() for x in (BASE + LONG, OURS + LONG, THEIRS + LONG)]
    with pytest.raises(synchild.Bounded, match="ran past"):
        synchild.merge_bounded(*src)


def test_child_answers_as_the_merge_does() -> None:
    merged = synchild.merge_bounded(BASE.encode(), OURS.encode(), THEIRS.encode())
    assert b"def pick(xs, k, key=None, *, rev=False):" in merged.content
    with pytest.raises(SyntaxConflict):
        synchild.merge_bounded(b"x = 1\n", b"x = 2\n", b"x = 3\n")


def _sdist(version: str, module: str) -> bytes:
    return make_sdist(version, files=2, modules={MOD: module})


def _udiff(before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(True), after.splitlines(True), f"a/{MOD}", f"b/{MOD}"
    )
    return "".join(lines)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    series = home / "launcher" / "s"
    (series / "diffs").mkdir(parents=True)
    (series / "tests").mkdir()
    (series / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (series / "diffs" / "01-rev.diff").write_text(_udiff(BASE + DEEP, OURS + DEEP))
    (series / "tests" / "test_k.py").write_text("def test_x():\n    pass\n")
    monkeypatch.setenv("BAKERY_HOME", str(home))
    monkeypatch.chdir(home)
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add("vllm-1.0.0.tar.gz", _sdist("1.0.0", BASE + DEEP))
        idx.add("vllm-1.1.0.tar.gz", _sdist("1.1.0", THEIRS + DEEP))
        yield home


def _port(*extra: str) -> tuple[Result, dict[str, object]]:
    r = CliRunner().invoke(app, ["port", "s", "--vllm", "1.1.0", "--json", "p.json", *extra])
    return r, json.loads(Path("p.json").read_text())


def test_port_of_a_release_that_crashes_the_parser_ends_with_its_report(home: Path) -> None:
    r, report = _port()
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    hunks = report["hunks"]
    assert isinstance(hunks, list) and hunks
    assert all("syntax merge stopped" in str(h.get("reason")) for h in hunks), [
        h.get("reason") for h in hunks
    ]
    assert report["failed_out"] and (home / str(report["failed_out"])).is_dir()


def test_lines_only_leaves_a_line_merged_attempt(home: Path) -> None:
    series = home / "launcher" / "s"
    (series / "diffs" / "01-rev.diff").write_text(_udiff(BASE, OURS))
    # a release the syntax merge would join: --lines-only must not
    import shutil

    shutil.rmtree(home.parent / "cache", ignore_errors=True)
    r, report = _port("--lines-only")
    assert r.exit_code == 1, r.output
    attempt = home / str(report["failed_out"])
    text = (attempt / MOD).read_text()
    assert "key=None, *, rev=False" not in text  # not merged by syntax
    hunks = report["hunks"]
    assert isinstance(hunks, list)
    statuses = {h["status"] for h in hunks}
    assert "merged-syntax" not in statuses
