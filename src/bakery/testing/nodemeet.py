"""``bakery doctor`` across nodes: each node's versions, the round trip between them and
how far their clocks are apart, over the same authenticated connection a multi-node
verify joins by (:mod:`bakery.testing.nodes`)."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from multiprocessing import AuthenticationError
from typing import Any

from bakery.errors import VerifyError
from bakery.testing.nodes import HANDSHAKE, TOKEN_ENV, Layout, authenticated, connect, family, recv


def meet(
    where: Layout, key: bytes, info: Mapping[str, Any], *, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """``bakery doctor`` across nodes: each node's ``info`` (versions), with how long a
    round trip took (``rtt``) and how far its clock is from this node's (``offset``,
    seconds: theirs minus mine, halfway through the round trip, as NTP reckons). On the
    head: every worker's, and ``{"node": n, "missing": why}`` for one that never came;
    on a worker: the head's. Connections authenticated as verify's are."""
    if not where.head:
        conn = connect(where, key, timeout)
        try:
            sent = time.time()
            conn.send(("doctor", where.node_rank, dict(info)))
            _, theirs, at = recv(conn, HANDSHAKE)
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
        (where.master_addr, where.master_port), family=family(where.master_addr)
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
                conn = authenticated(sock, key, server=True)
            except AuthenticationError:
                refused.append(f"refused {peer[0]}: wrong {TOKEN_ENV}")
                continue
            except (OSError, EOFError):
                continue
            try:
                _, node, theirs = recv(conn, HANDSHAKE)
                conn.send(("doctor", dict(info), time.time()))
                _, offset, rtt = recv(conn, HANDSHAKE)
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
