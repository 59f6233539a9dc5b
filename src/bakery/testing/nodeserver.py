"""A worker node of ``bakery verify --nnodes N`` (:mod:`bakery.testing.nodes`): it joins
the head, then serves its share of each world's ranks in a rank server of its own process
group (``python -m bakery.testing.nodeserver``), killed whole when the run ends, and exits
with the head's verdict."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import (
    Connection,
)
from pathlib import Path
from typing import Any

from bakery import process
from bakery.errors import VerifyError
from bakery.testing.nodes import HEARTBEAT, JOIN_TIMEOUT, LOST_AFTER, Layout, join, short_tmp
from bakery.testing.rank import RankSpec


def run_worker(
    where: Layout,
    key: bytes,
    prints: Mapping[str, str],
    roots: Mapping[str, str],
    *,
    python: str | None,
    env: Mapping[str, str],
    gpus: int = 0,
    timeout: float = JOIN_TIMEOUT,
) -> dict[str, Any]:
    """A worker's whole part: join the head, then serve ranks in a child (the test
    environment's Python and environment, in a process group of its own, killed whole
    when it ends) until the head's verdict: the verdict (the head's result in a dict,
    ``exit_code`` among it). One line (VerifyError) when it cannot join, or the head is
    lost."""
    conn, welcome = join(where, key, prints, gpus=gpus, timeout=timeout)
    head_roots = dict(welcome.get("roots", {}))
    config = {
        "node": where.node_rank,
        "head": f"{where.master_addr}:{where.master_port}",
        "roots": {k: [head_roots[k], v] for k, v in roots.items() if k in head_roots},
    }
    with tempfile.TemporaryDirectory(prefix="bakery-node-", dir=short_tmp()) as tmp:
        answer = Path(tmp) / "verdict.json"
        fd = conn.fileno()
        os.set_inheritable(fd, True)
        command = [
            python or sys.executable,
            "-m",
            __name__,
            str(fd),
            str(answer),
            json.dumps(config),
        ]
        try:
            child = process.start(
                command, env=dict(env), stdout=None, stderr=None, own_group=True, pass_fds=(fd,)
            )
        except process.ProcessFailed as e:
            conn.close()
            raise VerifyError(
                f"node {where.node_rank}: cannot start its rank server: {e.message}"
            ) from None
        conn.close()  # the child's now: its end closes the head's side
        try:
            code = child.wait()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)  # its fork server and ranks
            if child.poll() is None:
                child.kill()
                child.wait()
        try:
            verdict = json.loads(answer.read_text())
        except (OSError, ValueError):
            raise VerifyError(
                f"node {where.node_rank}: its rank server ended with code {code} and no verdict"
            ) from None
    if not isinstance(verdict, dict):
        raise VerifyError(f"node {where.node_rank}: its rank server wrote no verdict")
    if verdict.get("error"):
        raise VerifyError(str(verdict["error"]))
    return verdict


class _Ranks:
    """A worker's ranks of one world (one start of the head's pool)."""

    def __init__(self, gen: int, specs: Sequence[RankSpec], send: Callable[[Any], None]) -> None:
        """Start this node's ranks of one world (``specs``: one a rank, all of one world),
        the ``gen``-th start of the head's pool; ``send`` carries their answers to it."""
        from bakery.testing import dist, rank

        self.world, self.gen, self.send = specs[0].world_size, gen, send
        ctx = dist.rank_context()
        self.outbox = ctx.Queue()
        self.inboxes = {spec.rank: ctx.Queue() for spec in specs}
        self.procs = {
            spec.rank: ctx.Process(
                target=rank.rank_main,
                args=(spec, self.inboxes[spec.rank], self.outbox),
                name=f"bakery-rank{spec.rank}",
                daemon=True,
            )
            for spec in specs
        }
        self.reported: set[int] = set()
        self.stopped = threading.Event()
        for proc in self.procs.values():
            proc.start()
        threading.Thread(target=self._forward, daemon=True).start()

    def _forward(self) -> None:
        import queue

        while not self.stopped.is_set():
            try:
                answer = self.outbox.get(timeout=0.5)
            except queue.Empty:
                continue
            except (OSError, EOFError, ValueError):
                return
            with contextlib.suppress(OSError):
                self.send(("answer", self.world, self.gen, answer))

    def put(self, rank: int, message: Any) -> None:
        inbox = self.inboxes.get(rank)
        if inbox is not None:
            inbox.put(message)

    def check(self) -> None:
        for rank, proc in self.procs.items():
            if rank not in self.reported and not proc.is_alive():
                self.reported.add(rank)
                self.send(("died", self.world, self.gen, rank, proc.exitcode))

    def kill(self) -> None:
        self.stopped.set()
        for proc in self.procs.values():
            if proc.is_alive():
                proc.kill()
        for proc in self.procs.values():
            proc.join(timeout=5)
        for q in [*self.inboxes.values(), self.outbox]:
            with contextlib.suppress(Exception):
                q.close()
                q.cancel_join_thread()


