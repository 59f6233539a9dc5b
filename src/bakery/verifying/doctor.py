"""``bakery doctor``: what a GPU verify needs of this host, and of its peers, before it
runs: one line per finding, each problem with its fix.

- the GPU and its compute capability (torch's view);
- the versions of torch (and its CUDA), Triton and the CUDA driver;
- whether the ``ptxas`` Triton will call knows the GPU's architecture, and
  ``TRITON_PTXAS_PATH`` (Triton's bundled ptxas fails on a GB10's ``sm_121a``; a CUDA
  toolkit's ptxas does not);
- the NCCL version and the interface it would use, and the InfiniBand/RoCE devices;
- with ``--nnodes`` (verify's layout flags): whether the nodes reach each other, how far
  apart their clocks are, and whether their versions agree (:func:`bakery.testing.nodemeet.meet`,
  authenticated as verify's connections are).

Nothing here prints: :func:`examine` returns :class:`Finding` values.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import re
import shutil
import socket
import struct
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakery import process
from bakery.testing import nodemeet

#: Clocks further apart than this (seconds) are a problem: logs and results of the
#: nodes stop lining up, and TLS or a token's lifetime may be refused.
CLOCK_SKEW = 1.0


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was looked at, what was found, and (for a problem)
    what to do."""

    topic: str
    text: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.fix is None


def examine(where: Any = None, key: bytes | None = None, *, timeout: float = 30.0) -> list[Finding]:
    """Every finding on this host, and across the nodes of ``where`` (a
    :class:`bakery.testing.nodes.Layout`, with ``key``) when given."""
    facts = versions()
    found = [*gpu_findings(facts), version_finding(facts)]
    arch = facts.get("arch")
    found += ptxas_findings(arch if isinstance(arch, str) else None, os.environ)
    found += nccl_findings(
        facts, where.master_addr if where is not None else None, where is not None
    )
    if where is not None and key is not None:
        public = {k: v for k, v in facts.items() if k in _COMPARED or k == "host"}
        found += peer_findings(public, nodemeet.meet(where, key, public, timeout=timeout))
    return found


#: The versions that must agree across nodes.
_COMPARED = ("torch", "cuda", "triton", "nccl", "bakery")


