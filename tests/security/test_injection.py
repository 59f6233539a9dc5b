"""Class 5: injection into CI logs and reports.

No text taken from input (diff names, file paths in diffs, series.toml fields, index
fields, report fields) may start a printed line with ``::`` (a GitHub Actions workflow
command) or carry a control character into the terminal. Markdown escapes ``|`` and
HTML; JUnit XML stays well-formed for any name. One sanitiser (bakery.safety.text) does
all of it; CILineGuard sees every line both consoles print.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given
from hypothesis import strategies as st

from bakery.reports import matrix as mx
from bakery.safety.text import CILineGuard, clean, md_cell
from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import serve
from tests.support.series import make_series, series, udiff
from tests.support.trees import Tiny

Cli = Callable[..., Result]
HOSTILE = "\x1b[2J\r::error file=x::pwned\n::set-env name=X::1\x07|<img src=x onerror=alert(1)>"


def assert_inert(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), repr(line)
    for c in text:
        assert c == "\n" or (ord(c) >= 32 and ord(c) != 127), repr(text)


def test_clean_and_md_cell() -> None:
    out = clean(HOSTILE)
    assert "\n" not in out and "\x1b" not in out and "\\x1b" in out
    cell = md_cell(HOSTILE)
    assert "<img" not in cell and "|" not in cell.replace("\\|", "")
    assert clean("::warning::x").startswith("\\::")
    assert clean("a::b") == "a::b"  # only a line start is a workflow command


def test_line_guard_across_writes() -> None:
    buf = io.StringIO()
    g = CILineGuard(lambda: buf)
    for chunk in ["ok\n  :", ":error::x\n", ":", ":y\na::b\n", "  ", "::z", "\n"]:
        g.write(chunk)
    g.flush()
    assert_inert(buf.getvalue())
    assert "a::b" in buf.getvalue() and "\\::z" in buf.getvalue()


@given(st.text(alphabet=" \t:\nab\r", max_size=40), st.lists(st.integers(1, 6), max_size=20))
def test_line_guard_any_cut_gives_the_same_inert_text(text: str, cuts: list[int]) -> None:
    whole, parts = io.StringIO(), io.StringIO()
    g = CILineGuard(lambda: whole)
    g.write(text)
    g.flush()
    h = CILineGuard(lambda: parts)
    i = 0
    for n in cuts + [len(text)]:
        h.write(text[i : i + n])
        i += n
    h.write(text[i:])
    h.flush()
    assert whole.getvalue() == parts.getvalue()
    for line in whole.getvalue().replace("\r", "\n").split("\n"):
        assert not line.lstrip(" \t").startswith("::")


def test_diff_name_with_workflow_command_and_escapes(cli: Cli, tiny: Tiny) -> None:
    src = tiny.diff_path(0)
    src.rename(src.with_name("01-\x1b[31m::error::pwned.diff"))
    r = cli("check", "demo", "--vllm", tiny.src)
    assert r.exit_code == 0, r.output
    assert "pwned" in r.stdout
    assert_inert(r.stdout)
    assert_inert(r.stderr)


def test_diff_name_with_a_newline_in_an_error_line(cli: Cli, tiny: Tiny) -> None:
    src = tiny.diff_path(0)
    src.rename(src.with_name("01-x\n::error::pwned.diff"))
    r = cli("check", "demo", "--vllm", tiny.src)
    refused(r)
    assert_inert(r.stderr)


def test_file_path_inside_a_diff(cli: Cli, home: Path, tmp_path: Path) -> None:
    make_series(
        home,
        "s",
        {"01-new.diff": udiff("::error file=a::pwned.py", "", "x = 1\n", "a", "b")},
        toml='strip = 1\nroot = ""\n',
    )
    (tmp_path / "tree").mkdir()
    r = cli("check", "s", "--vllm", tmp_path / "tree")
    assert "pwned" in r.output
    assert_inert(r.stdout)
    assert_inert(r.stderr)


def test_series_toml_fields(cli: Cli, home: Path) -> None:
    make_series(
        home,
        "s",
        {"01-a.diff": udiff("x.py", "a\n", "b\n")},
        toml=f"description = {json.dumps(HOSTILE)}\n",
    )
    r = cli("list", "s")
    assert r.exit_code == 0, r.output
    assert "pwned" in r.stdout
    assert_inert(r.stdout)


def test_index_fields_in_an_error_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        entry["hashes"] = {"sha256": HOSTILE}
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("check", series(tmp_path), "--vllm", "9.9.0")
    refused(r, "malformed sha256")
    assert_inert(r.stderr)


def _hostile_report(path: Path) -> Path:
    report = {
        "series": HOSTILE,
        "ok": False,
        "releases": [
            {
                "version": "1.0" + HOSTILE,
                "status": "conflict",  # statuses are typed: a hostile one is refused
                "port": HOSTILE,
                "error": HOSTILE,
                "verify": None,
                "seconds": 1.0,
                "diffs": [
                    {
                        "name": "01-" + HOSTILE,
                        "status": "failed",
                        "files": [
                            {
                                "path": "p" + HOSTILE,
                                "hunks": [
                                    {
                                        "index": 1,
                                        "status": "failed",
                                        "line": 1,
                                        "offset": 0,
                                        "fuzz": 0,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path.write_text(json.dumps(report))
    return path


def test_summarize_markdown_escapes_pipes_and_html(cli: Cli, tmp_path: Path) -> None:
    rep = _hostile_report(tmp_path / "r.json")
    r = cli("summarize", rep, "--markdown", tmp_path / "s.md")
    assert r.exit_code == 1, r.output
    md = (tmp_path / "s.md").read_text()
    assert_inert(md)
    assert "<img" not in md
    rows = [ln for ln in md.splitlines() if ln.startswith("|")]
    widths = {ln.replace("\\|", "").count("|") for ln in rows}
    assert len(widths) == 1, rows  # no cell broke out of its column
    r = cli("summarize", rep)  # printed instead
    assert_inert(r.stdout)


def test_junit_is_well_formed_for_any_name(tmp_path: Path) -> None:
    nasty = "\x00\x01\x1b]]><!--&\"'\udcff\ud800" + HOSTILE
    _, rows = mx.rows_from_reports([_hostile_report(tmp_path / "r.json")])
    rows[0].error = nasty
    rows[0].diffs[0].name = nasty
    xml = mx.to_junit(nasty, rows)
    root = ET.fromstring(xml)
    names = [c.get("name") for c in root.iter("testcase")]
    assert any("\\x1b" in (n or "") for n in names)


def test_matrix_grid_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bakery.cli.app import out_console
    from bakery.cli.commands.matrix import matrix_grid

    _, rows = mx.rows_from_reports([_hostile_report(tmp_path / "r.json")])
    matrix_grid(out_console, HOSTILE, rows)
    assert_inert(capsys.readouterr().out)
