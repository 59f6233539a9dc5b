"""``bakery doctor`` (bakery.verifying.doctor): on this host, one line per finding with
the GPU as torch sees it, the versions, Triton's ptxas and NCCL; a ptxas that does not
know the GPU's arch is a problem whose fix names a toolkit's ptxas; across nodes, each
node is reached (authenticated) and its clock and versions compared."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import nodemeet
from bakery.verifying import doctor

TOKEN = b"a-token-of-the-doctor-0123456789"


def test_this_host_gets_a_line_for_each_topic_as_torch_sees_it() -> None:
    import torch

    found = doctor.examine()
    topics = [f.topic for f in found]
    assert topics[:2] == ["GPU", "versions"]
    assert "ptxas" in topics and "NCCL" in topics
    gpu = found[0]
    assert gpu.ok is torch.cuda.is_available()
    if not gpu.ok:
        assert "sees no CUDA GPU" in gpu.text and "--interpret" in str(gpu.fix)
    versions = found[1].text
    assert f"torch {torch.__version__}" in versions
    assert f"Triton {importlib.metadata.version('triton')}" in versions


def test_the_cli_prints_one_line_per_finding_and_exits_1_on_a_problem(cli: Any) -> None:
    r = cli("doctor")
    lines = r.output.splitlines()
    problems = [line for line in lines if line.startswith("problem ")]
    assert all(line.startswith(("ok ", "problem ")) for line in lines[:-1])
    assert all("; fix: " in line for line in problems)
    assert r.exit_code == (1 if problems else 0)
    assert lines[-1] == (
        f"{len(problems)} problem" + "s" * (len(problems) > 1) if problems else "no problem"
    )


def _bundled() -> Path:
    found = doctor._triton_bin()
    if found is None or not (found / "ptxas-blackwell").is_file():
        pytest.skip("this Triton bundles no ptxas-blackwell")
    return found


def test_a_ptxas_that_does_not_know_the_arch_is_a_problem_with_the_toolkits_ptxas(
    tmp_path: Path,
) -> None:
    bundled = _bundled()
    old = str(bundled / "ptxas")  # CUDA 12.8: no sm_121a (the GB10's arch)
    _, archs = doctor.ptxas_facts(old)
    if "sm_121a" in archs:
        pytest.skip("this Triton's ptxas knows sm_121a")
    toolkit = tmp_path / "cuda" / "bin"
    toolkit.mkdir(parents=True)
    (toolkit / "ptxas").symlink_to(bundled / "ptxas-blackwell")  # a ptxas that knows it
    env = {"TRITON_PTXAS_BLACKWELL_PATH": old, "CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}

    (problem,) = doctor.ptxas_findings("sm_121a", env)
    assert not problem.ok
    assert "does not know sm_121a" in problem.text and "CUDA 12.8" in problem.text
    assert problem.fix == f"export TRITON_PTXAS_BLACKWELL_PATH={toolkit / 'ptxas'}"

    (fixed,) = doctor.ptxas_findings(
        "sm_121a", dict(env, TRITON_PTXAS_BLACKWELL_PATH=str(toolkit / "ptxas"))
    )
    assert fixed.ok and "knows sm_121a" in fixed.text


def test_without_a_toolkit_the_fix_says_which_cuda_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundled = _bundled()
    monkeypatch.setattr(doctor, "TOOLKITS", ())
    env = {"TRITON_PTXAS_BLACKWELL_PATH": str(bundled / "ptxas"), "PATH": ""}
    (problem,) = doctor.ptxas_findings("sm_121a", env)
    if problem.ok:
        pytest.skip("this Triton's ptxas knows sm_121a")
    assert "12.9 or later for sm_121a" in str(problem.fix)


def test_each_pre_blackwell_arch_asks_triton_s_plain_ptxas() -> None:
    _bundled()
    assert doctor.ptxas_tool("sm_90a") == ("ptxas", "TRITON_PTXAS_PATH")
    assert doctor.ptxas_tool("sm_121a") == ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH")


@pytest.mark.parametrize(
    ("offset", "ok"), [(0.002, True), (-0.9, True), (1.5, False), (-30.0, False)]
)
def test_clocks_further_apart_than_a_second_are_a_problem(offset: float, ok: bool) -> None:
    mine = {"torch": "2", "triton": "3", "host": "a"}
    (f,) = doctor.peer_findings(mine, [dict(mine, node=1, host="b", offset=offset, rtt=0.001)])
    assert f.ok is ok
    assert f.topic == "node 1 (b)"
    assert ("ahead" if offset >= 0 else "behind") in f.text
    if not ok:
        assert "timedatectl set-ntp true" in str(f.fix)


def test_versions_that_differ_across_nodes_are_a_problem() -> None:
    mine = {"torch": "2.9.0", "triton": "3.5.0", "bakery": "0.1.0"}
    peer = dict(mine, node=1, host="b", offset=0.0, rtt=0.001, triton="3.4.0")
    reached, differ = doctor.peer_findings(mine, [peer])
    assert reached.ok and not differ.ok
    assert differ.text == "versions differ: triton 3.4.0 there, 3.5.0 here"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_meet_over_loopback_and_a_missing_one_is_named() -> None:
    from bakery.testing import nodes

    port = _port()
    worker: dict[str, Any] = {}
    layout = nodes.Layout(2, 1, "127.0.0.1", port)
    thread = threading.Thread(
        target=lambda: worker.update(found=nodemeet.meet(layout, TOKEN, {"host": "w"}, timeout=20))
    )
    thread.start()
    (peer,) = nodemeet.meet(nodes.Layout(2, 0, "127.0.0.1", port), TOKEN, {"host": "h"}, timeout=20)
    thread.join(timeout=20)
    assert peer["node"] == 1 and peer["host"] == "w" and abs(peer["offset"]) < 0.5
    assert worker["found"][0]["host"] == "h" and worker["found"][0]["node"] == 0

    port = _port()
    (missing,) = nodemeet.meet(nodes.Layout(2, 0, "127.0.0.1", port), TOKEN, {}, timeout=1)
    (f,) = doctor.peer_findings({}, [missing])
    assert not f.ok
    assert f.text == f"it did not join 127.0.0.1:{port} in 1 s"


def test_the_nccl_line_names_the_interface_toward_the_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    first = doctor.nccl_findings({"nccl": "2.27.3"}, "127.0.0.1", across=False)[0]
    assert first.text == "NCCL 2.27.3; interface lo (127.0.0.1, toward 127.0.0.1)"
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth9")
    wrong = doctor.nccl_findings({"nccl": "2.27.3"}, "127.0.0.1", across=True)[1]
    assert not wrong.ok
    assert wrong.fix is not None and wrong.fix.startswith("export NCCL_SOCKET_IFNAME=lo")
    assert os.environ["NCCL_SOCKET_IFNAME"] == "eth9"
