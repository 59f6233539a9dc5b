"""Where a verify's wall time goes, as a timeline of its pytest process (issue 27).

A pytest plugin, loaded with ``-p verify_timeline`` (``bench/`` on ``PYTHONPATH``) after
``bakery verify ... --``. It prints, at the end of the session, seconds since
``BENCH_T0`` (the wall clock when the caller started ``bakery verify``; else since this
process started) of: this process's start, the plugin's configure (torch imported on a
GPU), collection's end, the first test, every test call over 0.3 s, the session's end.
``BENCH_WARM_CUDA=1``: an experiment, CUDA's context made in a thread from the start.

    BENCH_T0=$(date +%s.%N) PYTHONPATH=src:bench bakery verify dcp2 --tree T -- -p verify_timeline
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

_marks: list[tuple[float, str]] = []


def _started() -> float:
    """This process's start, wall clock (Linux: /proc)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _mark(what: str) -> None:
    _marks.append((time.time(), what))


def _warm_cuda() -> None:
    import torch

    torch.ones(1, device="cuda")
    _mark("CUDA context ready (BENCH_WARM_CUDA's thread)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _marks.append((_started(), "pytest process started"))
    _mark("configure begins")
    if os.environ.get("BENCH_WARM_CUDA"):
        # an experiment: CUDA's context made in a thread while collection runs
        threading.Thread(target=_warm_cuda, daemon=True).start()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _mark("session starts (plugins configured)")


def pytest_collection_finish(session: pytest.Session) -> None:
    _mark(f"collected {len(session.items)} tests")


_first = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    global _first
    if _first:
        _first = False
        _mark(f"first test set up: {item.nodeid}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    start = time.time()
    yield
    if time.time() - start > 0.3:
        _marks.append((start, f"{item.nodeid} ran {time.time() - start:.2f}s"))


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    _mark("last test done, session finishing")
    yield
    _mark("session finished (pools closed)")


def pytest_unconfigure(config: pytest.Config) -> None:
    _mark("unconfigure")
    t0 = float(os.environ.get("BENCH_T0") or _started())
    for when, what in sorted(_marks):
        print(f"timeline {when - t0:7.2f}s  {what}", flush=True)
