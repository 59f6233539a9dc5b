"""A verify across hosts (bakery.testing.nodes), two nodes as two parts of this machine over
loopback: the head's pool runs each world's ranks on both nodes (a collective spans them),
the summary names each node and its ranks, and the worker gets the head's verdict. A
wrong token, a node that never joins, inputs that differ and a lost node each end in one
line, within a bounded time, with nothing left running."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bakery.testing.dist as dist
import bakery.testing.nodes as nodes
from bakery.errors import UsageError, VerifyError
from bakery.testing import headlink, nodeserver

TOKEN = b"a-token-of-the-two-nodes-0123456789"
PRINTS = {"tree": "1" * 64, "tests": "2" * 64, "bakery": "3" * 64}


def rank_sum(ctx: Any) -> tuple[int, int, float]:
    """Each rank's own number, its process, and the sum over every rank (a collective)."""
    import torch
    import torch.distributed as tdist

    t = torch.tensor([ctx.rank + 1.0])
    tdist.all_reduce(t, group=ctx.group)
    return ctx.rank, os.getpid(), float(t)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker(threading.Thread):
    """Node 1: nodes.run_worker in a thread (its rank server is a child process)."""

    def __init__(
        self, port: int, *, key: bytes = TOKEN, prints: dict[str, str] = PRINTS, timeout: float = 30
    ) -> None:
        super().__init__(daemon=True)
        self.args = (nodes.Layout(2, 1, "127.0.0.1", port), key, prints, {"tests": HERE})
        self.timeout = timeout
        self.verdict: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        try:
            self.verdict = nodeserver.run_worker(
                *self.args, python=None, env=env, timeout=self.timeout
            )
        except BaseException as e:  # noqa: BLE001 (the test reads it)
            self.error = e


HERE = str(Path(__file__).parent)


def head(port: int, *, prints: dict[str, str] = PRINTS, join_timeout: float = 30) -> nodes.Head:
    return nodes.Head(
        nodes.Layout(2, 0, "127.0.0.1", port),
        TOKEN,
        prints,
        {"tests": HERE},
        join_timeout=join_timeout,
    )


@pytest.fixture
def two_nodes(cpu_ranks: None) -> Iterator[tuple[nodes.Head, headlink.HeadLink, Worker]]:
    port = free_port()
    worker = Worker(port)
    worker.start()
    h = head(port)
    h.gather()
    link = headlink.HeadLink.from_env(h.relay())
    assert link is not None
    yield h, link, worker
    link.close()
    h.close()
    worker.join(timeout=30)


def test_a_world_spans_both_nodes_and_the_worker_takes_the_heads_verdict(
    two_nodes: tuple[nodes.Head, headlink.HeadLink, Worker],
) -> None:
    h, link, worker = two_nodes
    for world, total in ((2, 3.0), (4, 10.0)):
        with dist.RankPool(world, timeout=60, link=link) as pool:
            results = pool.run(rank_sum)
        assert [r for r, _, _ in results] == list(range(world))
        assert {s for _, _, s in results} == {total}  # one all_reduce over both nodes
        assert len({pid for _, pid, _ in results}) == world
    assert link.summary() == [
        f"node 0 (head) {socket.gethostname()}: world 2 ranks [0]; world 4 ranks [0, 1]",
        f"node 1 {socket.gethostname()}: world 2 ranks [1]; world 4 ranks [2, 3]",
    ]
    link.close()
    h.finish({"exit_code": 1, "pytest_exit_code": 1, "passed": 7})
    worker.join(timeout=30)
    assert worker.error is None
    assert worker.verdict == {"exit_code": 1, "pytest_exit_code": 1, "passed": 7}


