"""``bakery verify --nnodes N``: one verify across several hosts (the user's pair of GB10s).

Node 0 (the *head*) runs pytest and writes the report; every other node (a *worker*)
serves its share of each world's ranks (:func:`bakery.testing.dist.node_of`: ranks in
blocks, as torchrun places them) and exits with the head's verdict.

- **Join.** The head listens on ``MASTER_ADDR:MASTER_PORT``; each worker connects. Both
  prove they hold the shared token (``BAKERY_VERIFY_TOKEN``) by
  ``multiprocessing.connection``'s HMAC challenge, each way, before either reads a byte
  of the other's (task messages are pickles: code runs where they are read). A node with
  another token is refused with one line on both sides.
- **Same inputs.** Each worker sends the sha256 of its tree, its tests (and the series'
  data) and its bakery; the head compares them with its own before any test and says
  which differs, on both nodes.
- **Ranks.** The ranks of a world meet through torch.distributed's c10d ``TCPStore``
  served by the head's pytest process on ``MASTER_ADDR`` (:func:`dist.open_store`); the
  head's pool sends each remote rank's tasks to its node over the joined connection
  (through the head's :class:`Head` relay, since pytest is a child of ``bakery verify``)
  and the node's rank server (:func:`serve`) puts them in the rank's inbox.
- **Failure.** Each side sends a ping every :data:`HEARTBEAT` seconds; a node that
  sends nothing for :data:`LOST_AFTER` seconds, or whose connection closes, is lost:
  the head stops its run with one line naming the node, and a worker that loses its
  head kills its ranks and exits. A worker's rank server runs in its own process group,
  killed whole when it ends, so nothing is left running.

Built on the standard library's authenticated connections and torch's store: no cluster
layer of bakery's own beyond the few messages below.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Client,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from pathlib import Path
from typing import Any

from bakery.errors import UsageError, VerifyError

_log = logging.getLogger(__name__)

#: The shared secret of a multi-node verify (never printed, never in argv).
TOKEN_ENV = "BAKERY_VERIFY_TOKEN"
#: Where the head's pytest process finds its relay (JSON), and the relay's own key (hex).
LINK_ENV = "BAKERY_NODES"
LINK_KEY_ENV = "BAKERY_NODES_KEY"
#: torchrun's names for the layout, read when the flags are not given.
LAYOUT_ENV = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
DEFAULT_PORT = 29500
#: Seconds every node waits for the others to join (BAKERY_NODE_JOIN_TIMEOUT).
JOIN_TIMEOUT = float(os.environ.get("BAKERY_NODE_JOIN_TIMEOUT", "120"))
#: Seconds between pings, and of silence after which a node is lost (BAKERY_NODE_LOST_AFTER).
HEARTBEAT = 1.0
LOST_AFTER = float(os.environ.get("BAKERY_NODE_LOST_AFTER", "10"))
#: Seconds a connection may take to prove its token and say hello.
HANDSHAKE = 10.0
_MIN_TOKEN = 16


# -- layout and token -------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where this node stands: ``nnodes`` nodes, this one ``node_rank``, the head at
    ``master_addr:master_port``."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int = DEFAULT_PORT

    @property
    def head(self) -> bool:
        return self.node_rank == 0

    def ranks_of(self, node: int, world: int) -> list[int]:
        from bakery.testing.dist import node_of

        return [r for r in range(world) if node_of(r, world, self.nnodes) == node]


def layout(
    nnodes: int | None,
    node_rank: int | None,
    master_addr: str | None,
    master_port: int | None,
    environ: Mapping[str, str] | None = None,
) -> Layout | None:
    """The layout from the flags, else torchrun's environment variables; None for one
    host. Bad values are one line (UsageError)."""
    env = os.environ if environ is None else environ

    def number(value: int | None, name: str, flag: str) -> int | None:
        if value is not None:
            return value
        raw = env.get(name)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            raise UsageError(f"{name}={raw!r}: not a number (or pass {flag})") from None

    n = number(nnodes, "NNODES", "--nnodes")
    if n is None or n == 1:
        return None
    r = number(node_rank, "NODE_RANK", "--node-rank")
    addr = master_addr or env.get("MASTER_ADDR")
    port = number(master_port, "MASTER_PORT", "--master-port")
    return _checked(n, r, addr, DEFAULT_PORT if port is None else port)


def _checked(n: int, r: int | None, addr: str | None, port: int) -> Layout:
    if n < 1:
        raise UsageError(f"--nnodes {n}: at least 1")
    if r is None:
        raise UsageError(f"--nnodes {n}: pass --node-rank (0 on the head) or set NODE_RANK")
    if not 0 <= r < n:
        raise UsageError(f"--node-rank {r}: from 0 to {n - 1} with --nnodes {n}")
    if not addr:
        raise UsageError(
            f"--nnodes {n}: pass --master-addr (the head's address) or set MASTER_ADDR"
        )
    if not 0 < port < 65536:
        raise UsageError(f"--master-port {port}: from 1 to 65535")
    return Layout(n, r, addr, port)


def token(environ: Mapping[str, str] | None = None) -> bytes:
    """The nodes' shared secret (BAKERY_VERIFY_TOKEN): required, at least 16 bytes."""
    value = (os.environ if environ is None else environ).get(TOKEN_ENV, "")
    if not value:
        raise UsageError(
            f"--nnodes: set {TOKEN_ENV} to the same secret on every node "
            '(say, `python -c "import secrets; print(secrets.token_hex())"`)'
        )
    if len(value.encode()) < _MIN_TOKEN:
        raise UsageError(f"{TOKEN_ENV}: at least {_MIN_TOKEN} characters")
    return value.encode()


