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
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
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


def authenticated(sock: socket.socket, key: bytes, *, server: bool) -> Connection:
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


def recv(conn: Connection, seconds: float) -> Any:
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
            server = socket.create_server((addr, port), family=family(addr))
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
            conn = authenticated(sock, self.key, server=True)
        except AuthenticationError:
            refused.append(f"refused {peer}: wrong {TOKEN_ENV}")
            _log.warning(f"refused a node at {peer}: its {TOKEN_ENV} is not the head's")
            return
        except (OSError, EOFError):
            sock.close()
            return
        try:
            hello = recv(conn, HANDSHAKE)
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
        self._folder = tempfile.mkdtemp(prefix="bakery-nodes-", dir=short_tmp())
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
            reader = threading.Thread(target=self._from_child, args=(conn,), daemon=True)
            reader.start()
            self._reader = reader  # seen by child_done only once it runs

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
                    if recv(node.conn, max(0.0, ends - time.monotonic()))[0] == "bye":
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


def family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _address(host: str) -> str:
    """``host`` as an IP address (the store binds to it, the ranks connect to it)."""
    try:
        return str(socket.getaddrinfo(host, None, family(host), socket.SOCK_STREAM)[0][4][0])
    except OSError:
        return host


def short_tmp() -> str | None:
    """A folder short enough for an AF_UNIX path (108 bytes) whatever TMPDIR is."""
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) < 60 else ("/tmp" if os.path.isdir("/tmp") else None)


# -- the head's pytest process: its pools' way to the other nodes -----------------------


def ranks_on(node: int, world: int, nnodes: int) -> list[int]:
    from bakery.testing.dist import node_of

    return [r for r in range(world) if node_of(r, world, nnodes) == node]


# -- a worker ---------------------------------------------------------------------------


def connect(where: Layout, key: bytes, timeout: float) -> Connection:
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
            return authenticated(sock, key, server=False)
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
    """Connect to the head (:func:`connect`), say hello: (the connection, the head's
    welcome). One line (VerifyError) when the head refuses the token or the inputs, or
    never answers."""
    head = f"{where.master_addr}:{where.master_port}"
    conn = connect(where, key, timeout)
    hello = {"node": where.node_rank, "host": socket.gethostname(), "gpus": gpus}
    try:
        conn.send(("hello", dict(hello, prints=dict(prints))))
        answer = recv(conn, HANDSHAKE)
    except (OSError, EOFError, TimeoutError) as e:
        conn.close()
        raise VerifyError(
            f"node {where.node_rank}: the head at {head} stopped answering ({e})"
        ) from None
    if answer[0] != "welcome":
        conn.close()
        raise VerifyError(str(answer[1]))
    return conn, dict(answer[1])
