"""verify's default workers under the interpreter: half the cores (the other half runs the
tests' rank processes), at least 1, at most 4; one on a GPU."""

from __future__ import annotations

import pytest

from bakery.verifying import plan as runner


@pytest.mark.parametrize(("cores", "jobs"), [(1, 1), (2, 1), (3, 1), (4, 2), (8, 4), (64, 4)])
def test_half_the_cores_under_the_interpreter(
    monkeypatch: pytest.MonkeyPatch, cores: int, jobs: int
) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert runner.default_jobs(interpret=True) == jobs


def test_one_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert runner.default_jobs(interpret=False) == 1