# -- same inputs ----------------------------------------------------------------------


def fingerprints(tree: Path, tests: Path, series: Path | None) -> dict[str, str]:
    """sha256 of what decides a verdict: the tree, the tests with the series' data
    (``*.toml`` beside the tests), and bakery's own code."""
    import bakery
    from bakery.testing.reuse import tree_digest

    data = hashlib.sha256(tree_digest(tests).encode())
    if series is not None:
        for p in sorted(series.glob("*.toml")):
            if p.is_file() and not p.is_symlink():
                data.update(p.name.encode() + b"\0" + p.read_bytes())
    return {
        "tree": tree_digest(tree),
        "tests": data.hexdigest(),
        "bakery": tree_digest(Path(bakery.__file__).parent),
    }


def differences(mine: Mapping[str, str], theirs: Mapping[str, Any]) -> list[str]:
    """What differs between two nodes' :func:`fingerprints`, by name."""
    return [name for name in ("tree", "tests", "bakery") if theirs.get(name) != mine.get(name)]


def _differ_line(
    node: int, host: str, names: Sequence[str], theirs: Mapping[str, Any], mine: Mapping[str, str]
) -> str:
    parts = [f"{n} ({str(theirs.get(n))[:12]} there, {mine[n][:12]} on the head)" for n in names]
    return f"node {node} ({host}) differs from the head: {', '.join(parts)}"


# -- connections ------------------------------------------------------------------------


def _timeouts(fd: int, seconds: float) -> None:
    """Bound every blocking read and write of a connection (SO_RCVTIMEO/SO_SNDTIMEO): a
    peer that stops halfway through a message is an error, not a hang. 0: no bound."""
    sec = int(seconds)
    value = struct.pack("ll", sec, int((seconds - sec) * 1e6))
    sock = socket.socket(fileno=fd)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    finally:
        sock.detach()


def _authenticated(sock: socket.socket, key: bytes, *, server: bool) -> Connection:
    """``sock`` as a Connection whose peer proved it holds ``key`` (and was shown this
    side holds it too): the HMAC challenge of ``multiprocessing.connection``, each way.
    Raises AuthenticationError, or OSError/EOFError for a peer that went quiet."""
    sock.setblocking(True)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(sock.detach())
    _timeouts(conn.fileno(), HANDSHAKE)
    try:
        if server:
            deliver_challenge(conn, key)
            answer_challenge(conn, key)
        else:
            answer_challenge(conn, key)
            deliver_challenge(conn, key)
    except BaseException:
        conn.close()
        raise
    _timeouts(conn.fileno(), LOST_AFTER)
    return conn


