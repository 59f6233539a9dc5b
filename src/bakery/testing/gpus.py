"""The CUDA GPUs torch would see, found without importing torch.

``bakery verify`` decides between the GPU and Triton's interpreter, and names the device
in a run's reuse key, before pytest starts. Asking torch costs its import: 4.3-5.3 s on
the device's hosts (BENCHMARKS.md, 2026-12-05), a third of a warm GPU verify, paid again
by the pytest process that runs the tests. This module asks the two things torch itself
asks, and no more:

- whether the installed torch was built for CUDA: the ``cuda`` field of its generated
  ``torch/version.py``, read with ``ast`` (no code of torch runs);
- which devices the CUDA driver shows this process (``libcuda``'s ``cuInit``,
  ``cuDeviceGetCount`` and ``cuDeviceGetName`` through ``ctypes``): the driver applies
  ``CUDA_VISIBLE_DEVICES`` as it does for torch, and ``torch.cuda.get_device_name`` is
  the name the driver gives.

Hand-written because no kept library answers this without a CUDA toolkit (``cuda-python``
is a toolkit binding; ``nvidia-ml-py`` counts devices in PCI order, blind to
``CUDA_VISIBLE_DEVICES``). Where the answer may differ from torch's (a ROCm build of
torch, a torch this module cannot read), it asks torch. The pytest process checks
``torch.cuda.is_available()`` again before any test (plugin.py): a driver too old for
torch's CUDA fails there in one line.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
from dataclasses import dataclass
from pathlib import Path

#: The device in words under Triton's interpreter.
INTERPRETER = "cpu (Triton interpreter)"


class TorchMissing(Exception):
    """torch is not installed in this interpreter."""


@dataclass(frozen=True)
class Gpus:
    """The CUDA devices torch would see, in its order (``cuda:0`` first)."""

    names: tuple[str, ...]
    #: how they were found: ``driver`` (libcuda), ``torch`` (torch imported) or ``none``
    via: str

    def __bool__(self) -> bool:
        return bool(self.names)

    def describe(self) -> str:
        """``<name of cuda:0> xN``, or ``no GPU``: the device in a reuse key."""
        return f"{self.names[0]} x{len(self.names)}" if self.names else "no GPU"


def torch_build() -> dict[str, str | None] | None:
    """``cuda`` and ``hip`` of the installed torch's ``version.py`` (:func:`read_build`).
    :class:`TorchMissing` without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise TorchMissing("no module named 'torch'")
    return read_build(Path(next(iter(spec.submodule_search_locations))) / "version.py")


def read_build(path: Path) -> dict[str, str | None] | None:
    """``cuda`` and ``hip`` of a torch ``version.py``; None where the file cannot be read
    as plain assignments of strings or None."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    found: dict[str, str | None] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip"):
            if not isinstance(value, ast.Constant) or not isinstance(value.value, str | None):
                return None
            found[target.id] = value.value
    return found if "cuda" in found else None


def driver_devices(library: str = "libcuda.so.1") -> tuple[str, ...] | None:
    """The names of the devices the CUDA driver shows this process; () where it has
    none or fails to start, None where there is no driver library to ask."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return ()
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    names = []
    for ordinal in range(count.value):
        dev = ctypes.c_int(0)
        buf = ctypes.create_string_buffer(256)
        if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return ()
        if cuda.cuDeviceGetName(buf, len(buf), dev) != 0:
            return ()
        names.append(buf.value.decode("utf-8", "replace"))
    return tuple(names)


def _torch_devices() -> Gpus:
    import torch

    if not torch.cuda.is_available():
        return Gpus((), "torch")
    n = torch.cuda.device_count()
    return Gpus(tuple(map(torch.cuda.get_device_name, range(n))), "torch")


def visible() -> Gpus:
    """The CUDA GPUs torch would see. :class:`TorchMissing` without torch."""
    build = torch_build()
    if build is None or build.get("hip"):
        return _torch_devices()
    if not build.get("cuda"):
        return Gpus((), "none")  # a CPU build of torch sees no GPU, whatever the machine has
    names = driver_devices()
    if names is None:
        return Gpus((), "none")
    return Gpus(names, "driver")
