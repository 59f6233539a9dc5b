"""Text from a series' data files is cleaned before it is printed (issue 46): a known-defect
id holding ESC, or a line that starts ``::error``, reached the terminal and a CI log raw.

Now a defect id is a plain name (refused otherwise, one line), every message that quotes
the series' data is cleaned where it is made (``SeriesDataError``), and the renderers
clean what they print from a verify result.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from rich.console import Console

from bakery.cli.commands.verify import verify_summary
from bakery.testing import expect
from bakery.verifying.runner import VerifyResult
from tests.support.trees import write_files

Cli = Callable[..., Result]
ENTRY = 'summary = "s"\ninput = "i"\nreleases = ["0.30.0"]\nmatch = "x"\n'
HOSTILE = [
    "\\u001b[31mred\\u001b[0m",
    "ok\\n::error file=a.py::pwned",
    "::error::pwned",
    "a b",
    "\\u009b31m",
    "x" * 101,
]


def _raw(output: str) -> list[str]:
    """What a terminal or a CI runner would act on: control characters, ``::`` lines."""
    bad = [c for c in output if ord(c) < 32 and c not in "\n" or 0x7F <= ord(c) <= 0x9F]
    lines = [ln for ln in output.splitlines() if re.match(r"\s*::", ln)]
    return [repr(c) for c in bad] + lines


@pytest.mark.parametrize("ident", HOSTILE)
def test_a_defect_id_that_is_no_plain_name_is_refused_cleanly(tmp_path: Path, ident: str) -> None:
    write_files(tmp_path, {"known-defects.toml": f'[[defect]]\nid = "{ident}"\n{ENTRY}'})
    with pytest.raises(expect.SeriesDataError, match="is not a plain name") as refused:
        expect.load_defects(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and not _raw(message)


def test_a_plain_id_is_taken(tmp_path: Path) -> None:
    write_files(tmp_path, {"known-defects.toml": f'[[defect]]\nid = "dcp2-mask_1.2+x"\n{ENTRY}'})
    assert list(expect.load_defects(tmp_path)) == ["dcp2-mask_1.2+x"]


@pytest.mark.parametrize(
    "text",
    [
        f'[[defect]]\nid = "a"\n"\\u001b[2J" = 1\n{ENTRY}',  # an unknown key
        f'[[defect]]\nid = "a"\nraises = "\\u001b]0;title\\u0007"\n{ENTRY}',
        f'[[defect]]\nid = "a"\n{ENTRY}'.replace('match = "x"', 'match = "(\\n::error::x"'),
    ],
)
def test_every_message_quoting_the_data_is_clean(tmp_path: Path, text: str) -> None:
    write_files(tmp_path, {"known-defects.toml": text})
    with pytest.raises(expect.SeriesDataError) as refused:
        expect.load_defects(tmp_path)
    assert not _raw(str(refused.value)) and "\n" not in str(refused.value)


def test_verify_of_a_series_with_a_hostile_id_prints_nothing_raw(
    cli: Cli, home: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    series = home / "launcher" / "s"
    write_files(
        series,
        {
            "series.toml": 'strip = 1\nroot = ""\n',
            "diffs/01-x.diff": "",
            "tests/test_x.py": "def test_x():\n    pass\n",
            "known-defects.toml": f'[[defect]]\nid = "{HOSTILE[1]}\\u001b[31m"\n{ENTRY}',
        },
    )
    tree = write_files(tmp_path / "tree", {"vllm/__init__.py": ""})
    r = cli("verify", "s", "--tree", tree)
    seen = capfd.readouterr()
    assert r.exit_code == 2, r.output
    assert "is not a plain name" in r.output
    for text in (r.output, seen.out, seen.err):
        assert not _raw(text), text


def test_the_verify_summary_cleans_defect_ids_from_a_result() -> None:
    """A result read back (a reused record, an older bakery's JSON) is rendered clean."""
    result = VerifyResult(
        exit_code=0, pytest_exit_code=0, passed=1, known_defects={"\x1b[31mred\n::error::x": 1}
    )
    out = io.StringIO()
    verify_summary(Console(file=out, width=200, color_system=None), result, [])
    text = out.getvalue()
    assert "known defect" in text and "\\x1b" in text
    assert not _raw(text), text