def _recv(conn: Connection, seconds: float) -> Any:
    if not conn.poll(seconds):
        raise TimeoutError(f"no answer in {seconds:.0f} s")
    return conn.recv()


@dataclass
class Node:
    """A worker that joined the head."""

    rank: int
    host: str
    gpus: int
    conn: Connection
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: float = field(default_factory=time.monotonic)

    def send(self, message: Any) -> None:
        with self.lock:
            self.conn.send(message)


# -- the head: bakery verify's own process ------------------------------------------------


class Head:
    """The head's side in ``bakery verify``'s process: waits for the workers
    (:meth:`gather`), relays the pytest process's rank messages to them (:meth:`relay`),
    watches them, and sends each the verdict (:meth:`finish`)."""

    def __init__(
        self,
        where: Layout,
        key: bytes,
        prints: Mapping[str, str],
        roots: Mapping[str, str],
        *,
        join_timeout: float = JOIN_TIMEOUT,
    ) -> None:
        self.layout = where
        self.key = key
        self.prints = dict(prints)
        #: the head's tests, tree and series folders (workers map paths from them)
        self.roots = dict(roots)
        self.join_timeout = join_timeout
        self.nodes: dict[int, Node] = {}
        #: the first node lost, in one line
        self.lost: str | None = None
        #: world -> NCCL's transport as the head's ranks reported it (bakery.testing.transport)
        self.transports: dict[int, dict[str, str | None]] = {}
        self._child: Connection | None = None
        self._child_lock = threading.Lock()
        self._stop = threading.Event()
        self._folder: str | None = None
        self._listener: Listener | None = None
        self._reader: threading.Thread | None = None

    # -- join --------------------------------------------------------------------------
    def gather(self) -> list[Node]:
        """Wait for every worker: each proves the token, says hello, and has the head's
        fingerprints. One line (VerifyError) for a worker that never joins in
        ``join_timeout`` or differs."""
        addr, port = self.layout.master_addr, self.layout.master_port
        try:
            server = socket.create_server((addr, port), family=_family(addr))
        except OSError as e:
            raise VerifyError(
                f"--master-addr {addr} --master-port {port}: cannot listen there ({e.strerror}); "
                "the head's own address and a free port"
            ) from None
        server.settimeout(0.5)
        deadline = time.monotonic() + self.join_timeout
        refused: list[str] = []
        try:
            while len(self.nodes) < self.layout.nnodes - 1:
                if time.monotonic() > deadline:
                    raise VerifyError(self._never_joined(refused))
                try:
                    sock, peer = server.accept()
                except TimeoutError:
                    continue
                self._admit(sock, str(peer[0]), refused)
        finally:
            server.close()
        return list(self.nodes.values())

    def _never_joined(self, refused: Sequence[str]) -> str:
        missing = [n for n in range(1, self.layout.nnodes) if n not in self.nodes]
        who = ", ".join(f"node {n}" for n in missing)
        line = (
            f"{who} never joined {self.layout.master_addr}:{self.layout.master_port} "
            f"in {self.join_timeout:.0f} s"
        )
        if refused:
            line += f" ({'; '.join(refused[-3:])})"
        return line

    def _admit(self, sock: socket.socket, peer: str, refused: list[str]) -> None:
        try:
            conn = _authenticated(sock, self.key, server=True)
        except AuthenticationError:
            refused.append(f"refused {peer}: wrong {TOKEN_ENV}")
            _log.warning(f"refused a node at {peer}: its {TOKEN_ENV} is not the head's")
            return
        except (OSError, EOFError):
            sock.close()
            return
        try:
            hello = _recv(conn, HANDSHAKE)
            node, host, gpus, theirs = _hello_fields(hello, self.layout.nnodes)
        except (OSError, EOFError, TimeoutError, ValueError, pickle.UnpicklingError):
            conn.close()
            return
        if node in self.nodes:
            conn.send(("refused", f"node {node} has joined already"))
            conn.close()
            return
        names = differences(self.prints, theirs)
        if names:
            line = _differ_line(node, host, names, theirs, self.prints)
            with contextlib.suppress(OSError):
                conn.send(("refused", line))
            conn.close()
            raise VerifyError(line)
        conn.send(("welcome", {"roots": self.roots, "host": socket.gethostname()}))
        self.nodes[node] = Node(node, host, gpus, conn)
        _log.info(f"node {node} ({host}) joined from {peer}", extra={"event": "nodes"})

    # -- relay -------------------------------------------------------------------------
    def relay(self) -> dict[str, str]:
        """Start relaying: the environment the pytest process needs to reach the
        workers through this process (a 0700 folder's socket, a fresh key)."""
        self._folder = tempfile.mkdtemp(prefix="bakery-nodes-", dir=_short_tmp())
        path = os.path.join(self._folder, "s")
        key = secrets.token_bytes(32)
        self._listener = Listener(path, family="AF_UNIX", authkey=key)
        threading.Thread(target=self._accept_child, name="bakery-nodes-child", daemon=True).start()
        for node in self.nodes.values():
            threading.Thread(
                target=self._from_worker, args=(node,), name=f"bakery-node{node.rank}", daemon=True
            ).start()
        threading.Thread(target=self._ping, name="bakery-nodes-ping", daemon=True).start()
        info = {
            "relay": path,
            "nnodes": self.layout.nnodes,
            "store_host": _address(self.layout.master_addr),
            "nodes": [{"node": 0, "host": socket.gethostname(), "gpus": -1}]
            + [{"node": n.rank, "host": n.host, "gpus": n.gpus} for n in self.nodes.values()],
        }
        return {LINK_ENV: json.dumps(info), LINK_KEY_ENV: key.hex()}

    def _accept_child(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):
                return
            with self._child_lock:
                self._child = conn
            if self.lost:
                self._to_child((0, ("lost", -1, self.lost)))
            self._reader = threading.Thread(target=self._from_child, args=(conn,), daemon=True)
            self._reader.start()

    def child_done(self, timeout: float = 5.0) -> None:
        """Wait until everything the pytest process sent has been read (it has ended:
        its connection's end is the last thing read)."""
        if self._reader is not None:
            self._reader.join(timeout)

    def _to_child(self, message: Any) -> None:
        with self._child_lock:
            if self._child is not None:
                with contextlib.suppress(OSError):
                    self._child.send(message)

    def _from_child(self, conn: Connection) -> None:
        while True:
            try:
                node, message = conn.recv()
            except (OSError, EOFError):
                return
            if node == 0:  # for this process: NCCL's transport of a world
                if message[0] == "transport":
                    self.transports[int(message[1])] = dict(message[2])
                continue
            target = self.nodes.get(node)
            if target is not None:
                with contextlib.suppress(OSError):
                    target.send(message)

    def _from_worker(self, node: Node) -> None:
        while not self._stop.is_set():
            try:
                if not node.conn.poll(HEARTBEAT):
                    if time.monotonic() - node.last > LOST_AFTER:
                        self._lose(node, f"no word from it for {LOST_AFTER:.0f} s")
                        return
                    continue
                message = node.conn.recv()
            except (OSError, EOFError):
                if not self._stop.is_set():
                    self._lose(node, "its connection closed (the node or its bakery died)")
                return
            node.last = time.monotonic()
            if message[0] == "ping":
                continue
            if message[0] == "bye":
                return
            self._to_child((node.rank, message))

    def _lose(self, node: Node, why: str) -> None:
        if self.lost is None:
            self.lost = f"node {node.rank} ({node.host}) was lost: {why}"
            _log.debug(self.lost)
        self._to_child((node.rank, ("lost", node.rank, self.lost)))

    def _ping(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            for node in list(self.nodes.values()):
                with contextlib.suppress(OSError):
                    node.send(("ping",))

    # -- the end -----------------------------------------------------------------------
    def finish(self, verdict: Mapping[str, Any]) -> None:
        """Send every worker still there the verdict, wait briefly for its goodbye,
        and close everything."""
        self._stop.set()
        for node in self.nodes.values():
            with contextlib.suppress(OSError):
                node.send(("verdict", dict(verdict)))
        ends = time.monotonic() + 5
        for node in self.nodes.values():
            with contextlib.suppress(OSError, EOFError, TimeoutError):
                while time.monotonic() < ends:
                    if _recv(node.conn, max(0.0, ends - time.monotonic()))[0] == "bye":
                        break
        self.close()

    def close(self) -> None:
        self._stop.set()
        for node in self.nodes.values():
            node.conn.close()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._child_lock:
            if self._child is not None:
                self._child.close()
                self._child = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def summary(self) -> list[str]:
        return [f"node {n.rank} ({n.host})" for n in self.nodes.values()]


def _hello_fields(hello: Any, nnodes: int) -> tuple[int, str, int, dict[str, Any]]:
    if not (isinstance(hello, tuple) and len(hello) == 2 and hello[0] == "hello"):
        raise ValueError("not a hello")
    data = hello[1]
    node = int(data["node"])
    if not 0 < node < nnodes:
        raise ValueError("node rank out of range")
    return node, str(data["host"])[:100], int(data["gpus"]), dict(data["prints"])


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _address(host: str) -> str:
    """``host`` as an IP address (the store binds to it, the ranks connect to it)."""
    try:
        return str(socket.getaddrinfo(host, None, _family(host), socket.SOCK_STREAM)[0][4][0])
    except OSError:
        return host


def _short_tmp() -> str | None:
    """A folder short enough for an AF_UNIX path (108 bytes) whatever TMPDIR is."""
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) < 60 else ("/tmp" if os.path.isdir("/tmp") else None)


