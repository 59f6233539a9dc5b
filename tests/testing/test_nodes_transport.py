"""The transport NCCL chose between nodes (bakery.testing.transport), read from its
``NCCL_DEBUG=INFO`` output in the formats NCCL prints (host:pid:tid [dev] NCCL INFO ...):
RoCE/InfiniBand with its devices and out-of-band interface, a fallback to sockets with its
interface, one host's P2P/SHM, and ``--require-transport``'s verdict on each."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakery.testing import transport

#: Two GB10s over their RoCE link (NCCL 2.2x): IB found, channels over NET/IB.
ROCE = """\
spark-a:4242:4242 [0] NCCL INFO Bootstrap: Using enp1s0f1np1:192.168.100.10<0>
spark-a:4242:4242 [0] NCCL INFO cudaDriverVersion 13000
NCCL version 2.27.7+cuda13.0
spark-a:4242:4301 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
spark-a:4242:4301 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE \
[RO]; OOB enp1s0f1np1:192.168.100.10<0>
spark-a:4242:4301 [0] NCCL INFO Using network IB
spark-a:4242:4301 [0] NCCL INFO ncclCommInitRankConfig comm 0xaaaa rank 0 nranks 2 cudaDev 0 \
nvmlDev 0 busId f01000 commId 0x1 - Init START
spark-a:4242:4301 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
spark-a:4242:4301 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
spark-a:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
spark-a:4242:4301 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
"""

#: The same pair where the RDMA stack is missing: NCCL says so and runs over sockets,
#: here on the 1 GbE management port.
SOCKETS = """\
NCCL version 2.27.7+cuda13.0
spark-a:4242:4301 [0] NCCL INFO NET/IB : No device found.
spark-a:4242:4301 [0] NCCL INFO NET/Socket : Using [0]enP7s7:10.0.0.5<0>
spark-a:4242:4301 [0] NCCL INFO Using network Socket
spark-a:4242:4301 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
spark-a:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""

#: An older NCCL (2.4) on InfiniBand proper, where its OOB interface is ib0.
OLD_IB = """\
gpu01:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>
gpu01:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
NCCL version 2.4.7+cuda10.0
gpu01:20:289 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/0
gpu01:20:289 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
"""

#: Two GPUs of one host: no network between the ranks.
ONE_HOST = """\
h100:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h100:77:90 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h100:77:90 [0] NCCL INFO Using network Socket
"""

#: IB on most channels, but one fell back to sockets: a fallback all the same.
MIXED = (
    ROCE + "spark-a:4242:4301 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
)


@pytest.mark.parametrize(
    ("log", "net", "devices", "interface", "version"),
    [
        (
            ROCE,
            "IB",
            "rocep1s0f1:1/RoCE,roceP2p1s0f1:1/RoCE",
            "enp1s0f1np1:192.168.100.10",
            "2.27.7",
        ),
        (SOCKETS, "Socket", "", "enP7s7:10.0.0.5", "2.27.7"),
        (OLD_IB, "IB", "mlx5_0:1/IB", "ib0:192.168.11.1", "2.4.7"),
        (MIXED, "Socket", "", "", "2.27.7"),
    ],
)
def test_the_network_and_its_interface_come_from_the_channels(
    log: str, net: str, devices: str, interface: str, version: str
) -> None:
    found = transport.parse(log.splitlines())
    assert (found.net, found.devices, found.interface, found.version) == (
        net,
        devices,
        interface,
        version,
    )


def test_one_host_has_no_network_between_its_ranks() -> None:
    found = transport.parse(ONE_HOST.splitlines())
    assert found.net is None and found.local == "P2P"
    assert found.describe() == "no network (within the host: P2P)"


def test_the_description_names_the_devices_and_interface() -> None:
    assert transport.parse(ROCE.splitlines()).describe() == (
        "NET/IB (rocep1s0f1:1/RoCE,roceP2p1s0f1:1/RoCE, enp1s0f1np1:192.168.100.10)"
    )
    assert transport.parse(SOCKETS.splitlines()).describe() == "NET/Socket (enP7s7:10.0.0.5)"


def test_the_files_of_a_folder_are_read_together(tmp_path: Path) -> None:
    assert transport.read(tmp_path) is None
    (tmp_path / "nccl.spark-a.4242.log").write_text(SOCKETS)
    (tmp_path / "nccl.spark-a.4243.log").write_text("")
    found = transport.read(tmp_path)
    assert found is not None and found.net == "Socket"


def _worlds(log: str) -> dict[int, dict[str, str | None]]:
    return {2: transport.as_dict(transport.parse(log.splitlines()))}


def test_require_ib_fails_a_run_that_fell_back_to_sockets() -> None:
    assert transport.unmet("ib", _worlds(ROCE), interpret=False) is None
    why = transport.unmet("ib", _worlds(SOCKETS), interpret=False)
    assert why == (
        "--require-transport ib: world 2 ran over NET/Socket (enP7s7:10.0.0.5); NCCL fell "
        "back (see `bakery doctor`: NCCL_IB_HCA, NCCL_SOCKET_IFNAME)"
    )
    assert transport.unmet("ib", _worlds(MIXED), interpret=False) is not None
    assert transport.unmet("socket", _worlds(SOCKETS), interpret=False) is None
    assert transport.unmet(None, _worlds(SOCKETS), interpret=False) is None


def test_require_fails_a_run_without_an_nccl_world() -> None:
    assert transport.unmet("ib", {}, interpret=True) == (
        "--require-transport ib: no world ran over NCCL (gloo on the CPU)"
    )
    assert transport.unmet("ib", {}, interpret=False) == (
        "--require-transport ib: no world ran over NCCL (no NCCL world across the nodes ran)"
    )