def _mapper(roots: Mapping[str, Sequence[str]]) -> Callable[[str | None], str | None]:
    """A head's path (a test module's file) as the same file on this node."""
    pairs = sorted(
        ((h.rstrip("/") + "/", m.rstrip("/") + "/") for h, m in roots.values()),
        key=lambda pair: -len(pair[0]),
    )

    def mapped(path: str | None) -> str | None:
        if path is None:
            return None
        for head, mine in pairs:
            if path.startswith(head):
                return mine + path[len(head) :]
        return path

    return mapped


class _Server:
    """A worker's rank server: start, feed and kill its ranks as the head says."""

    def __init__(self, conn: Connection, config: Mapping[str, Any]) -> None:
        self.conn = conn
        self.me, self.head = f"node {config['node']}", str(config["head"])
        self.mapped = _mapper(config.get("roots", {}))
        self.pools: dict[int, _Ranks] = {}
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self._lock:
            self.conn.send(message)

    def ping(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT):
            with contextlib.suppress(OSError):
                self.send(("ping",))

    def next_message(self, last: float) -> Any:
        """The head's next message; None when it has none yet; raises _HeadLost."""
        for pool in self.pools.values():
            pool.check()
        try:
            if not self.conn.poll(HEARTBEAT):
                if time.monotonic() - last > LOST_AFTER:
                    raise _HeadLost(f"no word from it for {LOST_AFTER:.0f} s")
                return None
            return self.conn.recv()
        except (OSError, EOFError):
            raise _HeadLost("its connection closed") from None

    def handle(self, message: Any) -> dict[str, Any] | None:
        """Act on one message; the verdict when it is one."""
        kind = message[0]
        if kind == "start":
            _, world, gen, ranks, store_at, backend, devices, timeout, modules = message
            self.kill(world)
            modules = [(name, self.mapped(path)) for name, path in modules]
            specs = [
                RankSpec(r, world, tuple(store_at), backend, devices[r], timeout, tuple(modules))
                for r in ranks
            ]
            self.pools[world] = _Ranks(gen, specs, self.send)
        elif kind == "put":
            _, world, gen, rank, task = message
            pool = self.pools.get(world)
            if pool is not None and pool.gen == gen:
                if task is not None:
                    task_id, (modname, qualname, path), payload = task
                    task = (task_id, (modname, qualname, self.mapped(path)), payload)
                pool.put(rank, task)
        elif kind == "kill":
            self.kill(message[1], message[2])
        elif kind == "verdict":
            with contextlib.suppress(OSError):
                self.send(("bye",))
            return dict(message[1])
        return None

    def kill(self, world: int, gen: int | None = None) -> None:
        pool = self.pools.get(world)
        if pool is not None and gen in (None, pool.gen):
            self.pools.pop(world).kill()


class _HeadLost(Exception):
    pass


def serve(conn: Connection, config: Mapping[str, Any]) -> dict[str, Any]:
    """A worker's rank server (:class:`_Server`) until the head's verdict (returned) or
    its loss (``{"error": line}``)."""
    from bakery.testing import dist

    server = _Server(conn, config)
    stop = threading.Event()
    threading.Thread(target=server.ping, args=(stop,), name="bakery-node-ping", daemon=True).start()
    dist.start_rank_server()
    last = time.monotonic()
    try:
        while True:
            try:
                message = server.next_message(last)
            except _HeadLost as e:
                return {"error": f"{server.me}: the head at {server.head} was lost: {e}"}
            if message is None:
                continue
            last = time.monotonic()
            verdict = server.handle(message)
            if verdict is not None:
                return verdict
    finally:
        stop.set()
        for world in list(server.pools):
            server.kill(world)
        dist.stop_rank_server()


def main(argv: Sequence[str]) -> None:
    """``python -m bakery.testing.nodeserver FD VERDICT CONFIG``: a worker's rank server on
    the joined connection ``FD`` (:func:`run_worker` starts it); the verdict, or the
    line that ended it, is written to ``VERDICT``."""
    fd, answer, config = int(argv[1]), Path(argv[2]), json.loads(argv[3])
    tests = config.get("roots", {}).get("tests")
    if tests:  # the tests' own helper modules, as pytest's rootdir gives them on the head
        sys.path.insert(0, tests[1])
    try:
        verdict = serve(Connection(fd), config)
    except KeyboardInterrupt:
        verdict = {"error": f"node {config['node']}: interrupted"}
    answer.write_text(json.dumps(verdict))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
