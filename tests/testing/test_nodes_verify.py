"""``bakery verify --nnodes 2``: two real ``bakery verify`` processes as two nodes of this
machine (loopback, gloo on the CPU) give the verdict one host gives, on both nodes, and the
head's summary names each node and the ranks it ran; a worker whose tree differs stops both
with one line naming the tree."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.series import make_series, udiff
from tests.support.trees import cache_release

TESTS = """\
import pytest


def test_plain() -> None:
    assert 1 + 1 == 2


def rank_sum(ctx):
    import torch
    import torch.distributed as dist

    t = torch.tensor([ctx.rank + 1.0])
    dist.all_reduce(t, group=ctx.group)
    return float(t)


def test_two_ranks(rank_pool) -> None:
    assert rank_pool(2).run(rank_sum) == [3.0, 3.0]


def test_skipped() -> None:
    pytest.skip("not here")


def test_fails() -> None:
    assert rank_sum is None
"""


@pytest.fixture
def baked(cli: Callable[..., Result], home: Path) -> Path:
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/x.py": "A = 1\n"})
    series = make_series(
        home,
        "s",
        {"01-x.diff": udiff("x.py", "A = 1\n", "A = 2\n")},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\nenv = "light"\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_nodes.py").write_text(TESTS)
    assert cli("apply", "s").exit_code == 0
    return home


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bakery(home: Path, *args: str, token: str = "t" * 32) -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": "200", "BAKERY_VERIFY_TOKEN": token}
    return subprocess.Popen(
        [sys.executable, "-m", "bakery", "verify", "s", "--interpret", *args],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _done(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=300)  # a guard against a hang, not a measure of speed
    return proc.returncode, out


def _verdict(out: str) -> str:
    """The last line without its time."""
    return re.sub(r" in [\d.]+s$", "", out.strip().splitlines()[-1])


def _nodes(rank: int, port: int) -> tuple[str, ...]:
    return (
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
    )


@pytest.mark.slow
def test_two_nodes_give_one_hosts_verdict_on_both(baked: Path) -> None:
    code, one = _done(_bakery(baked, "--no-reuse"))
    assert _verdict(one) == "tests failed: 2 passed, 1 failed, 1 skipped"

    port = _port()
    worker = _bakery(baked, *_nodes(1, port))
    head_code, head = _done(_bakery(baked, *_nodes(0, port)))
    worker_code, work = _done(worker)

    assert (head_code, worker_code) == (code, code) == (1, 1)
    assert _verdict(head) == _verdict(work) == _verdict(one)
    host = socket.gethostname()
    assert f"node 0 (head) {host}: world 2 ranks [0]" in head
    assert f"node 1 {host}: world 2 ranks [1]" in head


@pytest.mark.slow
def test_a_worker_whose_tree_differs_stops_both_with_one_line(baked: Path) -> None:
    tree = next((baked / "build").glob("s-*"))
    other = baked / "other"
    subprocess.run(["cp", "-a", str(tree), str(other)], check=True)
    (other / "vllm" / "x.py").write_text("A = 3\n")
    port = _port()
    worker = _bakery(baked, "--tree", str(other), *_nodes(1, port))
    head_code, head = _done(_bakery(baked, *_nodes(0, port)))
    worker_code, work = _done(worker)
    line = f"error: node 1 ({socket.gethostname()}) differs from the head: tree ("
    assert (head_code, worker_code) == (2, 2)
    assert head.strip().splitlines()[-1].startswith(line)
    assert work.strip().splitlines()[-1] == head.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--require-transport", "ib"], {}, "--require-transport: only with --nnodes"),
        (
            [
                "--require-transport",
                "tcp",
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master-addr",
                "127.0.0.1",
            ],
            {},
            "--require-transport 'tcp': use ib or socket",
        ),
        (
            ["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1"],
            {},
            "--nnodes: set BAKERY_VERIFY_TOKEN",
        ),
        (
            ["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"],
            {},
            "--node-rank 2: from 0 to 1",
        ),
        ([], {"NNODES": "2", "NODE_RANK": "1"}, "--nnodes 2: pass --master-addr"),
        (
            ["--pristine", "--nnodes", "2", "--node-rank", "0", "--master-addr", "h"],
            {"BAKERY_VERIFY_TOKEN": "t" * 32},
            "--pristine: on one host only",
        ),
    ],
)
def test_flags_that_do_not_go_together_are_one_line_before_anything_runs(
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    for name in ("BAKERY_VERIFY_TOKEN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    r = cli("verify", "s", *args)
    assert r.exit_code == 2, r.output
    (line,) = [x for x in r.output.splitlines() if x.strip()]
    assert line.startswith(f"error: {said}"), r.output
