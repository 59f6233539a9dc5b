"""The rank pools of a session (:mod:`bakery.testing.plugin`'s ``rank_pool`` fixture):
which tests need ranks and of which world (``rank_world``), multi-rank tests last, the
modules and warm-ups each world's ranks import and run first, the worlds started as
collection ends, and the pools themselves (``RankPools``: one per world, over
:mod:`bakery.testing.dist`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any


def rank_world(item: Any) -> int | None:
    """The world size a collected test's ranks have (its ``ranks`` parameter; 2 where it
    names none), or None for a test without ``rank_pool``."""
    if "rank_pool" not in getattr(item, "fixturenames", ()):
        return None
    callspec = getattr(item, "callspec", None)
    world = callspec.params.get("ranks") if callspec is not None else None
    return world if isinstance(world, int) else 2


def ranks_last(items: Sequence[Any]) -> list[Any]:
    """The tests in their order, but every multi-rank test after the single-rank ones,
    by world size (a stable sort): the ranks, spawned when collection ends, start up
    while the single-rank tests run instead of keeping the first multi-rank test
    waiting, and each world's tests run together."""
    return sorted(items, key=lambda item: rank_world(item) or 0)


def rank_modules(items: Sequence[Any]) -> list[tuple[str, str | None]]:
    """The modules of the collected multi-rank tests, in order, each once: every rank
    imports them while it starts (rank.warm_rank), not in its first task."""
    found: dict[str, str | None] = {}
    for item in items:
        module = getattr(item, "module", None)
        if rank_world(item) is not None and module is not None:
            found.setdefault(module.__name__, getattr(module, "__file__", None))
    return list(found.items())


#: A module of multi-rank tests may define this ``fn(ctx)``: on a GPU, every rank of the
#: worlds started early runs it once before its first test (RankPool.warm_up).
WARMUP = "bakery_rank_warmup"


def rank_warmups(items: Sequence[Any]) -> list[Any]:
    """The :data:`WARMUP` functions of the collected multi-rank tests' modules, each once."""
    found: dict[str, Any] = {}
    for item in items:
        module = getattr(item, "module", None)
        warmup = getattr(module, WARMUP, None)
        if module is not None and rank_world(item) is not None and callable(warmup):
            found.setdefault(module.__name__, warmup)
    return list(found.values())


def prestart_worlds(items: Sequence[Any], cores: int) -> list[int]:
    """The world sizes whose ranks start when collection ends, smallest first: every size
    the collected rank tests use while their processes fit the cores beside pytest's
    own, else the smallest alone (on 2 cores a world 4 that starts early slows the
    single-rank tests down by as much as it saves its first test: 38.4 s against 37.9 s
    of a 0.34.0 verify's wall)."""
    ordered = sorted({w for w in map(rank_world, items) if w is not None})
    return ordered if sum(ordered) < cores else ordered[:1]


class RankPools:
    """One :class:`~bakery.testing.dist.RankPool` per world size, shared by the session.

    Spawning ranks (Python, torch, Triton, the test module) costs seconds; sharing a
    pool across test modules pays that once. A pool that had to be killed restarts
    on its next task."""

    def __init__(self, link: Any = None) -> None:
        #: the other nodes (bakery.testing.headlink.HeadLink): some ranks run there
        self.link = link
        self._pools: dict[int, Any] = {}
        #: world size -> the thread starting (and warming up) its ranks
        self._starting: dict[int, threading.Thread] = {}
        #: what every rank imports while it starts (:func:`rank_modules`)
        self._modules: tuple[tuple[str, str | None], ...] = ()
        #: world size -> what went wrong in its warm-up (RankPool.warm_up)
        self.warmup_failures: dict[int, str] = {}

    def prestart(
        self,
        worlds: Sequence[int],
        modules: Sequence[tuple[str, str | None]] = (),
        warmups: Sequence[Any] = (),
    ) -> None:
        """Start these worlds' ranks, each world from a thread of its own: a rank's start
        waits for the fork server's imports (seconds of torch), which the tests need not
        wait for, and a world's first test waits only for its own. Every rank of the
        session, these and any started later, imports ``modules`` before its first task
        (rank.warm_rank); these run ``warmups`` too (:func:`rank_warmups`)."""
        self._modules = tuple(modules)
        if not worlds:
            return
        from bakery.testing.dist import start_rank_server

        start_rank_server()
        for world in worlds:
            thread = threading.Thread(
                target=self._start,
                args=(world, self(world), tuple(warmups)),
                name=f"bakery-rank-start-{world}",
                daemon=True,
            )
            self._starting[world] = thread
            thread.start()

    def _start(self, world: int, pool: Any, warmups: Sequence[Any]) -> None:
        try:
            pool.start()
            failure = pool.warm_up(warmups) if warmups else None
        except Exception as e:  # the world's first test starts it again, and meets it
            pool.close(polite=False)
            lines = str(e).strip().splitlines()
            failure = f"{type(e).__name__}: {lines[0] if lines else ''}"
        if failure is not None:
            self.warmup_failures[world] = failure

    def _started(self, world: int | None = None) -> None:
        """Wait for the start of this world's ranks (of every world: None)."""
        for w in [world] if world is not None else list(self._starting):
            thread = self._starting.get(w)
            if thread is not None and thread is not threading.current_thread():
                thread.join()
                self._starting.pop(w, None)

    def __call__(self, world_size: int = 2) -> Any:
        from bakery.testing.dist import RankPool

        self._started(world_size)
        if world_size not in self._pools:
            self._pools[world_size] = RankPool(world_size, modules=self._modules, link=self.link)
        return self._pools[world_size]

    def close(self) -> None:
        """The session is over: every pool's ranks are killed at once (BENCHMARKS.md:
        their polite shutdown took a second of every verify's wall)."""
        from bakery.testing.dist import stop_rank_server

        self._started()
        for pool in self._pools.values():
            pool.kill()
        for pool in self._pools.values():
            pool.close(polite=False)
        self._pools.clear()
        stop_rank_server()
