"""A rank's warm-up (rank.warm_rank, rankpools.rank_modules): every rank imports the modules
of the session's multi-rank tests before it says it is ready, so its first task does not;
a module that fails to import there does not keep the pool from starting, and the task
that needs it raises the module's own error, with its traceback.

The series' warm-up tasks (``bakery_rank_warmup``, rankpools.rank_warmups, RankPool.warm_up):
a world started early runs them on every rank before its first test gets the pool; one
that raises or hangs is reported in one line, and the tests get fresh ranks."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from bakery.testing.dist import RankError, RankPool
from bakery.testing.rankpools import RankPools, rank_modules, rank_warmups


def write_module(tmp_path: Path, name: str, body: str) -> tuple[ModuleType, Path]:
    """A test module off sys.path (as pytest's importlib mode imports one), imported here
    under ``name``; every import of it, in any process, appends its pid to ``imports``."""
    path = tmp_path / f"{name}.py"
    log = tmp_path / "imports"
    path.write_text(
        "import os\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        f"OWNER = {os.getpid()}\n" + body
    )
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, log


def rank_imports(log: Path) -> list[int]:
    """The pids that imported the module, this process left out."""
    return [int(pid) for pid in log.read_text().split() if int(pid) != os.getpid()]


def test_ranks_import_the_modules_before_they_are_ready(
    tmp_path: Path, cpu_ranks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, log = write_module(tmp_path, "warm_target", "def pid(ctx):\n    return os.getpid()\n")
    monkeypatch.setitem(sys.modules, "warm_target", module)
    with RankPool(2, timeout=60, modules=[("warm_target", str(module.__file__))]) as pool:
        pool.wait_ready()
        imported = rank_imports(log)  # no task sent yet
        assert len(imported) == 2 and len(set(imported)) == 2
        assert sorted(pool.run(module.pid)) == sorted(imported)
    assert rank_imports(log) == imported  # the task found the module imported


def test_a_module_that_fails_in_the_warm_up_fails_its_task_with_its_own_error(
    tmp_path: Path, cpu_ranks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import fails in the ranks only (not here): the pool still starts, and the task
    raises the import's error, not a half-run module's missing attribute."""
    body = (
        "if os.getpid() != OWNER:\n"
        "    raise RuntimeError('broken in a rank')\n"
        "def pid(ctx):\n"
        "    return os.getpid()\n"
    )
    module, log = write_module(tmp_path, "warm_broken", body)
    monkeypatch.setitem(sys.modules, "warm_broken", module)
    with RankPool(2, timeout=60, modules=[("warm_broken", str(module.__file__))]) as pool:
        pool.wait_ready()
        assert len(rank_imports(log)) == 2
        with pytest.raises(RankError) as raised:
            pool.run(module.pid)
    message = str(raised.value)
    assert "Traceback" in message and "RuntimeError: broken in a rank" in message
    assert "AttributeError" not in message


def item(name: str, path: str | None, world: int | None) -> Any:
    """What rank_modules reads of a collected item: fixtures, parameters, module."""
    names = ("rank_pool", "ranks") if world else ("device",)
    callspec = SimpleNamespace(params={"ranks": world}) if world else None
    module = SimpleNamespace(__name__=name, __file__=path)
    return SimpleNamespace(fixturenames=names, callspec=callspec, module=module)


def test_rank_modules_are_the_multi_rank_tests_modules_once_in_order() -> None:
    items = [
        item("test_single", "/t/test_single.py", None),
        item("test_b", "/t/test_b.py", 2),
        item("test_a", "/t/test_a.py", 4),
        item("test_b", "/t/test_b.py", 4),
    ]
    assert rank_modules(items) == [("test_b", "/t/test_b.py"), ("test_a", "/t/test_a.py")]
    assert rank_modules(items[:1]) == []


WARM = (
    "def pid(ctx):\n"
    "    return os.getpid()\n"
    "def bakery_rank_warmup(ctx):\n"
    "    with open(WARMED, 'a') as f:\n"
    "        f.write(f'{os.getpid()}\\n')\n"
    "def broken_warmup(ctx):\n"
    "    raise RuntimeError('the warm-up broke')\n"
    "def stuck_warmup(ctx):\n"
    "    import torch, torch.distributed as dist\n"
    "    if ctx.rank == 0:  # its peer never joins\n"
    "        dist.all_reduce(torch.zeros(1), group=ctx.group)\n"
)


def warm_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    warmed = tmp_path / "warmed"
    module, _ = write_module(tmp_path, "warm_hooks", f"WARMED = {str(warmed)!r}\n" + WARM)
    monkeypatch.setitem(sys.modules, "warm_hooks", module)
    return module, warmed


def test_a_world_runs_its_warmups_on_every_rank_before_its_first_test(
    tmp_path: Path, cpu_ranks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, warmed = warm_module(tmp_path, monkeypatch)
    pools = RankPools()
    try:
        pools.prestart([2], [("warm_hooks", module.__file__)], [module.bakery_rank_warmup])
        pool = pools(2)  # what a test's fixture asks for: it waits for the warm-up
        ran = [int(pid) for pid in warmed.read_text().split()]
        assert sorted(ran) == sorted(pool.run(module.pid))
        assert pools.warmup_failures == {} and pool.starts == 1
    finally:
        pools.close()


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        ("broken_warmup", "RuntimeError: the warm-up broke"),
        ("stuck_warmup", "gave no answer to stuck_warmup in time"),
    ],
)
def test_a_failed_warmup_is_one_line_and_the_tests_get_fresh_ranks(
    tmp_path: Path, cpu_ranks: None, monkeypatch: pytest.MonkeyPatch, hook: str, said: str
) -> None:
    monkeypatch.setattr("bakery.testing.dist.GRACE", 0.5)  # a stuck peer: seconds, not 5
    module, _ = warm_module(tmp_path, monkeypatch)
    pools = RankPools()
    try:
        pools.prestart([2], [], [getattr(module, hook)])
        pool = pools(2)
        (failure,) = pools.warmup_failures.values()
        assert failure.startswith(f"warm_hooks.{hook}: ") and said in failure
        assert "\n" not in failure
        assert len(set(pool.run(module.pid))) == 2 and pool.starts == 2
    finally:
        pools.close()


