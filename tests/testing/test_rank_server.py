"""The ranks' fork server (dist.start_rank_server / stop_rank_server): stopped, it is
gone and reaped (no process of the session outlives it), its ranks' CPU time is counted
among this process's children, and the next pool starts a fresh one."""

from __future__ import annotations

import contextlib
import os
import resource
from multiprocessing import forkserver
from pathlib import Path

import pytest

from bakery.testing.dist import RankPool, rank_context, start_rank_server, stop_rank_server


def rank_burns_cpu(ctx) -> int:
    total = 0
    for i in range(3_000_000):
        total += i % 7
    return ctx.rank


def server_pid() -> int | None:
    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def test_a_stopped_server_is_gone_and_its_ranks_counted(cpu_ranks: None) -> None:
    if rank_context().get_start_method() != "forkserver":
        pytest.skip("no fork server on this platform")
    start_rank_server()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    with RankPool(2, timeout=60) as pool:
        assert pool.run(rank_burns_cpu) == [0, 1]
    pid = server_pid()
    assert pid is not None

    stop_rank_server()

    assert server_pid() is None
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # the ranks' work (two ranks, a busy loop each) now counts among the children
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before > 0.1

    with RankPool(2, timeout=60) as pool:  # a fresh server for the next pool
        assert pool.run(rank_burns_cpu) == [0, 1]
    assert server_pid() not in (None, pid)


def rank_all_reduce(ctx) -> float:
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t, group=ctx.group)
    return float(t)


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket these processes hold."""
    import socket as _socket

    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", _socket.AF_INET), ("tcp6", _socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            addr, port = fields[1].split(":")
            raw = bytes.fromhex(addr)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((_socket.inet_ntop(family, raw), int(port, 16)))
    return found


def test_the_store_and_gloo_listen_on_loopback_only(cpu_ranks: None) -> None:
    with RankPool(2, timeout=60) as pool:
        assert pool.run(rank_all_reduce) == [2.0, 2.0]
        pids = [os.getpid(), *(p.pid for p in pool._procs)]
        found = listening(pids)
        store_port = pool._store.port
    assert ("127.0.0.1", store_port) in found  # the port the store bound itself
    assert len(found) > 1  # gloo's pairs too
    assert {addr for addr, _ in found} == {"127.0.0.1"}


def test_the_store_takes_its_port_itself_on_the_host_asked(cpu_ranks: None) -> None:
    from bakery.testing.dist import open_store

    store, port = open_store("127.0.0.1")
    assert port == store.port and port > 0
    assert ("127.0.0.1", port) in listening([os.getpid()])
    store.set("k", "v")
    other, other_port = open_store("127.0.0.1")
    assert other_port != port  # two stores never race for one port
    del store, other
