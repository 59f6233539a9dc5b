"""The head's pytest process's link to the worker nodes (``bakery verify --nnodes N``):
the ranks a pool runs on another node (``RemoteRank``, ``RemoteInbox``), their tasks sent
through the head's relay (:class:`bakery.testing.nodes.Head`), losses and the NCCL
transports reported back."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import (
    Client,
)
from typing import Any

from bakery.testing.nodes import LINK_ENV, LINK_KEY_ENV, ranks_on


class RemoteRank:
    """A rank on another node, as :class:`~bakery.testing.dist.RankPool` sees a process."""

    def __init__(self, link: HeadLink, node: int, world: int, gen: int) -> None:
        self.link, self.node, self.world, self.gen = link, node, world, gen
        self.exitcode: int | None = None
        self.dead = False

    def start(self) -> None:
        pass

    def is_alive(self) -> bool:
        return not self.dead and self.node not in self.link.lost_nodes

    def kill(self) -> None:
        self.link.send(self.node, ("kill", self.world, self.gen))

    def join(self, timeout: float | None = None) -> None:
        pass


class RemoteInbox:
    """A remote rank's inbox: what is put here is sent to its node."""

    def __init__(self, link: HeadLink, node: int, world: int, gen: int, rank: int) -> None:
        self.link, self.node, self.world, self.gen, self.rank = link, node, world, gen, rank

    def put(self, message: Any) -> None:
        self.link.send(self.node, ("put", self.world, self.gen, self.rank, message))

    def close(self) -> None:
        pass

    def cancel_join_thread(self) -> None:
        pass


class HeadLink:
    """The head's pytest process's connection to its relay (:class:`Head`): pools start
    ranks on the workers, send them tasks, and hear their answers and losses."""

    def __init__(self, info: Mapping[str, Any], key: bytes) -> None:
        self.nnodes = int(info["nnodes"])
        self.store_host = str(info["store_host"])
        self.nodes: list[dict[str, Any]] = list(info["nodes"])
        self.conn = Client(str(info["relay"]), family="AF_UNIX", authkey=key)
        self._lock = threading.Lock()
        #: (world, gen) -> the pool's outbox, and its remote ranks
        self._outboxes: dict[tuple[int, int], Any] = {}
        self._remote: dict[tuple[int, int], dict[int, RemoteRank]] = {}
        self.lost: str | None = None
        self.lost_nodes: set[int] = set()
        #: the worlds whose ranks ran, for the summary
        self.worlds: set[int] = set()
        #: world -> the transport NCCL chose (bakery.testing.transport)
        self.transports: dict[int, dict[str, str | None]] = {}
        self._on_lost: list[Callable[[str], None]] = []
        threading.Thread(target=self._receive, name="bakery-node-link", daemon=True).start()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HeadLink | None:
        env = os.environ if environ is None else environ
        raw = env.get(LINK_ENV)
        if not raw:
            return None
        return cls(json.loads(raw), bytes.fromhex(env[LINK_KEY_ENV]))

    def gpus_by_node(self) -> list[int]:
        """Each node's GPUs, this one's first (:func:`bakery.testing.dist.choose_backend`).
        Nodes on one host share its GPUs, and NCCL refuses two ranks on one device
        ("Duplicate GPU detected", seen on the device's H100 with two nodes on it): such
        nodes count none of their own, so their worlds run gloo."""
        nodes = sorted(self.nodes, key=lambda n: int(n["node"]))
        hosts = collections.Counter(str(n["host"]) for n in nodes)
        return [0 if hosts[str(n["host"])] > 1 else int(n["gpus"]) for n in nodes]

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(line)`` when a node is lost (at once if one was already)."""
        self._on_lost.append(callback)
        if self.lost is not None:
            callback(self.lost)

    def send(self, node: int, message: Any) -> None:
        with self._lock, contextlib.suppress(OSError):
            self.conn.send((node, message))

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
    ) -> dict[int, tuple[RemoteRank, RemoteInbox]]:
        """Ask every worker to start its ranks of this world; their stand-ins here."""
        from bakery.testing.dist import node_of

        self.worlds.add(world)
        self._outboxes = {k: v for k, v in self._outboxes.items() if k[0] != world}
        self._outboxes[(world, gen)] = outbox
        out: dict[int, tuple[RemoteRank, RemoteInbox]] = {}
        for node in range(1, self.nnodes):
            ranks = [r for r in range(world) if node_of(r, world, self.nnodes) == node]
            if not ranks:
                continue
            self.send(
                node,
                (
                    "start",
                    world,
                    gen,
                    ranks,
                    store_at,
                    backend,
                    list(devices),
                    timeout,
                    list(modules),
                ),
            )
            for r in ranks:
                out[r] = (
                    RemoteRank(self, node, world, gen),
                    RemoteInbox(self, node, world, gen, r),
                )
        self._remote[(world, gen)] = {r: proc for r, (proc, _) in out.items()}
        return out

    def _receive(self) -> None:
        while True:
            try:
                node, message = self.conn.recv()
            except (OSError, EOFError):
                return
            kind = message[0]
            if kind == "answer":
                outbox = self._outboxes.get((message[1], message[2]))
                if outbox is not None:
                    outbox.put(message[3])
            elif kind == "died":
                proc = self._remote.get((message[1], message[2]), {}).get(message[3])
                if proc is not None:
                    proc.exitcode, proc.dead = message[4], True
            elif kind == "lost":
                self.lost = str(message[2])
                self.lost_nodes.add(int(message[1]) if message[1] >= 0 else -1)
                if message[1] < 0:
                    self.lost_nodes.update(range(1, self.nnodes))
                for callback in self._on_lost:
                    callback(self.lost)

    def report_transport(self, world: int, found: dict[str, str | None]) -> None:
        self.transports[world] = dict(found)
        self.send(0, ("transport", world, dict(found)))

    def summary(self) -> list[str]:
        """One line per node: its host and the ranks it ran of each world."""
        lines = []
        for entry in sorted(self.nodes, key=lambda n: int(n["node"])):
            n = int(entry["node"])
            worlds = (
                "; ".join(
                    f"world {w} ranks {ranks_on(n, w, self.nnodes)}" for w in sorted(self.worlds)
                )
                or "no multi-rank test ran"
            )
            role = " (head)" if n == 0 else ""
            lines.append(f"node {n}{role} {entry['host']}: {worlds}")
        return lines

    def close(self) -> None:
        with self._lock:
            self.conn.close()