def test_rank_warmups_are_the_multi_rank_tests_modules_hooks_once() -> None:
    def hook(ctx: Any) -> None:
        return None

    with_hook = SimpleNamespace(__name__="test_b", __file__="/t/test_b.py", bakery_rank_warmup=hook)
    items = [
        item("test_single", "/t/test_single.py", None),
        SimpleNamespace(fixturenames=("rank_pool",), callspec=None, module=with_hook),
        SimpleNamespace(fixturenames=("rank_pool",), callspec=None, module=with_hook),
        item("test_a", "/t/test_a.py", 4),  # no hook
    ]
    assert rank_warmups(items) == [hook]
    single = SimpleNamespace(fixturenames=("device",), callspec=None, module=with_hook)
    assert rank_warmups([single]) == []


def test_a_world_that_cannot_start_is_one_line_and_its_test_starts_it_again(
    cpu_ranks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start thread's own failure (here the first start, made to raise) is recorded,
    not printed as a thread's traceback; the world's first test starts real ranks."""
    real_start = RankPool.start
    calls: list[int] = []

    def start_once_broken(pool: RankPool) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("no processes left\nsecond line")
        real_start(pool)

    monkeypatch.setattr(RankPool, "start", start_once_broken)
    pools = RankPools()
    try:
        pools.prestart([2])
        pool = pools(2)
        assert pools.warmup_failures == {2: "OSError: no processes left"}
        assert len(set(pool.run(rank_of))) == 2
    finally:
        pools.close()


def rank_of(ctx: Any) -> int:
    return int(ctx.rank)