# -- the head's pytest process: its pools' way to the other nodes -----------------------


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
        return [int(n["gpus"]) for n in sorted(self.nodes, key=lambda n: int(n["node"]))]

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
                    f"world {w} ranks {_ranks(n, w, self.nnodes)}" for w in sorted(self.worlds)
                )
                or "no multi-rank test ran"
            )
            role = " (head)" if n == 0 else ""
            lines.append(f"node {n}{role} {entry['host']}: {worlds}")
        return lines

    def close(self) -> None:
        with self._lock:
            self.conn.close()


def _ranks(node: int, world: int, nnodes: int) -> list[int]:
    from bakery.testing.dist import node_of

    return [r for r in range(world) if node_of(r, world, nnodes) == node]


# -- a worker ---------------------------------------------------------------------------


def _connect(where: Layout, key: bytes, timeout: float) -> Connection:
    """An authenticated connection to the head, tried again until ``timeout`` (the head
    may start later). One line (VerifyError) when the head refuses the token or never
    answers."""
    head = f"{where.master_addr}:{where.master_port}"
    me = f"node {where.node_rank}"
    deadline = time.monotonic() + timeout
    why = "nothing listens there"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise VerifyError(f"{me}: the head at {head} did not answer in {timeout:.0f} s ({why})")
        try:
            sock = socket.create_connection(
                (where.master_addr, where.master_port), timeout=min(5.0, left)
            )
        except OSError as e:
            why = e.strerror or str(e)
            time.sleep(min(0.5, max(0.0, left)))
            continue
        try:
            return _authenticated(sock, key, server=False)
        except AuthenticationError:
            raise VerifyError(
                f"{me}: the head at {head} refused this node's {TOKEN_ENV} (not the head's)"
            ) from None
        except (OSError, EOFError):
            why = "the connection closed during the handshake"
            time.sleep(0.5)


