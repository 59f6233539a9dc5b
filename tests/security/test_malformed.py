"""Class 6: malformed input gives one line and exit 2, never a traceback.

Archives with impossible pax times, index answers of the wrong shape (and a relative URL
in a PEP 691 answer, which the spec allows: resolved, not refused), deeply nested TOML
and JSON, broken manifests and reports, outputs that cannot be written (checked before
the work starts), and bad option values.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import SourceError
from bakery.formats import unpack
from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import serve
from tests.support.series import make_series, series, udiff
from tests.support.trees import Tiny

Cli = Callable[..., Result]


@pytest.mark.parametrize("mtime", ["inf", "-inf", "nan", "1e30", "12abc"])
def test_pax_mtime_out_of_range(tmp_path: Path, mtime: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("t/f")
        info.size = 2
        info.pax_headers = {"mtime": mtime}
        tar.addfile(info, io.BytesIO(b"x\n"))
    dest = tmp_path / "x"
    dest.mkdir()
    with pytest.raises(SourceError, match="mtime"):
        unpack.unpack(buf.getvalue(), dest, name="a.tar", message="m\n")


def test_pax_mtime_in_the_far_past_is_kept_as_now(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("t/f")
        info.size = 2
        info.pax_headers = {"mtime": "-5.5"}
        tar.addfile(info, io.BytesIO(b"x\n"))
    dest = tmp_path / "x"
    dest.mkdir()
    unpack.unpack(buf.getvalue(), dest, name="a.tar", message="m\n")
    assert (dest / "f").stat().st_mtime > 1e9


def test_relative_url_in_a_pep691_answer_is_resolved(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        entry["url"] = "../../files/vllm-9.9.0.tar.gz"
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path), "--vllm", "9.9.0", "--out", "out")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "vllm" / "x.py").read_text().startswith("a\nB\n")


@pytest.mark.parametrize(
    "answer",
    [
        [1, 2],
        {"files": {"vllm-9.9.0.tar.gz": 1}},
        {"files": [1]},
        {"files": [{"filename": 1, "url": "x"}]},
        {"files": [{"filename": "vllm-9.9.0.tar.gz", "url": "x", "hashes": ["a"]}]},
        {"files": [{"filename": "vllm-9.9.0.tar.gz", "url": "x", "hashes": {"sha256": 5}}]},
        {"files": [{"filename": "vllm-9.9.0.tar.gz", "url": "x", "size": "big"}]},
        "nested",
    ],
)
def test_index_answer_of_the_wrong_shape(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: object
) -> None:
    with serve(tmp_path / "idx") as srv:
        srv.index(answer)
        if answer == "nested":  # RecursionError inside json.loads
            page = tmp_path / "idx" / "simple" / "vllm" / "index.html"
            page.write_text("[" * 100_000 + "]" * 100_000)
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("check", series(tmp_path), "--vllm", "9.9.0")
    refused(r)


def test_deeply_nested_toml(cli: Cli, home: Path) -> None:
    make_series(home, "s", {"01-a.diff": udiff("x.py", "a\n", "b\n")}, toml="x = " + "[" * 100_000)
    r = cli("check", "s")
    refused(r, "series.toml")


@pytest.mark.parametrize(
    "manifest",
    ["{", "[]", '{"diffs": 5}', '{"diffs": [{"name": 1}]}', '{"vllm": "x"}', "[" * 100_000],
)
def test_broken_manifest(cli: Cli, tiny: Tiny, tmp_path: Path, manifest: str) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    (out / ".bakery" / "manifest.json").write_text(manifest)
    r = cli("refresh", "demo", "--tree", out, "--release", "1.0")
    refused(r)


@pytest.mark.parametrize(
    "report",
    [
        "[]",
        '{"releases": 5}',
        '{"releases": [{"version": 1}]}',
        '{"series": {"name": "s"}, "vllm": {}, "status": "x", "diffs": [5]}',
        '{"series": 5, "vllm": {"version": "1.0"}, "status": "baked"}',
        "[" * 100_000,
        "\udcff",
    ],
)
def test_broken_reports(cli: Cli, tmp_path: Path, report: str) -> None:
    p = tmp_path / "r.json"
    p.write_bytes(report.encode("utf-8", "surrogateescape"))
    r = cli("summarize", p)
    refused(r, "r.json")


def test_out_whose_parent_is_a_file(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "afile" / "out")
    refused(r, "--out")
    assert (tmp_path / "afile").read_text() == "x"


def test_out_in_a_folder_that_cannot_be_written(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    """An --out whose folder cannot take it is refused in one line, and nothing of the
    user's changes. Root writes into read-only folders, so as root the folder that
    cannot take it is one below a file (for root too, no folder can be made there)."""
    (tmp_path / "afile").write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.geteuid() == 0:
            r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "afile" / "d" / "out")
            refused(r, "--out")
            assert (tmp_path / "afile").read_text() == "x"
        else:
            r = cli("apply", "demo", "--vllm", tiny.src, "--out", ro / "out")
            refused(r, "permission denied")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("target", ["", ".", "adir", "afile/x.json"])
def test_json_target_checked_before_the_work(
    cli: Cli, tiny: Tiny, tmp_path: Path, target: str
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out", "--json", target)
    refused(r, "--json")
    assert not (tmp_path / "out").exists()  # refused before the bake, not after it


def test_matrix_since_not_a_version(cli: Cli, tiny: Tiny) -> None:
    r = cli("matrix", "demo", "--since", "foo")
    refused(r, "--since", "foo")


@pytest.mark.parametrize("option", ["--json", "--markdown", "--junit"])
def test_matrix_report_path_checked_before_the_matrix(
    cli: Cli, tiny: Tiny, tmp_path: Path, option: str
) -> None:
    (tmp_path / "afile").write_text("x")
    r = cli(
        "matrix",
        "demo",
        "--vllm",
        "9.9.0",
        "--out",
        tmp_path / "m",
        option,
        tmp_path / "afile" / "r",
    )
    refused(r, option)
    assert not (tmp_path / "m").exists()


def test_summarize_markdown_unwritable(cli: Cli, tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"series": "s", "ok": True, "releases": []}))
    r = cli("summarize", p, "--markdown", tmp_path)
    refused(r, "--markdown", "folder")
