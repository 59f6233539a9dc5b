"""``make bench`` rewrites BENCHMARKS.md with its own sections and keeps every other one
(bench.kept_sections): figures measured by hand, on the device or against earlier code,
survive each run, in their order, once."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

OLD = """# bakery benchmarks

Measured by `make bench` on an earlier day.

## Targets

- old target figures

## On the device, by hand

GPU figures.

## Runs

old runs

## Against earlier code, by hand

| a | b |
"""

GENERATED = """# bakery benchmarks

Measured by `make bench` today.

## Targets

- new target figures

## Runs

new runs

"""


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("bench")


def test_hand_sections_follow_the_new_ones_in_order(bench: ModuleType) -> None:
    kept = bench.kept_sections(OLD, GENERATED)
    assert kept == (
        "## On the device, by hand\n\nGPU figures.\n\n"
        "## Against earlier code, by hand\n\n| a | b |\n"
    )
    assert "old target figures" not in kept and "old runs" not in kept


def test_a_second_run_keeps_them_once(bench: ModuleType) -> None:
    first = GENERATED + bench.kept_sections(OLD, GENERATED)
    second = GENERATED + bench.kept_sections(first, GENERATED)
    assert second == first
    assert second.count("## On the device, by hand") == 1


def test_the_checked_in_file_keeps_every_section_it_did_not_write(bench: ModuleType) -> None:
    """Every section of today's BENCHMARKS.md not written by bench.py survives a rewrite."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    kept = bench.kept_sections(text, GENERATED)
    for heading in [line for line in text.splitlines() if line.startswith("## ")]:
        if heading not in GENERATED:
            assert heading in kept
