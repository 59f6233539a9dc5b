"""verify's pytest entry (bakery.testing.pytest_main): pytest's exit code and every line
of its output, written to a pipe, as ``python -m pytest`` gives them; then the process
ends without Python's teardown (no atexit handler runs, a non-daemon thread a test left
behind does not hold the run open)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bakery.verifying.runner import PYTEST_MAIN

TESTS = """
import atexit, threading

def _at_exit():
    open({marker!r}, "w").close()

def test_passes():
    atexit.register(_at_exit)
    threading.Thread(target=threading.Event().wait).start()  # non-daemon, never ends

def test_{second}():
    assert {outcome}
"""


def run(tmp_path: Path, *args: str, outcome: str = "True") -> subprocess.CompletedProcess[str]:
    marker = tmp_path / "atexit-ran"
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    second = "passes_too" if outcome == "True" else "fails"
    body = TESTS.format(marker=str(marker), second=second, outcome=outcome)
    (tests / "test_it.py").write_text(textwrap.dedent(body))
    (tests / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", PYTEST_MAIN, "-p", "no:cacheprovider", "-p", "no:randomly"]
    return subprocess.run(
        [*command, f"-c={tests / 'pytest.ini'}", *args, str(tests)],
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang, not a measure of speed
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    ("outcome", "code", "summary"), [("True", 0, "2 passed"), ("False", 1, "1 failed, 1 passed")]
)
def test_exit_code_and_output_are_pytests(
    tmp_path: Path, outcome: str, code: int, summary: str
) -> None:
    done = run(tmp_path, "-rA", outcome=outcome)
    assert done.returncode == code
    assert summary in done.stdout.splitlines()[-1]  # the last line made it through the pipe
    assert not (tmp_path / "atexit-ran").exists()  # Python's own exit did not run


def test_a_usage_error_keeps_its_code_and_message(tmp_path: Path) -> None:
    done = run(tmp_path, "--no-such-option")
    assert done.returncode == 4
    assert "--no-such-option" in done.stderr