def join(
    where: Layout,
    key: bytes,
    prints: Mapping[str, str],
    *,
    gpus: int = 0,
    timeout: float = JOIN_TIMEOUT,
) -> tuple[Connection, dict[str, Any]]:
    """Connect to the head (:func:`_connect`), say hello: (the connection, the head's
    welcome). One line (VerifyError) when the head refuses the token or the inputs, or
    never answers."""
    head = f"{where.master_addr}:{where.master_port}"
    conn = _connect(where, key, timeout)
    hello = {"node": where.node_rank, "host": socket.gethostname(), "gpus": gpus}
    try:
        conn.send(("hello", dict(hello, prints=dict(prints))))
        answer = _recv(conn, HANDSHAKE)
    except (OSError, EOFError, TimeoutError) as e:
        conn.close()
        raise VerifyError(
            f"node {where.node_rank}: the head at {head} stopped answering ({e})"
        ) from None
    if answer[0] != "welcome":
        conn.close()
        raise VerifyError(str(answer[1]))
    return conn, dict(answer[1])


def meet(
    where: Layout, key: bytes, info: Mapping[str, Any], *, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """``bakery doctor`` across nodes: each node's ``info`` (versions), with how long a
    round trip took (``rtt``) and how far its clock is from this node's (``offset``,
    seconds: theirs minus mine, halfway through the round trip, as NTP reckons). On the
    head: every worker's, and ``{"node": n, "missing": why}`` for one that never came;
    on a worker: the head's. Connections authenticated as verify's are."""
    if not where.head:
        conn = _connect(where, key, timeout)
        try:
            sent = time.time()
            conn.send(("doctor", where.node_rank, dict(info)))
            _, theirs, at = _recv(conn, HANDSHAKE)
            back = time.time()
            offset, rtt = float(at) - (sent + back) / 2, back - sent
            conn.send(("result", -offset, rtt))
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            raise VerifyError(f"node {where.node_rank}: the head stopped answering ({e})") from None
        finally:
            conn.close()
        return [dict(theirs, node=0, offset=offset, rtt=rtt)]
    found: dict[int, dict[str, Any]] = {}
    refused: list[str] = []
    server = socket.create_server(
        (where.master_addr, where.master_port), family=_family(where.master_addr)
    )
    server.settimeout(0.5)
    deadline = time.monotonic() + timeout
    try:
        while len(found) < where.nnodes - 1 and time.monotonic() < deadline:
            try:
                sock, peer = server.accept()
            except TimeoutError:
                continue
            try:
                conn = _authenticated(sock, key, server=True)
            except AuthenticationError:
                refused.append(f"refused {peer[0]}: wrong {TOKEN_ENV}")
                continue
            except (OSError, EOFError):
                continue
            try:
                _, node, theirs = _recv(conn, HANDSHAKE)
                conn.send(("doctor", dict(info), time.time()))
                _, offset, rtt = _recv(conn, HANDSHAKE)
                found[int(node)] = dict(
                    theirs,
                    node=int(node),
                    offset=float(offset),
                    rtt=float(rtt),
                    address=str(peer[0]),
                )
            except (OSError, EOFError, TimeoutError, ValueError):
                pass
            finally:
                conn.close()
    finally:
        server.close()
    why = f"it did not join {where.master_addr}:{where.master_port} in {timeout:.0f} s"
    if refused:
        why += f" ({refused[-1]})"
    missing = [{"node": n, "missing": why} for n in range(1, where.nnodes) if n not in found]
    return [found[n] for n in sorted(found)] + missing


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
    with tempfile.TemporaryDirectory(prefix="bakery-node-", dir=_short_tmp()) as tmp:
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
            child = subprocess.Popen(command, env=dict(env), pass_fds=(fd,), start_new_session=True)
        except OSError as e:
            conn.close()
            raise VerifyError(
                f"node {where.node_rank}: cannot start its rank server: {e}"
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

    def __init__(
        self,
        world: int,
        gen: int,
        ranks: Sequence[int],
        store_at: tuple[str, int],
        backend: str,
        devices: Sequence[str],
        timeout: float,
        modules: Sequence[tuple[str, str | None]],
        send: Callable[[Any], None],
    ) -> None:
        from bakery.testing import dist

        self.world, self.gen, self.send = world, gen, send
        ctx = dist.rank_context()
        self.outbox = ctx.Queue()
        self.inboxes = {r: ctx.Queue() for r in ranks}
        self.procs = {
            r: ctx.Process(
                target=dist._rank_main,
                args=(
                    r,
                    world,
                    store_at,
                    backend,
                    devices[r],
                    self.inboxes[r],
                    self.outbox,
                    timeout,
                    modules,
                ),
                name=f"bakery-rank{r}",
                daemon=True,
            )
            for r in ranks
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
            self.pools[world] = _Ranks(
                world, gen, ranks, tuple(store_at), backend, devices, timeout, modules, self.send
            )
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


def _main(argv: Sequence[str]) -> None:
    """``python -m bakery.testing.nodes FD VERDICT CONFIG``: a worker's rank server on
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
    _main(sys.argv)
