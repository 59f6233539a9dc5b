"""Declared stand-ins for ``vllm.*`` modules that cannot be loaded lightly.

Each stand-in is small, says why it exists, and offers only what the code under
test imports. ``prefer_tree=True`` means: load the tree's own file when it imports
lightly, stand in only when it does not (see :mod:`bakery.testing.loader`).

Only vLLM's own plumbing is declared here (Triton, platforms, math utilities, the
logger); a series declares the stand-ins of its own code paths from its tests, with
:func:`declare`, before it loads the tree's modules.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class StandIn:
    name: str
    reason: str
    build: Callable[[ModuleType], None]
    prefer_tree: bool = False
    #: In the full environment (``bakery verify --env full``), replace the tree only under
    #: Triton's interpreter (the host cannot run the real module); elsewhere the real
    #: module loads, and a stand-in that is not ``prefer_tree`` is not used at all.
    interpreter_only: bool = False


def _triton_utils(module: ModuleType) -> None:
    import triton
    import triton.language as tl

    module.triton = triton  # type: ignore[attr-defined]
    module.tl = tl  # type: ignore[attr-defined]
    module.HAS_TRITON = True  # type: ignore[attr-defined]
    try:
        import triton.language.extra.libdevice as tldevice
    except ImportError:
        pass
    else:
        module.tldevice = tldevice  # type: ignore[attr-defined]


class _Platform:
    """What the kernels ask of ``current_platform``: CUDA when torch sees a GPU, else CPU."""

    def _cuda(self) -> bool:
        import torch

        return bool(torch.cuda.is_available())

    @property
    def device_type(self) -> str:
        return "cuda" if self._cuda() else "cpu"

    @property
    def device_name(self) -> str:
        return self.device_type

    def is_cuda(self) -> bool:
        return self._cuda()

    def is_cuda_alike(self) -> bool:
        return self._cuda()

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_tpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return not self._cuda()

    def get_device_capability(self, device_id: int = 0) -> Any:
        if not self._cuda():
            return None
        import torch

        return torch.cuda.get_device_capability(device_id)

    def has_device_capability(self, capability: Any, device_id: int = 0) -> bool:
        current = self.get_device_capability(device_id)
        if current is None:
            return False
        wanted = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return bool(current[0] * 10 + current[1] >= wanted)

    def is_device_capability(self, capability: Any, device_id: int = 0) -> bool:
        current = self.get_device_capability(device_id)
        if current is None:
            return False
        wanted = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return bool(current[0] * 10 + current[1] == wanted)

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        current = self.get_device_capability(device_id)
        return current is not None and current[0] == capability // 10


def _platforms(module: ModuleType) -> None:
    module.current_platform = _Platform()  # type: ignore[attr-defined]


def _math_utils(module: ModuleType) -> None:
    def cdiv(a: int, b: int) -> int:
        return -(a // -b)

    def round_up(x: int, y: int) -> int:
        return ((x + y - 1) // y) * y

    def next_power_of_2(n: int) -> int:
        return 1 if n < 1 else 1 << (n - 1).bit_length()

    module.cdiv = cdiv  # type: ignore[attr-defined]
    module.round_up = round_up  # type: ignore[attr-defined]
    module.next_power_of_2 = next_power_of_2  # type: ignore[attr-defined]
    module.prod = math.prod  # type: ignore[attr-defined]


def _logger(module: ModuleType) -> None:
    def init_logger(name: str) -> logging.Logger:
        return logging.getLogger(name)

    module.init_logger = init_logger  # type: ignore[attr-defined]


_DECLARED = (
    StandIn(
        "vllm.triton_utils",
        "the real one turns Triton off without a GPU driver; re-exports triton, tl",
        _triton_utils,
        interpreter_only=True,
    ),
    StandIn(
        "vllm.platforms",
        "the real one probes drivers and imports much of vLLM; CUDA iff torch sees a GPU",
        _platforms,
    ),
    StandIn(
        "vllm.utils.math_utils", "cdiv, round_up, next_power_of_2", _math_utils, prefer_tree=True
    ),
    StandIn("vllm.logger", "init_logger = logging.getLogger", _logger, prefer_tree=True),
)

#: The stand-ins the loader knows, by module name.
STANDINS: dict[str, StandIn] = {s.name: s for s in _DECLARED}


def declare(*standins: StandIn) -> None:
    """Add a series' stand-ins (before its tests load the modules that import them).

    Declaring the same stand-in again is a no-op; another one for a declared name is
    refused, so that two series cannot silently stand in one module differently."""
    for standin in standins:
        known = STANDINS.get(standin.name)
        if known is not None and (known.reason, known.prefer_tree) != (
            standin.reason,
            standin.prefer_tree,
        ):
            raise ValueError(f"{standin.name} is stood in already: {known.reason}")
        STANDINS[standin.name] = standin