def versions() -> dict[str, Any]:
    """What this host has: torch (its CUDA, NCCL, GPUs), Triton, the driver, bakery."""
    facts: dict[str, Any] = {"host": socket.gethostname(), "bakery": _version("bakery")}
    facts["triton"] = _version("triton")
    facts["driver"] = driver_version()
    try:
        import torch
    except ImportError:
        facts["torch"] = None
        return facts
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            major, minor = torch.cuda.get_device_capability(0)
            facts["gpus"] = names
            facts["capability"] = f"{major}.{minor}"
            facts["arch"] = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    with contextlib.suppress(Exception):
        if torch.version.cuda:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    return facts


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def driver_version() -> str | None:
    """The CUDA version the driver supports (``cuDriverGetVersion``), or None without one."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    value = ctypes.c_int()
    if lib.cuDriverGetVersion(ctypes.byref(value)) != 0:
        return None
    return f"{value.value // 1000}.{value.value % 1000 // 10}"


def gpu_findings(facts: Mapping[str, Any]) -> list[Finding]:
    if facts.get("torch") is None:
        return [Finding("GPU", "torch is not installed", "install bakery[kernels]")]
    gpus = facts.get("gpus")
    if not gpus:
        build = "a CPU build" if not facts.get("cuda") else f"built for CUDA {facts['cuda']}"
        return [
            Finding(
                "GPU",
                f"torch {facts['torch']} ({build}) sees no CUDA GPU",
                "on a GPU host: a torch built for its CUDA, and the driver; "
                "here: `bakery verify --interpret` (CPU)",
            )
        ]
    more = f" x{len(gpus)}" if len(gpus) > 1 else ""
    return [
        Finding(
            "GPU", f"{gpus[0]}{more}, compute capability {facts['capability']} ({facts['arch']})"
        )
    ]


def version_finding(facts: Mapping[str, Any]) -> Finding:
    cuda, driver = facts.get("cuda"), facts.get("driver")
    text = (
        f"torch {facts.get('torch')} (CUDA {cuda or 'none'}), Triton {facts.get('triton')}, "
        f"CUDA driver {driver or 'none'}, bakery {facts.get('bakery')}"
    )
    if cuda and driver and _tuple(driver) < _tuple(cuda)[:1] + (0,):
        return Finding(
            "versions",
            text,
            f"the driver (CUDA {driver}) is older than torch's CUDA {cuda}: update it",
        )
    return Finding("versions", text)


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2])


# -- ptxas --------------------------------------------------------------------------


def ptxas_tool(arch: str | None) -> tuple[str, str]:
    """(the ptxas Triton calls for ``arch``, the variable that overrides it). Triton 3.5+
    bundles ``ptxas-blackwell`` for sm_100 and later (``TRITON_PTXAS_BLACKWELL_PATH``);
    ``ptxas`` otherwise (``TRITON_PTXAS_PATH``)."""
    bundled = _triton_bin()
    major = int(re.sub(r"\D", "", arch or "0")[:-1] or 0) if arch else 0
    if major >= 10 and bundled is not None and (bundled / "ptxas-blackwell").is_file():
        return "ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH"
    return "ptxas", "TRITON_PTXAS_PATH"


def _triton_bin() -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "backends" / "nvidia" / "bin"
    return found if found.is_dir() else None


def ptxas_facts(path: str) -> tuple[str | None, set[str]]:
    """(the CUDA release of a ptxas, the architectures its ``--help`` lists)."""
    try:
        version = process.run([path, "--version"], timeout=20).stdout.decode(errors="replace")
        helptext = process.run([path, "--help"], timeout=20).stdout.decode(errors="replace")
    except (process.ProcessFailed, subprocess.TimeoutExpired):
        return None, set()
    release = re.search(r"release (\d+\.\d+)", version)
    return (release.group(1) if release else None), set(re.findall(r"\bsm_\d+[af]?\b", helptext))


def ptxas_findings(arch: str | None, environ: Mapping[str, str]) -> list[Finding]:
    """Whether the ptxas Triton will call knows ``arch`` (None: no GPU here, so only what
    Triton has), and where the CUDA toolkit's ptxas is when it does not."""
    name, variable = ptxas_tool(arch)
    chosen = environ.get(variable)
    bundled = _triton_bin()
    path = chosen or (str(bundled / name) if bundled is not None else None)
    if path is None or not os.access(path, os.X_OK):
        where = f"{variable}={chosen}" if chosen else "Triton's bundled one"
        return [
            Finding("ptxas", f"no ptxas at {where}", f"point {variable} at a CUDA toolkit's ptxas")
        ]
    release, archs = ptxas_facts(path)
    source = f"{variable}={path}" if chosen else f"Triton's bundled {name}, {variable} unset"
    text = f"{name}: CUDA {release} ({source})"
    if arch is None:  # no GPU here: what each of Triton's ptxas knows
        found = [Finding("ptxas", f"{text}; knows up to {_newest(archs)}")]
        newer = bundled / "ptxas-blackwell" if bundled is not None else None
        if name == "ptxas" and newer is not None and newer.is_file() and not chosen:
            release, archs = ptxas_facts(str(newer))
            found.append(
                Finding(
                    "ptxas",
                    f"ptxas-blackwell (sm_100 on): CUDA {release} (Triton's bundled, "
                    f"TRITON_PTXAS_BLACKWELL_PATH unset); knows up to {_newest(archs)}",
                )
            )
        toolkit = next((t for t in _toolkit_candidates(environ) if os.access(t, os.X_OK)), None)
        if toolkit is not None:
            release, archs = ptxas_facts(toolkit)
            found.append(
                Finding(
                    "ptxas",
                    f"a CUDA toolkit's ptxas: CUDA {release} at {toolkit}; "
                    f"knows up to {_newest(archs)}",
                )
            )
        return found
    if arch in archs:
        return [Finding("ptxas", f"{text} knows {arch}")]
    toolkit = toolkit_ptxas(environ, arch)
    better = (
        f"export {variable}={toolkit}"
        if toolkit
        else (
            f"install a CUDA toolkit whose ptxas knows {arch} (12.9 or later for sm_121a) "
            f"and export {variable}=/usr/local/cuda/bin/ptxas"
        )
    )
    return [Finding("ptxas", f"{text} does not know {arch}: Triton's compiles fail", better)]


def _newest(archs: set[str]) -> str:
    return max(archs, key=lambda a: (int(re.sub(r"\D", "", a)), a), default="nothing")


#: Where a CUDA toolkit is looked for besides CUDA_HOME, CUDA_PATH and PATH.
TOOLKITS = ("/usr/local/cuda",)


def toolkit_ptxas(environ: Mapping[str, str], arch: str) -> str | None:
    """A CUDA toolkit's ptxas on this host that knows ``arch``: under CUDA_HOME,
    CUDA_PATH, :data:`TOOLKITS`, or on PATH."""
    for path in _toolkit_candidates(environ):
        if os.access(path, os.X_OK) and arch in ptxas_facts(path)[1]:
            return path
    return None


def _toolkit_candidates(environ: Mapping[str, str]) -> list[str]:
    found = [
        os.path.join(base, "bin", "ptxas")
        for base in (environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), *TOOLKITS)
        if base
    ]
    on_path = shutil.which("ptxas", path=environ.get("PATH", ""))
    return [*found, *([on_path] if on_path and on_path not in found else [])]


# -- NCCL and the network -----------------------------------------------------------