def test_the_transport_a_pools_nccl_ranks_logged_reaches_the_head(
    two_nodes: tuple[nodes.Head, headlink.HeadLink, Worker], tmp_path: Path
) -> None:
    from bakery.testing import transport

    h, link, _ = two_nodes
    pool = dist.RankPool(2, timeout=60, link=link)
    log = tmp_path / "nccl"
    log.mkdir()
    (log / "nccl.spark-a.4242.log").write_text(
        "spark-a:4242:4301 [0] NCCL INFO NET/Socket : Using [0]enP7s7:10.0.0.5<0>\n"
        "spark-a:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    pool._nccl_log = str(log)  # as a pool of NCCL ranks across nodes leaves it
    pool._report_transport()
    assert not log.exists()
    link.close()
    h.child_done()
    assert h.transports[2]["net"] == "Socket"
    assert transport.unmet("ib", h.transports, interpret=False) == (
        "--require-transport ib: world 2 ran over NET/Socket (enP7s7:10.0.0.5); NCCL fell "
        "back (see `bakery doctor`: NCCL_IB_HCA, NCCL_SOCKET_IFNAME)"
    )


def test_a_lost_node_fails_the_task_in_bounded_time_and_is_named(
    two_nodes: tuple[nodes.Head, headlink.HeadLink, Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    h, link, worker = two_nodes
    heard: list[str] = []
    link.on_lost(heard.append)
    with dist.RankPool(2, timeout=60, link=link) as pool:
        assert [r for r, _, _ in pool.run(rank_sum)] == [0, 1]
        remote = pool._procs[1]
        server = _rank_server_pid()
        os.killpg(server, 9)  # the whole node: its rank server and its ranks
        started = time.monotonic()
        with pytest.raises(dist.RankError, match=r"node 1 \(.*\) was lost"):
            pool.run(rank_sum)
        took = time.monotonic() - started
    assert took < nodes.LOST_AFTER + 5
    assert not remote.is_alive()
    assert heard and heard[0].startswith("node 1 (")
    assert h.lost == heard[0]
    worker.join(timeout=30)
    assert isinstance(worker.error, VerifyError)  # its rank server died: no verdict
    assert _gone(server)


def _rank_server_pid() -> int:
    """The worker's rank server: the child running ``-m bakery.testing.nodeserver``."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bakery.testing.nodeserver" in cmd and os.getpgid(int(pid)) == int(pid):
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid():
                return int(pid)
    raise AssertionError("no rank server")


def _gone(pgid: int, wait: float = 5.0) -> bool:
    """No live process (zombies aside) is left in the process group ``pgid``."""
    ends = time.monotonic() + wait
    while True:
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > ends:
            return not alive
        time.sleep(0.1)


def test_a_wrong_token_is_refused_with_one_line_on_both_nodes(cpu_ranks: None) -> None:
    port = free_port()
    worker = Worker(port, key=b"another-token-0123456789abcdef")
    worker.start()
    with pytest.raises(VerifyError) as e:
        head(port, join_timeout=3).gather()
    worker.join(timeout=30)
    assert str(e.value) == (
        f"node 1 never joined 127.0.0.1:{port} in 3 s "
        "(refused 127.0.0.1: wrong BAKERY_VERIFY_TOKEN)"
    )
    assert str(worker.error) == (
        f"node 1: the head at 127.0.0.1:{port} refused this node's BAKERY_VERIFY_TOKEN "
        "(not the head's)"
    )


def test_a_node_that_never_joins_ends_the_run_in_its_time(cpu_ranks: None) -> None:
    started = time.monotonic()
    with pytest.raises(VerifyError, match=r"^node 1 never joined 127\.0\.0\.1:\d+ in 1 s$"):
        head(free_port(), join_timeout=1).gather()
    assert time.monotonic() - started < 5


def test_a_head_that_never_answers_ends_the_worker_in_its_time(cpu_ranks: None) -> None:
    port = free_port()
    worker = Worker(port, timeout=1)
    worker.run()
    assert isinstance(worker.error, VerifyError)
    assert str(worker.error).startswith(
        f"node 1: the head at 127.0.0.1:{port} did not answer in 1 s"
    )


@pytest.mark.parametrize("differs", ["tree", "tests", "bakery"])
def test_inputs_that_differ_are_named_on_both_nodes(cpu_ranks: None, differs: str) -> None:
    port = free_port()
    theirs = dict(PRINTS, **{differs: "f" * 64})
    worker = Worker(port, prints=theirs)
    worker.start()
    with pytest.raises(VerifyError) as e:
        head(port).gather()
    worker.join(timeout=30)
    expected = (
        f"node 1 ({socket.gethostname()}) differs from the head: "
        f"{differs} ({'f' * 12} there, {PRINTS[differs][:12]} on the head)"
    )
    assert str(e.value) == expected
    assert str(worker.error) == expected


def test_fingerprints_change_with_the_tree_the_tests_and_the_series_data(tmp_path: Path) -> None:
    tree, tests, series = tmp_path / "tree", tmp_path / "s" / "tests", tmp_path / "s"
    (tree / "vllm").mkdir(parents=True)
    tests.mkdir(parents=True)
    (tree / "vllm" / "a.py").write_text("a = 1\n")
    (tests / "test_a.py").write_text("def test(): pass\n")
    first = nodes.fingerprints(tree, tests, series)
    (series / "known-defects.toml").write_text("")
    second = nodes.fingerprints(tree, tests, series)
    (tree / "vllm" / "a.py").write_text("a = 2\n")
    third = nodes.fingerprints(tree, tests, series)
    assert nodes.differences(first, second) == ["tests"]
    assert nodes.differences(second, third) == ["tree"]
    assert nodes.differences(third, dict(third, bakery="0")) == ["bakery"]


def test_the_layout_comes_from_the_flags_else_torchruns_variables() -> None:
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    assert nodes.layout(None, None, None, None, env) == nodes.Layout(2, 1, "10.0.0.1", 29400)
    assert nodes.layout(2, 0, "h", None, env) == nodes.Layout(2, 0, "h", 29400)
    assert nodes.layout(2, 0, "h", None, {}) == nodes.Layout(2, 0, "h", nodes.DEFAULT_PORT)
    assert nodes.layout(None, None, None, None, {}) is None
    assert nodes.layout(1, None, None, None, env) is None


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ((2, None, "h", None), {}, "--nnodes 2: pass --node-rank"),
        ((2, 2, "h", None), {}, "--node-rank 2: from 0 to 1"),
        ((2, 0, None, None), {}, "--nnodes 2: pass --master-addr"),
        ((None, None, None, None), {"NNODES": "two"}, "NNODES='two': not a number"),
    ],
)
def test_a_bad_layout_is_one_line(args: tuple[Any, ...], env: dict[str, str], says: str) -> None:
    with pytest.raises(UsageError, match="^" + says.replace("(", r"\(")):
        nodes.layout(args[0], args[1], args[2], args[3], env)


def test_the_token_is_required_and_long_enough() -> None:
    with pytest.raises(UsageError, match="set BAKERY_VERIFY_TOKEN"):
        nodes.token({})
    with pytest.raises(UsageError, match="at least 16"):
        nodes.token({"BAKERY_VERIFY_TOKEN": "short"})
    assert nodes.token({"BAKERY_VERIFY_TOKEN": "x" * 16}) == b"x" * 16


@pytest.mark.parametrize(
    ("hosts", "gpus", "want"),
    [
        (["spark-a", "spark-b"], [-1, 1], [-1, 1]),  # the user's pair: one GPU each
        (["vm", "vm"], [-1, 1], [0, 0]),  # two nodes on one host share its GPU
        (["a", "b", "b"], [-1, 2, 2], [-1, 0, 0]),
    ],
)
def test_nodes_on_one_host_count_no_gpu_of_their_own(
    hosts: list[str], gpus: list[int], want: list[int]
) -> None:
    """NCCL refuses two ranks on one device ("Duplicate GPU detected", seen with two
    nodes on the device's one H100): nodes that share a host share its GPUs, so their
    worlds run gloo (dist.choose_backend), not NCCL."""
    link = headlink.HeadLink.__new__(headlink.HeadLink)
    pairs = enumerate(zip(hosts, gpus, strict=True))
    link.nodes = [{"node": n, "host": h, "gpus": g} for n, (h, g) in pairs]
    assert link.gpus_by_node() == want
