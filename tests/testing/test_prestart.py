"""Which rank pools start when collection ends (rankpools.prestart_worlds): every world size
the rank tests use when their processes fit the cores, else the smallest alone; none
without rank tests. Whether the session's helpers start with it instead (plugin.starts_early:
the ranks' fork server, the CUDA context's thread, dcp2's TTIR probe): on a GPU, in the
main process, with 4 cores or more."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bakery.testing.plugin import EARLY_SERVER_CORES, starts_early
from bakery.testing.rankpools import prestart_worlds


def item(world: int | None = None, *, ranks: bool = True) -> Any:
    """What the function reads of a collected item: its fixture names and parameters."""
    names = ("rank_pool", "ranks") if ranks else ("device",)
    callspec = SimpleNamespace(params={"ranks": world}) if world is not None else None
    return SimpleNamespace(fixturenames=names, callspec=callspec)


MIXED = [item(ranks=False), item(4), item(2), item(4), item()]


@pytest.mark.parametrize(("cores", "worlds"), [(16, [2, 4]), (7, [2, 4]), (6, [2]), (2, [2])])
def test_every_world_when_it_fits_else_the_smallest(cores: int, worlds: list[int]) -> None:
    assert prestart_worlds(MIXED, cores) == worlds


def test_no_rank_tests_start_nothing() -> None:
    assert prestart_worlds([item(ranks=False), item(ranks=False)], 16) == []


def test_a_rank_test_without_a_world_parameter_is_world_2() -> None:
    assert prestart_worlds([item()], 16) == [2]
    assert prestart_worlds([item(8)], 16) == [8]


def config(*, interpret: bool, worker: bool = False) -> Any:
    """What starts_early reads of a pytest config: --bakery-interpret, workerinput."""
    options = {"--bakery-interpret": interpret}
    found = SimpleNamespace(getoption=options.__getitem__)
    if worker:
        found.workerinput = {"workerid": "gw0"}
    return found


@pytest.mark.parametrize(
    ("interpret", "worker", "cores", "early"),
    [
        (False, False, EARLY_SERVER_CORES, True),
        (False, False, 16, True),
        (False, False, EARLY_SERVER_CORES - 1, False),  # 2 cores: at collection's end
        (True, False, 16, False),  # Triton's interpreter
        (False, True, 16, False),  # an xdist worker
    ],
)
def test_helpers_start_early_on_a_gpu_host_with_cores(
    monkeypatch: pytest.MonkeyPatch, interpret: bool, worker: bool, cores: int, early: bool
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert starts_early(config(interpret=interpret, worker=worker)) is early