def interfaces() -> dict[str, str]:
    """This host's IPv4 addresses and their interfaces (Linux: SIOCGIFADDR)."""
    import fcntl

    found: dict[str, str] = {}
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            found[socket.inet_ntoa(packed[20:24])] = name
    return found


def route(to: str | None) -> tuple[str, str] | None:
    """(this host's address, its interface) on the way to ``to`` (default: the default
    route), as the kernel would send; None without one."""
    target = to or "192.0.2.1"  # TEST-NET-1: only the route is looked up, nothing is sent
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(target), 9))
            mine = str(s.getsockname()[0])
    except OSError:
        return None
    return mine, interfaces().get(mine, "?")


def ib_devices(root: Path = Path("/sys/class/infiniband")) -> list[str]:
    """InfiniBand/RoCE devices and their ports' states (``mlx5_0:1 ACTIVE``)."""
    out = []
    for dev in sorted(root.glob("*")) if root.is_dir() else []:
        for port in sorted((dev / "ports").glob("*")):
            state = (
                (port / "state").read_text().split(":")[-1].strip()
                if (port / "state").is_file()
                else "?"
            )
            layer = (
                (port / "link_layer").read_text().strip()
                if (port / "link_layer").is_file()
                else "?"
            )
            out.append(f"{dev.name}:{port.name} {layer} {state}")
    return out


def nccl_findings(facts: Mapping[str, Any], peer: str | None, across: bool) -> list[Finding]:
    """The NCCL version, the interface it would use toward ``peer`` (NCCL_SOCKET_IFNAME
    when set), and the IB/RoCE devices: a problem only across nodes."""
    env_if = os.environ.get("NCCL_SOCKET_IFNAME")
    way = route(peer)
    toward = f"toward {peer}" if peer else "on the default route"
    if env_if:
        interface = f"NCCL_SOCKET_IFNAME={env_if}"
    elif way is not None:
        interface = f"{way[1]} ({way[0]}, {toward})"
    else:
        interface = f"none {toward}"
    version = facts.get("nccl")
    text = f"NCCL {version or 'none (torch has no CUDA)'}; interface {interface}"
    found = [Finding("NCCL", text)]
    if env_if and way is not None and way[1] not in env_if.split(",") and peer:
        found.append(
            Finding(
                "NCCL",
                f"NCCL_SOCKET_IFNAME={env_if}, but {peer} is reached through {way[1]}",
                f"export NCCL_SOCKET_IFNAME={way[1]} GLOO_SOCKET_IFNAME={way[1]} (the link "
                "between the nodes), or --master-addr the head's address on that link",
            )
        )
    devices = ib_devices()
    if devices:
        found.append(Finding("NCCL", f"IB/RoCE devices: {', '.join(devices)}"))
        down = [d for d in devices if not d.endswith("ACTIVE")]
        if down and across:
            found.append(
                Finding(
                    "NCCL",
                    f"IB/RoCE ports not active: {', '.join(down)}",
                    "bring the link up (`ibv_devinfo` shows its state), check the cable",
                )
            )
    elif across:
        found.append(
            Finding(
                "NCCL",
                "no InfiniBand/RoCE device (/sys/class/infiniband is empty): NCCL between "
                "the nodes runs over sockets",
                "install the RDMA stack (rdma-core; `ibv_devinfo` lists the NIC), or accept "
                "sockets (verify --require-transport ib would fail)",
            )
        )
    return found


# -- peers ----------------------------------------------------------------------------


def peer_findings(mine: Mapping[str, Any], peers: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Each other node: reached (and how fast), its clock, its versions against this one's."""
    found = []
    for peer in peers:
        who = f"node {peer['node']}"
        if peer.get("missing"):
            found.append(
                Finding(
                    who,
                    str(peer["missing"]),
                    "run `bakery doctor` there with the same --nnodes/--master-addr/"
                    "--master-port and BAKERY_VERIFY_TOKEN; open the port in its firewall",
                )
            )
            continue
        who = f"node {peer['node']} ({peer.get('host')})"
        offset, rtt = float(peer["offset"]), float(peer["rtt"])
        text = f"reached in {rtt * 1000:.1f} ms; its clock is {abs(offset) * 1000:.0f} ms " + (
            "ahead" if offset >= 0 else "behind"
        )
        fix = None
        if abs(offset) > CLOCK_SKEW:
            fix = "sync the clocks: `timedatectl set-ntp true` (or chrony) on every node"
        found.append(Finding(who, text, fix))
        differ = [k for k in _COMPARED if peer.get(k) != mine.get(k)]
        if differ:
            found.append(
                Finding(
                    who,
                    "versions differ: "
                    + ", ".join(f"{k} {peer.get(k)} there, {mine.get(k)} here" for k in differ),
                    "install the same torch, Triton and bakery on every node (verify checks "
                    "bakery's code too)",
                )
            )
    return found
