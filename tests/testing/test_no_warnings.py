"""No Python warning from bakery's own code reaches a verify's output (issue 48): pytest's
entry is called the way pytest 9.1 wants (not the deprecated ``console_main``), and the
probe of NumPy's array-to-int rule says nothing on a NumPy that only warns."""

from __future__ import annotations

import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

from bakery.testing import compat


def test_the_pytest_entry_runs_with_warnings_as_errors(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_one.py").write_text("def test_one():\n    assert True\n")
    (tests / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "bakery.testing.pytest_main"]
        + ["-p", "no:cacheprovider", f"-c={tests / 'pytest.ini'}", str(tests)],
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang, not a measure of speed
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stderr + done.stdout
    assert "1 passed" in done.stdout.splitlines()[-1]


class _Warns:
    """A 1-element array of NumPy 1.25-2.3: int() works, with a DeprecationWarning."""

    def __int__(self) -> int:
        warnings.warn("Conversion of an array with ndim > 0", DeprecationWarning, stacklevel=2)
        return 1


class _Refuses:
    """NumPy >= 2.4: int() of a 1-element array raises."""

    def __int__(self) -> int:
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")


@pytest.mark.parametrize(("array", "refuses"), [(_Warns, False), (_Refuses, True)])
def test_the_numpy_probe_says_nothing(
    monkeypatch: pytest.MonkeyPatch, array: type, refuses: bool
) -> None:
    # a stand-in NumPy, to isolate the probe from the NumPy installed here (2.4: refuses)
    fake = types.ModuleType("numpy")
    fake.array = lambda _values: array()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numpy", fake)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compat._numpy_refuses_array_to_int() is refuses
