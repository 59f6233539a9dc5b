"""Class 12 (the rest): malformed series data and index answers are one line.

``known-defects.toml`` and ``expectations.toml`` were read inside the pytest session,
where a malformed file ended in "pytest stopped: internal error"; they are now checked,
every entry, before pytest starts. An index answer whose file URL holds a newline (or any
control character) is refused with one line before anything is fetched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.archives import sdist
from tests.support.cli import refused
from tests.support.index import serve
from tests.support.series import series
from tests.support.trees import Tiny, write_files

Cli = Callable[..., Result]
TREE_TEST = "def test_x(baked_tree):\n    assert baked_tree.is_dir()\n"


@pytest.fixture
def baked(cli: Cli, tiny: Tiny, tmp_path: Path) -> Path:
    write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
    return tmp_path / "out"


@pytest.mark.parametrize(
    "text",
    [
        "defect = [1, 2]\n",
        "defect = 5\n",
        "[[defect]]\nid = 'x'\nsummary = 's'\ninput = 'i'\nreleases = [1]\n",
        "[[defect]]\nid = 'x'\n",
        "not toml = = =\n",
        "a = " + "[" * 5000 + "]" * 5000 + "\n",
        "[[defect]]\nid = 'x'\nsummary = 's'\ninput = 'i'\nreleases = []\nevil = 1\n",
    ],
    ids=["list-of-ints", "int", "bad-releases", "missing-keys", "not-toml", "deep", "unknown"],
)
def test_malformed_known_defects_is_one_line(cli: Cli, tiny: Tiny, baked: Path, text: str) -> None:
    (tiny.series / "known-defects.toml").write_text(text)
    r = cli("verify", "demo", "--tree", baked, "--interpret")
    line = refused(r, "known-defects.toml")
    assert "internal error" not in line


@pytest.mark.parametrize(
    "text",
    [
        'release = ["0.1"]\n',
        '[release]\n"1.0" = 5\n',
        '[release."1.0"]\nskips = "test_x"\n',
        '[release."1.0"]\nskips_gpu = [1]\n',
        "release = {",
    ],
    ids=["list", "not-a-table", "skips-string", "skips-ints", "not-toml"],
)
def test_malformed_expectations_is_one_line(cli: Cli, tiny: Tiny, baked: Path, text: str) -> None:
    (tiny.series / "expectations.toml").write_text(text)
    r = cli("verify", "demo", "--tree", baked, "--interpret")
    line = refused(r, "expectations.toml")
    assert "internal error" not in line


@pytest.mark.parametrize(
    "url", ["/files/vllm-9.9.0.tar.gz\nX-Evil: 1", "/files/vllm-9.9.0.tar.gz\r", "/fi les/x"]
)
def test_index_url_with_a_newline_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        entry["url"] = srv.url + url
        srv.index([entry])
        monkeypatch.setenv("BAKERY_INDEX_URL", srv.url + "/simple")
        r = cli("apply", series(tmp_path), "--vllm", "9.9.0", "--out", "out")
        assert not any("/files/" in s for s in srv.seen)  # nothing was fetched
    line = refused(r, "control character")
    assert "\r" not in line and "X-Evil" not in r.stderr.replace(line, "")
    assert not (tmp_path / "out").exists()
