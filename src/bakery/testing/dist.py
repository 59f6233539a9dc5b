"""Real multi-rank runs for the bundled tests: a small pool of rank processes.

A :class:`RankPool` starts ``world_size`` processes once (forked from a fork server that
imported torch once: :func:`rank_context`) and joins them with
``torch.distributed``; tests then send it many small tasks. That keeps the cost of
starting Python, torch and Triton to once per test module instead of once per case. Each
rank pays what its first task would, the modules of the tests that use it and its CUDA
context, before it says it is ready (:func:`warm_rank`): while single-rank tests run.

- ``TRITON_INTERPRET=1`` (``--interpret``): CPU tensors over gloo.
- Otherwise CUDA tensors: NCCL, one GPU per rank, when there are enough GPUs;
  else gloo with every rank on ``cuda:0``.

The ranks meet through torch.distributed's c10d ``TCPStore``, which the pool's owner
serves (:func:`open_store`): on one host bound to 127.0.0.1 and gloo on ``lo``, on a
port the store took itself (port 0), so no other host reaches it and no other process
can take the port first. Across hosts (``bakery verify --nnodes``), some ranks of a
world run on other nodes; their tasks travel over authenticated connections
(:mod:`bakery.testing.nodes`).

Every task has a deadline: a rank that is stuck (say, in a collective its peers never
join) gets the whole pool killed, the test fails with :class:`RankTimeout`, and the
next task starts a fresh pool. Tasks are module-level functions ``fn(ctx, *args)``;
arguments and results travel pickled by value (tensors included, never shared memory).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from bakery.testing.compat import interpret_mode
from bakery.testing.rank import START_TIMEOUT, ModuleRef, RankSpec, rank_main

#: Seconds a task may take before its ranks are killed (override: BAKERY_RANK_TIMEOUT).
DEFAULT_TIMEOUT = float(os.environ.get("BAKERY_RANK_TIMEOUT", "120"))
#: Seconds a warm-up task (:meth:`RankPool.warm_up`) may take.
WARMUP_TIMEOUT = 30.0
#: Once one rank has answered a task in E seconds, its peers get GRACE + E more: after
#: the last collective of a task little work is left, so a peer that lags that far
#: behind is stuck in a collective that the others never joined.
GRACE = 5.0


class Link(Protocol):
    """The other nodes, as a pool sees them (bakery.testing.headlink.HeadLink)."""

    nnodes: int
    store_host: str
    lost: str | None

    def gpus_by_node(self) -> list[int]: ...

    def start_ranks(
        self,
        world: int,
        gen: int,
        store_at: tuple[str, int],
        backend: str,
        devices: Sequence[str],
        timeout: float,
        modules: Sequence[tuple[str, str | None]],
        outbox: Any,
    ) -> dict[int, tuple[Any, Any]]: ...

    def report_transport(self, world: int, found: dict[str, str | None]) -> None: ...


class RankError(AssertionError):
    """A rank raised; the message carries its traceback."""


class RankTimeout(AssertionError):
    """A rank did not answer in time (a stuck collective, most likely); the pool was killed."""


def choose_backend(
    world_size: int, gpus_by_node: Sequence[int] | None = None
) -> tuple[str, list[str]]:
    """The backend and each rank's device for this machine and mode.

    Across nodes (``gpus_by_node``: each node's GPU count, this one's first), ranks are
    split in blocks (:func:`node_of`): NCCL where every node has a GPU for each of its
    ranks (the user's pair: one GB10 each), gloo otherwise; a rank's device is its
    index among its node's ranks."""
    if interpret_mode():
        return "gloo", ["cpu"] * world_size
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible; use TRITON_INTERPRET=1 with CPU tensors")
    gpus = list(gpus_by_node) if gpus_by_node else [torch.cuda.device_count()]
    gpus[0] = torch.cuda.device_count()
    nodes = len(gpus)
    local = [
        rank - first_rank(node_of(rank, world_size, nodes), world_size, nodes)
        for rank in range(world_size)
    ]
    counts = [
        sum(1 for r in range(world_size) if node_of(r, world_size, nodes) == n)
        for n in range(nodes)
    ]
    if all(gpus[n] >= counts[n] for n in range(nodes)):
        return "nccl", [f"cuda:{i}" for i in local]
    return "gloo", ["cuda:0"] * world_size


def node_of(rank: int, world_size: int, nnodes: int) -> int:
    """The node that runs ``rank`` of a world: ranks in blocks, as torchrun places them
    (world 4 on 2 nodes: ranks 0-1 on node 0, 2-3 on node 1; world 2: one each)."""
    return rank * nnodes // world_size


def first_rank(node: int, world_size: int, nnodes: int) -> int:
    """The lowest rank of ``node`` in a world (its ranks' local indices count from it)."""
    return next((r for r in range(world_size) if node_of(r, world_size, nnodes) == node), 0)


#: What the fork server imports once, before it forks any rank: the imports every rank
#: needs (about a second of CPU each) paid once per session instead of once per rank.
PRELOAD = ("numpy", "torch", "torch.distributed", "triton")


def rank_context() -> Any:
    """Where ranks come from: forked from a fork server (``multiprocessing``'s
    ``forkserver``) that imported :data:`PRELOAD` once, where the platform has one;
    spawned otherwise. The server is a fresh process that never touched CUDA, so its
    children may start CUDA of their own (forking a process that did is unsafe); it
    inherits this process's environment when it starts (``TRITON_INTERPRET``,
    ``BAKERY_TREE``), and each rank imports the tree's code itself, as a spawned one
    would. ``BAKERY_RANK_START=spawn`` spawns every rank instead."""
    import multiprocessing

    method = os.environ.get("BAKERY_RANK_START", "forkserver")
    if method not in multiprocessing.get_all_start_methods():
        method = "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def start_rank_server() -> None:
    """Start the fork server now, without waiting for its imports (:data:`PRELOAD`):
    a rank's start then waits only for what is left of them."""
    if rank_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def stop_rank_server() -> None:
    """Stop the fork server, if one runs, and wait for it: its ranks' CPU time then counts
    among this process's children (``time``, ``RUSAGE_CHILDREN``), as spawned ranks'
    did, and no process of the session outlives it. The standard library has no public
    stop; this is the method its own tests stop the server with. The server is sent
    SIGKILL first: asked politely, it ran Python's exit with torch loaded, 0.41-0.47 s of
    every session's end on a 2-core host (BENCHMARKS.md), and it holds nothing a clean
    exit would save (its ranks are gone by then)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)
    pid = getattr(server, "_forkserver_pid", None)
    if isinstance(pid, int) and pid > 0:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if stop is not None:
        with contextlib.suppress(OSError, ChildProcessError):
            stop()


@dataclass(frozen=True)
class Task:
    id: int
    name: str
    started: float


#: The store's address on one host: loopback only (SECURITY.md, "Ranks").
LOOPBACK = "127.0.0.1"


def open_store(host: str = LOOPBACK, *, timeout: float = START_TIMEOUT) -> tuple[Any, int]:
    """Serve a c10d ``TCPStore`` on ``host`` only, on a port it takes itself: (store,
    port). torch's own server listens on every interface whatever host it is given, and
    a port found free and released first may be taken before the store binds it; so
    the socket is bound here (``host``, port 0) and handed to the store
    (``master_listen_fd``), which owns it from then on."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(128)
        port = int(sock.getsockname()[1])
    except OSError:
        sock.close()
        raise
    store = dist.TCPStore(  # type: ignore[attr-defined]
        host,
        port,
        None,
        True,
        timedelta(seconds=timeout),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )
    return store, port


def _ref(fn: Callable[..., Any]) -> tuple[str, str, str | None]:
    module = sys.modules.get(fn.__module__)
    return fn.__module__, fn.__qualname__, getattr(module, "__file__", None)


class RankPool:
    """``world_size`` spawned ranks joined by torch.distributed, reused across tasks."""

    def __init__(
        self,
        world_size: int = 2,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        modules: Sequence[ModuleRef] = (),
        link: Link | None = None,
    ) -> None:
        self.world_size = world_size
        self.timeout = timeout
        #: imported by every rank before it says it is ready (:func:`warm_rank`)
        self.modules = tuple(modules)
        #: the other nodes (``bakery verify --nnodes``): their ranks run there
        self.link = link
        self.backend, self.devices = choose_backend(
            world_size, link.gpus_by_node() if link is not None else None
        )
        self.starts = 0
        self._procs: list[Any] = []
        self._inboxes: list[Any] = []
        self._outbox: Any = None
        self._store: Any = None
        #: across nodes with NCCL: the folder of this node's ranks' NCCL debug files
        self._nccl_log: str | None = None
        self._ready = False
        self._task = 0

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the ranks without waiting for them (see :meth:`wait_ready`)."""
        if self._procs:
            return
        ctx = rank_context()
        host = self.link.store_host if self.link is not None else LOOPBACK
        self._store, port = open_store(host)
        self._outbox = ctx.Queue()
        self.starts += 1
        if self.link is not None and self.backend == "nccl":
            import tempfile

            self._nccl_log = tempfile.mkdtemp(prefix="bakery-nccl-")
        here = [r for r in range(self.world_size) if self._node(r) == 0]
        self._inboxes = [ctx.Queue() if r in here else None for r in range(self.world_size)]
        procs: list[Any] = [
            ctx.Process(
                target=rank_main,
                args=(
                    RankSpec(
                        rank,
                        self.world_size,
                        (host, port),
                        self.backend,
                        self.devices[rank],
                        self.timeout,
                        tuple(self.modules),
                        self._nccl_log,
                    ),
                    self._inboxes[rank],
                    self._outbox,
                ),
                name=f"bakery-rank{rank}",
                daemon=True,
            )
            if rank in here
            else None
            for rank in range(self.world_size)
        ]
        if self.link is not None:
            remote = self.link.start_ranks(
                self.world_size,
                self.starts,
                (host, port),
                self.backend,
                self.devices,
                self.timeout,
                self.modules,
                self._outbox,
            )
            for rank, (proc, inbox) in remote.items():
                procs[rank], self._inboxes[rank] = proc, inbox
        self._procs = procs
        for rank in here:
            self._procs[rank].start()
        self._ready = False

    def _node(self, rank: int) -> int:
        """The node that runs ``rank`` (0: this one)."""
        if self.link is None:
            return 0
        return node_of(rank, self.world_size, self.link.nnodes)

    def wait_ready(self) -> None:
        self.start()
        if self._ready:
            return
        deadline = time.monotonic() + START_TIMEOUT
        pending = set(range(self.world_size))
        while pending:
            kind, rank, ok, detail = self._get(deadline, pending, "start")
            if kind != "ready":
                continue
            if not ok:
                self.close()
                raise RankError(f"rank {rank} failed to start:\n{detail}")
            pending.discard(rank)
        self._ready = True

    def warm_up(self, tasks: Sequence[Callable[..., Any]]) -> str | None:
        """Start the ranks and run each of ``tasks`` (``fn(ctx)``) on every rank, for
        what a first task pays once per process (on a GPU: Triton's launchers, the first
        collective). None when all ran; else what went wrong, in one line: the pool is
        killed then, and the next task starts fresh ranks that meet the failure, if it is
        one, in a test (a task may take :data:`WARMUP_TIMEOUT` seconds)."""
        for fn in tasks:
            try:
                self.run(fn, timeout=WARMUP_TIMEOUT)
            except (RankError, RankTimeout) as e:
                self.close()
                lines = [line for line in str(e).splitlines() if line.strip()]
                last = f" ... {lines[-1].strip()}" if len(lines) > 1 else ""
                return f"{fn.__module__}.{fn.__qualname__}: {lines[0] if lines else e}{last}"
        return None

    def close(self, *, polite: bool = True) -> None:
        """Stop the ranks: politely when they are idle, by force otherwise.

        ``polite=False`` kills them at once: what the end of a test session wants (a
        rank's own shutdown, ``destroy_process_group`` and torch's exit, takes about a
        second, and nothing of it is needed once every result is in)."""
        if not self._procs:
            return
        if self._ready and polite:
            for inbox in self._inboxes:
                with contextlib.suppress(Exception):
                    inbox.put(None)
            for proc in self._procs:
                proc.join(timeout=5)
        self.kill()
        for proc in self._procs:
            proc.join(timeout=5)
        for q in [*self._inboxes, self._outbox]:
            with contextlib.suppress(Exception):
                q.close()
                q.cancel_join_thread()
        self._procs, self._inboxes, self._outbox, self._ready = [], [], None, False
        self._store = None  # its server stops with its last reference
        self._report_transport()

    def _report_transport(self) -> None:
        """Across nodes: the transport NCCL chose, from this node's ranks' debug files."""
        if self._nccl_log is None:
            return
        import shutil

        from bakery.testing import transport

        found = transport.read(Path(self._nccl_log))
        if found is not None and self.link is not None:
            self.link.report_transport(self.world_size, transport.as_dict(found))
        shutil.rmtree(self._nccl_log, ignore_errors=True)
        self._nccl_log = None

    def kill(self) -> None:
        """Send every live rank SIGKILL without waiting: pools killed together die
        together (a CUDA rank's exit takes a while), then :meth:`close` reaps them."""
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tasks -------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> list[Any]:
        """Run ``fn(ctx, *args)`` on every rank; the results, by rank."""
        return self.map(fn, [args] * self.world_size, timeout=timeout)

    def map(
        self,
        fn: Callable[..., Any],
        args_by_rank: Sequence[Sequence[Any]],
        *,
        timeout: float | None = None,
    ) -> list[Any]:
        """Run ``fn(ctx, *args_by_rank[rank])`` on every rank; the results, by rank."""
        return self.gather(self.submit(fn, args_by_rank), timeout=timeout)

    def submit(self, fn: Callable[..., Any], args_by_rank: Sequence[Sequence[Any]]) -> Task:
        """Start ``fn(ctx, *args_by_rank[rank])`` on every rank; :meth:`gather` the results.

        The caller may work meanwhile (say, compute the single-rank expectation)."""
        if len(args_by_rank) != self.world_size:
            raise ValueError(f"need arguments for {self.world_size} ranks")
        self.wait_ready()
        self._task += 1
        ref = _ref(fn)
        for rank, args in enumerate(args_by_rank):
            self._inboxes[rank].put((self._task, ref, pickle.dumps(tuple(args))))
        return Task(self._task, fn.__qualname__, time.monotonic())

    def gather(self, task: Task, *, timeout: float | None = None) -> list[Any]:
        """The results of ``task`` by rank.

        Raises :class:`RankError` with the first failing rank's traceback, or
        :class:`RankTimeout`. When a rank failed or hung, the pool is killed (a peer
        may be left inside a collective) and the next task starts a fresh one."""
        deadline = task.started + (timeout or self.timeout)
        results: dict[int, Any] = {}
        failures: dict[int, str] = {}
        pending = set(range(self.world_size))
        while pending:
            try:
                got, rank, ok, detail = self._get(deadline, pending, task.name)
            except RankTimeout:
                if not failures:
                    raise
                break  # a peer of a failed rank is stuck: report the failure first
            if got != task.id:
                continue
            pending.discard(rank)
            if ok:
                results[rank] = pickle.loads(detail)
            else:
                failures[rank] = detail
            now = time.monotonic()
            deadline = min(deadline, now + GRACE + (now - task.started))
        if failures:
            lost = self._lost()
            self.close()
            rank = min(failures)
            stuck = f" (ranks {sorted(pending)} stuck)" if pending else ""
            if lost:  # a peer's error is what a lost node looks like from here
                raise RankError(f"{lost}; rank {rank} raised in {task.name}{stuck}")
            raise RankError(f"rank {rank} raised in {task.name}{stuck}:\n{failures[rank]}")
        return [results[rank] for rank in range(self.world_size)]

    def _lost(self, wait: float = 1.0) -> str | None:
        """Across nodes, after a rank failed: the line of a node that was lost, if one
        was (its loss may reach this process a moment after a peer's error does)."""
        if self.link is None:
            return None
        ends = time.monotonic() + wait
        while self.link.lost is None and time.monotonic() < ends:
            time.sleep(0.05)
        return self.link.lost

    def _get(self, deadline: float, pending: set[int], what: str) -> tuple[Any, int, bool, Any]:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise RankTimeout(
                    f"ranks {sorted(pending)} gave no answer to {what} in time; pool killed"
                )
            try:
                answer: tuple[Any, int, bool, Any] = self._outbox.get(timeout=min(left, 1.0))
                return answer
            except queue.Empty:
                dead = [r for r in pending if not self._procs[r].is_alive()]
                if dead:
                    codes = {r: self._procs[r].exitcode for r in dead}
                    lost = self.link.lost if self.link is not None else None
                    self.close()
                    if lost:
                        raise RankError(f"ranks {dead} lost during {what}: {lost}") from None
                    raise RankError(
                        f"ranks {dead} died during {what} (exit codes {codes})"
                    ) from None
