"""Which transport NCCL chose, read from its ``NCCL_DEBUG=INFO`` output.

NCCL may run between hosts over InfiniBand/RoCE (``NET/IB``) or fall back to TCP
sockets (``NET/Socket``), silently, and on whichever interface it picked: on the user's
pair of GB10s that is the 200 GbE RoCE link or, wrongly, the 1 GbE management port.
vLLM's own advice is to read NCCL's debug output for "via NET/IB"; this module does.

The lines it reads (NCCL 2.4 to 2.2x keep these shapes; host, pid and thread first)::

    host:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
    host:123:456 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
    host:123:456 [0] NCCL INFO Using network IB
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
    NCCL version 2.21.5+cuda12.4

The channels decide (what a connection between ranks actually used); without any
"via NET/" channel, the network NCCL said it uses. Hand-written: NCCL has no
machine-readable report of its choice, and these few patterns are all it takes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_NET_IB = re.compile(r"NCCL INFO NET/IB : Using (.*?)(?:;\s*OOB\s+([\w.:-]+?):([^<\s]+)<\d+>)?\s*$")
_NET_SOCKET = re.compile(r"NCCL INFO NET/Socket : Using \[\d+\]([\w.:-]+?):([^<\s]+)<\d+>")
_NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
_CHANNEL = re.compile(r"NCCL INFO Channel \S+ : .*? via (NET/(\w+)\S*|P2P\S*|SHM\S*|COLLNET\S*)")
_IB_DEVICE = re.compile(r"\[\d+\]([\w.-]+:\d+/\w+)")


@dataclass(frozen=True)
class Transport:
    """What NCCL chose, as far as its log says."""

    #: "IB" (InfiniBand or RoCE), "Socket", another network's name, or None: the ranks
    #: never talked over a network (one host: P2P or SHM)
    net: str | None = None
    #: the IB devices NCCL uses (``mlx5_0:1/RoCE``), comma-separated
    devices: str = ""
    #: the interface and address of the network in use (IB's out-of-band one for IB)
    interface: str = ""
    #: within a host: "P2P" or "SHM" where a channel used it
    local: str = ""
    version: str = ""

    def describe(self) -> str:
        if self.net is None:
            return f"no network (within the host: {self.local or 'nothing seen'})"
        where = ", ".join(x for x in (self.devices, self.interface) if x)
        return f"NET/{self.net}" + (f" ({where})" if where else "")


def parse(lines: Iterable[str]) -> Transport:
    """The transport one rank's (or several ranks') NCCL debug lines show."""
    found: dict[str, str] = {}
    channels: list[str] = []
    for line in lines:
        _read(line, found, channels)
    # channels only within the host (P2P, SHM): no network carried anything
    net = None if not channels and found.get("local") else _net(channels, found.get("network"))
    if net == "IB":
        devices, interface = found.get("ib_devices", ""), found.get("ib_oob", "")
    elif net == "Socket":
        devices, interface = "", found.get("socket", "")
    else:
        devices, interface = "", ""
    return Transport(net, devices, interface, found.get("local", ""), found.get("version", ""))


def _read(line: str, found: dict[str, str], channels: list[str]) -> None:
    if m := _VERSION.search(line):
        found.setdefault("version", m.group(1))
    elif m := _NET_IB.search(line):
        found["ib_devices"] = ",".join(_IB_DEVICE.findall(m.group(1)))
        if m.group(2):
            found["ib_oob"] = f"{m.group(2)}:{m.group(3)}"
    elif m := _NET_SOCKET.search(line):
        found["socket"] = f"{m.group(1)}:{m.group(2)}"
    elif m := _NETWORK.search(line):
        found["network"] = m.group(1)
    elif m := _CHANNEL.search(line):
        if m.group(2):
            channels.append(m.group(2))
        else:
            found.setdefault("local", m.group(1).split("/")[0])


def _net(channels: list[str], network: str | None) -> str | None:
    if "Socket" in channels:  # one channel over sockets is a fallback, whatever the rest
        return "Socket"
    if channels:
        return channels[0]
    return network


def read(folder: Path) -> Transport | None:
    """The transport in the NCCL debug files of ``folder`` (NCCL_DEBUG_FILE), or None
    when there are none."""
    files = sorted(p for p in folder.glob("nccl.*") if p.is_file() and not p.is_symlink())
    if not files:
        return None
    lines: list[str] = []
    for p in files:
        with open(p, encoding="utf-8", errors="replace") as f:
            lines += f.read(4 << 20).splitlines()
    return parse(lines)


#: ``--require-transport`` values, and the networks each accepts.
REQUIRE = {"ib": ("IB",), "socket": ("Socket",)}


def unmet(
    required: str | None, found: Mapping[int, Mapping[str, str | None]], *, interpret: bool
) -> str | None:
    """Why a run does not meet ``--require-transport`` (one line), or None."""
    if required is None:
        return None
    nets = REQUIRE[required]
    if interpret or not found:
        how = "gloo on the CPU" if interpret else "no NCCL world across the nodes ran"
        return f"--require-transport {required}: no world ran over NCCL ({how})"
    for world, t in sorted(found.items()):
        if t.get("net") not in nets:
            shown = Transport(**{k: v or "" for k, v in t.items() if k != "net"}, net=t.get("net"))
            return (
                f"--require-transport {required}: world {world} ran over "
                f"{shown.describe()}; NCCL fell back (see `bakery doctor`: NCCL_IB_HCA, "
                "NCCL_SOCKET_IFNAME)"
            )
    return None


def as_dict(t: Transport) -> dict[str, str | None]:
    return asdict(t)
