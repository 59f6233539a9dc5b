"""The ranks' fork server (dist.start_rank_server / stop_rank_server): stopped, it is
gone and reaped (no process of the session outlives it), its ranks' CPU time is counted
among this process's children, and the next pool starts a fresh one."""

from __future__ import annotations

import os
import resource
from multiprocessing import forkserver

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
